#!/bin/sh
# Installs Chromium (Debian's chromium package) for tests/test_dashboard_browser.py, which drives it
# headless over DevTools. .ci/run requires that test to run; elsewhere it skips without Chromium.
set -eu
if command -v chromium >/dev/null 2>&1; then
    chromium --version | head -n 1
    exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium
chromium --version | head -n 1
