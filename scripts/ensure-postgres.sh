#!/bin/sh
# The run store's tests start a throwaway PostgreSQL cluster of their own (tests/support/postgres.py): they need the
# server's binaries, initdb and pg_ctl (Debian keeps them in /usr/lib/postgresql/<version>/bin, off PATH).
set -e
found() {
  { command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; } \
    || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1
}
if found; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing Debian's PostgreSQL server for the run store's tests..."
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null 2>&1 \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; }
  found && exit 0
fi
echo "The run store's tests need PostgreSQL's server (initdb, pg_ctl): run 'sudo apt-get install postgresql'." >&2
exit 1
