#!/bin/sh
# The many-replica tests, `make replicas` and the hosted-crowd benchmark put Debian's nginx in front of the
# app's replicas (sticky sessions, WebSocket upgrade). Only the binary is used: each run writes its own
# config in a temporary folder and starts nginx as a child process, never the system service.
set -e
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing Debian's nginx (nginx-light) for the replica tests..."
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null 2>&1 \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light >/dev/null; }
  # A service the package may have started is not ours to keep: the tests start their own nginx.
  if [ -f /run/nginx.pid ]; then /usr/sbin/nginx -s stop 2>/dev/null || true; fi
  exit 0
fi
echo "The replica tests need nginx: run 'sudo apt-get install nginx-light' (or nginx)." >&2
exit 1
