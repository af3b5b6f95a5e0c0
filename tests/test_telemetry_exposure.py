"""What telemetry exposes: metrics served to this machine unless a host is asked for, and store
directories and files that only their owner can read, whatever the umask."""

import os
import socket
import stat
import time

import pytest

from adaptive_spec import InvalidParameterError
from adaptive_spec.telemetry import build_observers, parse_spec, spec
from adaptive_spec.telemetry.writer import BackgroundWriter


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("text, host", [("prometheus:9464", "127.0.0.1"), ("prometheus:0.0.0.0:9464", "0.0.0.0"),
                                        ("prometheus:[::1]:9464", "::1"), ("prometheus:localhost:9464", "localhost")])
def test_prometheus_binds_loopback_unless_a_host_is_given(text, host):
    (part,) = parse_spec(text)
    assert (part.host, part.port) == (host, 9464)


def test_bare_ipv6_host_is_refused_naming_the_spec():
    with pytest.raises(InvalidParameterError, match=r"\[::1\]:PORT"):
        parse_spec("prometheus:::1:9464")


def test_prometheus_server_of_a_bare_port_listens_on_loopback_only():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    build_observers(f"prometheus:{port}")
    server = spec._prometheus_servers[("127.0.0.1", port)]
    httpd = server[0] if isinstance(server, tuple) else server
    assert httpd.server_address[0] == "127.0.0.1"


def test_help_documents_the_host_form():
    from adaptive_spec.cli import TELEMETRY_HELP

    assert "prometheus:[HOST:]PORT" in TELEMETRY_HELP and "127.0.0.1" in TELEMETRY_HELP


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_store_directories_are_0700_and_the_store_0600_whatever_the_umask(tmp_path, umask):
    path = tmp_path / "a" / "b" / "t.sqlite"
    parent_mode = mode(tmp_path)
    before = os.umask(umask)
    try:
        writer = BackgroundWriter(path)
        writer.put("decisions", ("r", time.time(), "m", "k", "speculation", None, "on", None, ""))
        assert writer.flush() and writer.stats.written == 1
        assert (mode(tmp_path / "a"), mode(tmp_path / "a" / "b")) == (0o700, 0o700)
        store_files = [p for p in path.parent.iterdir() if p.name.startswith("t.sqlite")]
        assert path in store_files and {p.name: mode(p) for p in store_files} == {p.name: 0o600 for p in store_files}
        writer.close()
    finally:
        os.umask(before)
    assert mode(tmp_path) == parent_mode  # an existing parent is left as it was


def test_existing_directories_keep_their_mode(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o755)
    writer = BackgroundWriter(shared / "t.sqlite")
    writer.put("decisions", ("r", time.time(), "m", "k", "speculation", None, "on", None, ""))
    assert writer.flush()
    writer.close()
    assert mode(shared) == 0o755 and mode(shared / "t.sqlite") == 0o600
