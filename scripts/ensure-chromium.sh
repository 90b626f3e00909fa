#!/bin/sh
# The browser tests drive Debian's Chromium (Playwright's own browser download is not used).
set -e
if command -v chromium >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing Debian's chromium for the browser tests..."
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  exit 0
fi
echo "The browser tests need Chromium: run 'sudo apt-get install chromium' (or set CHROMIUM to its path)." >&2
exit 1
