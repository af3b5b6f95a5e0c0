"""Headless Chromium driven over the DevTools protocol, with ``websockets`` (a Streamlit dependency).

Enough for the dashboard's browser test: open a URL, wait until the page holds some texts and
Streamlit has stopped running the script, read whether an exception element is shown, take a
full-page screenshot. No browser-driver package and no browser download: Debian's ``chromium``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import subprocess
import time
import urllib.request
from pathlib import Path

from websockets.sync.client import connect

# the page's state in one evaluation: its text, an exception element, Streamlit's "Running..." widget
STATE = """JSON.stringify({
  text: document.body ? document.body.innerText : "",
  exception: !!document.querySelector('[data-testid="stException"]'),
  running: !!document.querySelector('[data-testid="stStatusWidget"]'),
})"""


class Chromium:
    def __init__(self, executable: str, profile: Path, width: int = 1400, height: int = 1000) -> None:
        self.process = subprocess.Popen(
            [executable, "--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-port=0", f"--user-data-dir={profile}", f"--window-size={width},{height}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line and self.process.poll() is not None:
                raise RuntimeError("chromium exited before it listened")
            if match := re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line):
                port = int(match.group(1))
        if port is None:
            raise RuntimeError("chromium did not say where DevTools listens")
        targets = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10).read())
        page = next(t for t in targets if t["type"] == "page")
        self.stack = contextlib.ExitStack()  # websockets wants its connection used as a context manager
        self.ws = self.stack.enter_context(connect(page["webSocketDebuggerUrl"], max_size=64 << 20))
        self.next_id = 0

    def call(self, method: str, **params) -> dict:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:  # events arrive in between: skip them
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message["result"]

    def state(self) -> dict:
        return json.loads(self.call("Runtime.evaluate", expression=STATE, returnByValue=True)["result"]["value"])

    def open(self, url: str, shows: list[str], timeout_s: float = 60.0, settle_s: float = 1.0) -> dict:
        """Load ``url``; wait until its text holds every one of ``shows`` and the script has not been
        running for ``settle_s`` (an exception ends the wait at once). Returns the last state."""
        self.call("Page.navigate", url=url)
        deadline, idle_since = time.monotonic() + timeout_s, None
        while True:
            state = self.state()
            if state["exception"]:
                return state
            ready = all(s in state["text"] for s in shows) and not state["running"]
            idle_since = (idle_since or time.monotonic()) if ready else None
            if idle_since is not None and time.monotonic() - idle_since >= settle_s:
                return state
            if time.monotonic() > deadline:
                return state
            time.sleep(0.25)

    def screenshot(self, path: Path, clip: dict | None = None) -> None:
        """The page as a PNG; ``clip``: only that region (x, y, width, height in CSS pixels)."""
        extra = {"clip": {**clip, "scale": 1}} if clip else {}
        data = self.call("Page.captureScreenshot", format="png", captureBeyondViewport=True, **extra)["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        try:
            self.stack.close()
        finally:
            self.process.terminate()
            self.process.wait(timeout=30)
