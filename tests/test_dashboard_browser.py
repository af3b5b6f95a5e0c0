"""A real browser on every page: ``adaptive-spec dashboard`` on a loopback port, headless Chromium
(Debian's ``chromium``, driven over DevTools by ``browser_kit``) loads each page, which must
render its content, finish running and show no exception element; a screenshot of each is saved
(in ``$DASHBOARD_SCREENSHOTS`` when set, for looking at them).
Skipped where Chromium is not installed, except where ``ADAPTIVE_SPEC_BROWSER_TESTS=required`` (CI's
``.ci/run`` installs Chromium and sets it): there a missing browser fails the test.
"""

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from browser_kit import Chromium
from dashboard_testkit import record_store
from test_dashboard_cli import _free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REPO = Path(__file__).resolve().parents[1]
REQUIRED = os.environ.get("ADAPTIVE_SPEC_BROWSER_TESTS") == "required"
pytestmark = pytest.mark.skipif(CHROMIUM is None and not REQUIRED, reason="no chromium here (apt-get install chromium)")

# page URL -> texts the rendered page must show;
# the Live page without its refresh timer: a page that reruns every 2 s is never done running
PAGES = {
    "live": ("?refresh=off", ["acceptance rate", "Drafter the controller chose", "not refreshing"]),
    "alerts": ("alerts", ["Resolved in the last 24 h (1)", "AdaptiveSpecAcceptanceCollapse"]),
    "controllers": ("controllers", ["key copy", "Measured step costs"]),
    "whatif": ("whatif", ["policies to compare", "Run"]),
}


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    assert CHROMIUM, "ADAPTIVE_SPEC_BROWSER_TESTS=required but no chromium on PATH (.ci/install-debian.sh chromium chromium)"
    chromium = Chromium(CHROMIUM, tmp_path_factory.mktemp("chromium-profile"), height=2400)
    yield chromium
    chromium.close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    recorded = record_store(tmp_path_factory.mktemp("recorded"))
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "adaptive_spec.cli", "dashboard", "--port", str(port),
                             "--telemetry-db", str(recorded.final)], cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "the dashboard did not start"
                time.sleep(0.5)
        yield f"http://127.0.0.1:{port}/"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)  # the command and the Streamlit server it started
        proc.wait(timeout=30)


@pytest.mark.parametrize("name", list(PAGES))
def test_page_renders_in_a_browser_without_an_exception(server, browser, name, tmp_path):
    path, shows = PAGES[name]
    state = browser.open(server + path, shows)
    assert not state["exception"], state["text"][:2000]
    for text in shows:
        assert text in state["text"], f"{name}: {text!r} not rendered"
    assert not state["running"]
    shots = Path(os.environ.get("DASHBOARD_SCREENSHOTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    browser.screenshot(shots / f"{name}.png")
    assert (shots / f"{name}.png").stat().st_size > 10_000  # a rendered page, not a blank one
