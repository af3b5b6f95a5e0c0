"""The shipped Prometheus rules: valid, and firing/resolving as their unit tests expect.

Needs ``promtool`` (Debian's ``prometheus`` package: ``.ci/install-debian.sh promtool prometheus``); skips without it.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

RULES_DIR = Path(__file__).parent.parent / "deploy" / "prometheus"
promtool = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(promtool is None, reason="promtool not installed (.ci/install-debian.sh promtool prometheus)")


@needs_promtool
def test_rules_file_is_valid():
    done = subprocess.run([promtool, "check", "rules", str(RULES_DIR / "alerts.yml")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "11 rules found" in done.stdout


@needs_promtool
def test_rules_fire_and_resolve_on_recorded_series():
    done = subprocess.run([promtool, "test", "rules", "alerts_test.yml"], cwd=RULES_DIR, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
