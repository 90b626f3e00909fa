#!/bin/sh
# The emulated-CPU test runs the default llama-server under `qemu-x86_64 -cpu Haswell` (Debian's qemu-user).
set -e
if command -v qemu-x86_64 >/dev/null 2>&1; then exit 0; fi
if [ "$(uname -m)" != "x86_64" ]; then exit 0; fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing Debian's qemu-user for the emulated-CPU test..."
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user >/dev/null 2>&1 \
    || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user >/dev/null; }
  exit 0
fi
echo "The emulated-CPU test needs qemu-user: run 'sudo apt-get install qemu-user'." >&2
exit 1
