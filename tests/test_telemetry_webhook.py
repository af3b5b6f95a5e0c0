"""The alert webhook against a real HTTP server on 127.0.0.1: retries, timeouts, never blocking."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from adaptive_spec.telemetry.alerts import Transition
from adaptive_spec.telemetry.webhook import WebhookConfig, WebhookNotifier

FIRING = Transition("firing", "acceptance_collapse", "m", "k", "ngram", 1_700_000_000.0, None, 0.05, 0.3, "acceptance 0.05")


class Receiver:
    """Answers with ``statuses`` in turn (then 200), or 503 while ``down``; ``hold`` makes every
    handler wait on it first."""

    def __init__(self, statuses=(), hold: threading.Event | None = None):
        self.statuses, self.hold, self.bodies, self.down = list(statuses), hold, [], False
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if receiver.hold is not None:
                    receiver.hold.wait(5)
                receiver.bodies.append(body)
                status = 503 if receiver.down else receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_delivers_an_alertmanager_style_payload_after_retrying_server_errors(tmp_path):
    receiver = Receiver(statuses=[500, 503])
    notifier = WebhookNotifier(WebhookConfig(receiver.url, timeout_s=2.0, retries=3, backoff_s=0.01), tmp_path / "t.sqlite")
    notifier.notify([FIRING])
    assert notifier.wait_idle()
    receiver.close()
    assert (notifier.stats.attempts, notifier.stats.sent, notifier.stats.failures) == (3, 1, 0)
    body = receiver.bodies[-1]
    assert body["status"] == "firing" and body["version"] == "4"
    (alert,) = body["alerts"]
    assert alert["labels"] == {"alertname": "acceptance_collapse", "model": "m", "key": "k", "drafter": "ngram"}
    assert alert["startsAt"].startswith("2023-11-14T22:13:20") and alert["endsAt"] == "0001-01-01T00:00:00Z"


def test_a_slow_receiver_times_out_is_counted_and_never_blocks_the_caller(tmp_path):
    hold = threading.Event()
    receiver = Receiver(hold=hold)
    notifier = WebhookNotifier(WebhookConfig(receiver.url, timeout_s=0.2, retries=1, backoff_s=0.01), tmp_path / "t.sqlite")
    notifier.notify([FIRING])  # returns while the receiver is still holding the request
    assert notifier.stats.sent == 0
    assert notifier.wait_idle()
    hold.set()
    receiver.close()
    assert (notifier.stats.attempts, notifier.stats.failures, notifier.stats.sent) == (2, 1, 0)


def test_a_dead_receiver_is_counted_and_logged_once_per_payload(tmp_path, caplog):
    receiver = Receiver()
    url = receiver.url
    receiver.close()  # nothing listens there any more
    notifier = WebhookNotifier(WebhookConfig(url, timeout_s=0.5, retries=1, backoff_s=0.0), tmp_path / "t.sqlite")
    notifier.notify([FIRING])
    notifier.notify([FIRING])
    assert notifier.wait_idle()
    notifier.close()
    assert (notifier.stats.failures, notifier.stats.sent) == (2, 0)
    # a payload given up is an alert the receiver never saw: one line each (transitions are rare)
    assert len([m for m in caplog.messages if "alert webhook" in m]) == 2


@pytest.mark.parametrize("url", ["ftp://x/y", "localhost:9000", "",
                                 # a bad port or no host used to pass, then fail every attempt at every alert
                                 "http://127.0.0.1:abc/hook", "http://127.0.0.1:99999/hook", "http://:9000/hook",
                                 "http://[::1/hook"])
def test_bad_webhook_url_is_rejected_by_name(url):
    with pytest.raises(ValueError, match="url=") as err:
        WebhookConfig(url)
    assert repr(url) in str(err.value)
