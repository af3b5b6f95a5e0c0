"""`adaptive-spec dashboard` starts Streamlit on the app, and the dashboard never imports torch."""

import ast
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from adaptive_spec.errors import InvalidParameterError
from dashboard.cli import APP, streamlit_command
from test_layers import RUN_CLI, run_in_fresh_interpreter

REPO = Path(__file__).resolve().parents[1]


def test_command_line_names_the_app_address_and_store(tmp_path):
    command = streamlit_command(tmp_path / "t.sqlite", 8600, "0.0.0.0")
    assert command[1:5] == ["-m", "streamlit", "run", str(APP)]
    assert command[command.index("--server.port") + 1] == "8600"
    assert command[command.index("--server.address") + 1] == "0.0.0.0"
    assert command[-3:] == ["--", "--telemetry-db", str(tmp_path / "t.sqlite")]
    assert "--" not in streamlit_command(None, 8501, "127.0.0.1")


@pytest.mark.parametrize("port, host, name", [(0, "127.0.0.1", "port"), (70000, "127.0.0.1", "port"), (8501, " ", "host")])
def test_bad_address_names_the_parameter(port, host, name):
    with pytest.raises(InvalidParameterError, match=f"invalid {name}="):
        streamlit_command(None, port, host)


def test_dashboard_code_never_imports_torch_or_transformers():
    for path in (REPO / "dashboard").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            assert not any(n.split(".")[0] in ("torch", "transformers") for n in names), (path, names)


# renders every page in a fresh interpreter, then reports what it imported
PAGES = """
import json, sys
from streamlit.testing.v1 import AppTest
at = AppTest.from_file(sys.argv[1], default_timeout=60).run()
for page in ("alerts", "controllers", "whatif"):
    at.switch_page(f"app_pages/{page}.py").run()
    assert not at.exception, [e.value for e in at.exception]
print("LAYERS " + json.dumps({"code": 0, "torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules}))
"""


def test_pages_render_without_torch_or_transformers(tmp_path):
    from adaptive_spec.telemetry.store import connect, write_batch

    end = time.time() - 60
    conn = connect(tmp_path / "default.sqlite")  # the store run_in_fresh_interpreter points the default at
    write_batch(conn, [("intervals", ("run", "tiny", "k", "ngram", end - 2, end, 12, 10, 40, 24, 32, 40, 0.01, 1.9,
                                      "[10, 10, 10, 10]", "[8, 6, 6, 4]"))])
    conn.close()
    report, output = run_in_fresh_interpreter(PAGES, str(APP), tmp_path=tmp_path)
    assert report == {"code": 0, "torch": False, "transformers": False}, output


def test_help_lists_the_command_without_importing_torch(tmp_path):
    report, output = run_in_fresh_interpreter(RUN_CLI, "dashboard", "--help", tmp_path=tmp_path)
    assert report == {"code": 0, "torch": False, "transformers": False}, output
    assert "--telemetry-db" in output and "--port" in output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_dashboard_command_serves_the_app_and_stops_it_on_sigterm(tmp_path):
    port = _free_port()
    proc = subprocess.Popen([sys.executable, "-m", "adaptive_spec.cli", "dashboard", "--port", str(port),
                             "--telemetry-db", str(tmp_path / "t.sqlite")], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline, health = time.monotonic() + 60, None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                health = urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2).read()
                break
            except OSError:
                time.sleep(0.5)
        assert health == b"ok", proc.stdout.read() if proc.poll() is not None else "no answer in 60 s"
        assert urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).status == 200
        proc.send_signal(signal.SIGTERM)  # to the command only, as a service manager would
        proc.wait(timeout=30)
        with pytest.raises(OSError):  # Streamlit stopped with it
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # whatever is left of the command and its server
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
