"""The Live page's screenshot, taken the way an on-call engineer would see it: ``adaptive-spec serve``
(the default ``adaptive`` controller) records into a fresh telemetry store while ``adaptive-spec
loadgen`` sends traffic that shifts from copy-heavy to open-ended requests and back; then
``adaptive-spec dashboard`` on that store is opened in headless Chromium (Debian's ``chromium``,
driven by ``tests/browser_kit.py``) and the Live page is saved as a PNG.

    python -m benchmarks.dashboard_screenshots --out-dir dashboard/screenshots

With ``--max-batch N`` the server batches (continuous batching, its default batch cap) and the
shot is the page's Batching section alone (``live_batched.png``); ``--store`` keeps the run's store
(``adaptive-spec telemetry batches --db`` on it gives the section's figures)::

    python -m benchmarks.dashboard_screenshots --max-batch 8 --rate 0.4 --store run.sqlite --out-dir dashboard/screenshots
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # browser_kit: the tests' DevTools driver, no extra package

from benchmarks.serve_shift import free_port  # noqa: E402
from browser_kit import Chromium  # noqa: E402


def wait_for(url: str, proc: subprocess.Popen, what: str, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if urllib.request.urlopen(url, timeout=2).status == 200:
                return
        except OSError:
            pass
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not become ready in {timeout_s:g} s")
        time.sleep(1)


def stop(proc: subprocess.Popen) -> None:
    os.killpg(proc.pid, signal.SIGTERM)  # the command and whatever it started (Streamlit)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def record(store: Path, args: argparse.Namespace) -> None:
    """Serve with the store as telemetry and send the shifting traffic through loadgen."""
    port = free_port()
    batching = ["--max-batch", str(args.max_batch)] if args.max_batch > 1 else []
    server = subprocess.Popen([sys.executable, "-m", "adaptive_spec.cli", "serve", "--port", str(port),
                               "--telemetry", f"sqlite:{store}", "--max-queue", "1000", *batching],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(f"http://127.0.0.1:{port}/health", server, "the server")
        subprocess.run([sys.executable, "-m", "adaptive_spec.cli", "loadgen", "--url", f"http://127.0.0.1:{port}",
                        "--prompts", str(args.prompts), "--rate", str(args.rate), "--schedule", args.schedule,
                        "--max-tokens", str(args.max_tokens), "--traffic-key", args.traffic_key, "--seed", "0",
                        "--endpoint", args.endpoint],
                       cwd=ROOT, check=True)
    finally:
        stop(server)  # SIGTERM drains the server; the store's writer flushes on the way out


# the Batching section's top and the next section's: the region of the batched shot
SECTION_JS = """(() => {
  const heads = [...document.querySelectorAll('h3')];
  const i = heads.findIndex(h => h.innerText.trim() === 'Batching');
  if (i < 0) return null;
  const top = heads[i].getBoundingClientRect().top + window.scrollY;
  const next = heads[i + 1] ? heads[i + 1].getBoundingClientRect().top + window.scrollY : document.body.scrollHeight;
  return JSON.stringify({top, next, width: document.body.scrollWidth});
})()"""


def shoot(store: Path, out_dir: Path, profile: Path, batched: bool = False) -> Path:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium on PATH (.ci/install-debian.sh chromium chromium)")
    port = free_port()
    dashboard = subprocess.Popen([sys.executable, "-m", "adaptive_spec.cli", "dashboard", "--port", str(port),
                                  "--telemetry-db", str(store)], cwd=ROOT, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL, start_new_session=True)
    browser = None
    try:
        wait_for(f"http://127.0.0.1:{port}/_stcore/health", dashboard, "the dashboard", 120)
        browser = Chromium(chromium, profile, width=1400, height=2900 if batched else 1900)
        # without the refresh timer: a page that reruns every 2 s never settles for the shot
        shows = ["acceptance rate", "not refreshing", *(["rows per forward"] if batched else [])]
        state = browser.open(f"http://127.0.0.1:{port}/?refresh=off&embed=true", shows, timeout_s=120, settle_s=3)
        if state["exception"] or "acceptance rate" not in state["text"]:
            raise RuntimeError(f"the Live page did not render: {state['text'][:500]}")
        # the page alone: the navigation sidebar adds nothing to a picture of one page
        browser.call("Runtime.evaluate", expression="document.querySelector('[data-testid=stSidebar]')?.remove()")
        time.sleep(1)
        out_dir.mkdir(parents=True, exist_ok=True)
        if not batched:
            path = out_dir / "live.png"
            browser.screenshot(path)
            return path
        found = browser.call("Runtime.evaluate", expression=SECTION_JS)["result"].get("value")
        if not found:
            raise RuntimeError("the Live page shows no Batching section: did the server batch?")
        box = json.loads(found)
        path = out_dir / "live_batched.png"
        browser.screenshot(path, clip={"x": 0, "y": max(0.0, box["top"] - 16), "width": box["width"],
                                       "height": box["next"] - box["top"]})
        return path
    finally:
        if browser is not None:
            browser.close()
        stop(dashboard)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=Path, default=ROOT / "benchmarks" / "shift.jsonl")
    parser.add_argument("--schedule", default="copy:90,open:90,copy:60",
                        help="loadgen's traffic-mix schedule; the Live page's default window is 15 min")
    parser.add_argument("--rate", type=float, default=0.12, help="requests per second (about half the capacity of chat traffic here)")
    parser.add_argument("--endpoint", default="chat", choices=["chat", "completions"], help="chat: the prompts through the chat template, as users send them")
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--traffic-key", default="chat", help="one key: one controller through the shift")
    parser.add_argument("--max-batch", type=int, default=1,
                        help="serve --max-batch: above 1, the shot is the Live page's Batching section")
    parser.add_argument("--out-dir", type=Path, default=ROOT / "dashboard" / "screenshots")
    parser.add_argument("--store", type=Path, default=None,
                        help="keep the run's telemetry store here (a new file; default: a temporary one)")
    args = parser.parse_args(argv)
    for name, value in (("rate", args.rate), ("max_tokens", args.max_tokens), ("max_batch", args.max_batch)):
        if not value > 0:
            parser.error(f"{name}={value}: must be > 0")
    if args.store is not None and args.store.exists():
        parser.error(f"store={str(args.store)!r}: already exists; the shot needs a fresh store")
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or Path(tmp) / "telemetry.sqlite"
        record(store, args)
        print(f"wrote {shoot(store, args.out_dir, Path(tmp) / 'chromium', batched=args.max_batch > 1)}")


if __name__ == "__main__":
    main()
