#!/bin/sh
# Installs promtool (Debian's prometheus package) for tests/test_telemetry_prometheus_rules.py.
# The test skips when promtool is absent, so this script is optional for local runs.
set -eu
if command -v promtool >/dev/null 2>&1; then
    promtool --version | head -n 1
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
# the package's service is not started in containers without systemd; only promtool is used
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus
promtool --version | head -n 1
