"""``adaptive-spec dashboard``: ``streamlit run dashboard/app.py`` as a subprocess.

A subprocess rather than Streamlit's in-process bootstrap: Streamlit owns the process it serves
from (signal handlers, its event loop, its own CLI flags), and this command only needs to hand it
the store's path and where to listen. Importing this module imports neither Streamlit nor torch,
so mounting the command costs the CLI nothing.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer

from adaptive_spec.errors import AdaptiveSpecError, InvalidParameterError

APP = Path(__file__).resolve().parent / "app.py"


def streamlit_command(telemetry_db: Path | None, port: int, host: str) -> list[str]:
    """The ``streamlit run`` command line; the app reads ``--telemetry-db`` after ``--``."""
    if not 1 <= port <= 65535:
        raise InvalidParameterError("port", port, "must be in [1, 65535]")
    if not host.strip():
        raise InvalidParameterError("host", host, "must be an address or host name such as 127.0.0.1")
    command = [sys.executable, "-m", "streamlit", "run", str(APP), "--server.port", str(port),
               "--server.address", host, "--server.headless", "true", "--browser.gatherUsageStats", "false"]
    if telemetry_db is not None:
        command += ["--", "--telemetry-db", str(telemetry_db.expanduser().resolve())]
    return command


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def dashboard(
    telemetry_db: Optional[Path] = typer.Option(
        None, "--telemetry-db", help="Telemetry store (default: $ADAPTIVE_SPEC_TELEMETRY_DB or the user data "
                                     "directory's telemetry.sqlite). It may not exist yet: the pages say so."),
    port: int = typer.Option(8501, "--port", help="Port to serve the dashboard on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind; the dashboard has no login."),
) -> None:
    """Ops dashboard (Streamlit): live acceptance, latency and controller, alerts, simulator what-ifs."""
    if importlib.util.find_spec("streamlit") is None:
        raise AdaptiveSpecError("streamlit is not installed: pip install 'streamlit>=1.40'")
    command = streamlit_command(telemetry_db, port, host)
    if not _is_loopback(host):
        # the pages show model names, traffic keys and latencies to anyone who can reach the port
        typer.echo(f"note: serving on {host}, reachable from other machines, without a login", err=True)
    process = subprocess.Popen(command)
    # a service manager stops this command with SIGTERM: pass it on, or Streamlit outlives us
    signal.signal(signal.SIGTERM, lambda signum, frame: process.terminate())
    try:
        code = process.wait()
    except KeyboardInterrupt:
        # the terminal's Ctrl-C reached Streamlit too: let it shut down cleanly, then make sure
        try:
            code = process.wait(timeout=10)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            process.terminate()
            code = process.wait()
    raise typer.Exit(code if code >= 0 else 128 - code)  # killed by signal N: 128 + N, as a shell reports it
