#!/bin/sh
# likwid-bench (Debian package `likwid`): the independent reference `make bench` compares the roofline probe with.
# Installs it as root where apt-get exists; elsewhere the benchmark says it is missing and compares with STREAM only.
set -e
command -v likwid-bench >/dev/null 2>&1 && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    apt-get install -y -q likwid >/dev/null || (apt-get update -q >/dev/null && apt-get install -y -q likwid >/dev/null)
else
    echo "likwid-bench not found: install the Debian package likwid (as root) for the roofline benchmark" >&2
fi
