"""Running the app under uvicorn, with the shutdown a service needs.

SIGTERM (or Ctrl-C) first drains: new requests get 503 and ``/health`` turns 503 so a balancer
stops sending, the admitted requests finish within the grace period, then uvicorn stops and the
process exits 0. A second signal stops at once.
"""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import threading
import time

import uvicorn

from adaptive_spec.errors import InvalidParameterError

log = logging.getLogger("adaptive_spec.server")


class DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, service) -> None:
        super().__init__(config)
        self.service = service
        self._draining = False

    def handle_exit(self, sig, frame) -> None:
        if self._draining:  # a second signal: stop now
            self.force_exit = True
            return super().handle_exit(sig, frame)
        self._draining = True
        log.info("draining: new requests get 503, admitted ones have %.0f s to finish", self.service.settings.grace_s)

        def drain_then_exit() -> None:
            finished = self.service.drain()
            if not finished:
                log.warning("grace period over with requests still running; stopping anyway")
            # not uvicorn's handle_exit: it records the signal and raises it again after the
            # shutdown, so the process would die of SIGTERM instead of exiting 0 after a clean drain
            self.should_exit = True

        threading.Thread(target=drain_then_exit, name="adaptive-spec-drain", daemon=True).start()


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, api_key: str | None, allow_open: bool) -> None:
    """Refuse to serve other machines without an API key, unless told to, and a blank key anywhere: it
    would let in every request with a bare ``Authorization: Bearer`` (``--api-key "$KEY"``, KEY unset)."""
    if api_key is not None and not api_key.strip():
        raise InvalidParameterError("api_key", api_key, "must not be blank; leave it out to serve without one")
    if not is_loopback(host) and api_key is None and not allow_open:
        raise InvalidParameterError("host", host, "binding a non-loopback address needs --api-key "
                                    "(or --allow-unauthenticated to serve other machines without one)")


def run(app, host: str, port: int, log_level: str = "info") -> None:
    config = uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                            timeout_graceful_shutdown=int(app.state.service.settings.grace_s) + 1)
    DrainingServer(config, app.state.service).run()


@contextlib.contextmanager
def serving_in_thread(app, host: str = "127.0.0.1", port: int = 0, timeout_s: float = 60.0):
    """Serve ``app`` from a thread of this process (notebooks, benchmarks, tests); yields its base URL
    once the app reports ready, and stops it on exit. ``port=0`` picks a free port."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, name="adaptive-spec-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not (server.started and app.state.service.status == "ok"):
        if app.state.service.status == "failed" or not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            raise RuntimeError(f"the server did not become ready (status {app.state.service.status!r})")
        time.sleep(0.02)
    bound = server.servers[0].sockets[0].getsockname()
    try:
        yield f"http://{bound[0]}:{bound[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=timeout_s)
