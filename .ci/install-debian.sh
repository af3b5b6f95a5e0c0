#!/bin/sh
# Installs a Debian package for the tests that need its command, unless the command is already here:
#   .ci/install-debian.sh promtool prometheus   (tests/test_telemetry_prometheus_rules.py)
#   .ci/install-debian.sh chromium chromium     (tests/test_dashboard_browser.py)
set -eu
command_name=$1
package=$2
if ! command -v "$command_name" >/dev/null 2>&1; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    # a package's service (prometheus) is not started in containers without systemd; only the command is used
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$package"
fi
"$command_name" --version | head -n 1
