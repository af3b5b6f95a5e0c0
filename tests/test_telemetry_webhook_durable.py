"""Alert notifications are durable: recorded in the store with the alert, marked delivered only
after a 2xx, flushed (bounded) at exit, sent by the next start when the exit could not, and one
warning line when one is given up. Receivers are real HTTP servers on 127.0.0.1."""

import dataclasses
import json
import logging
import time

from adaptive_spec.telemetry import build_observers, store
from adaptive_spec.telemetry.alerts import Transition
from adaptive_spec.telemetry.webhook import WebhookConfig, WebhookNotifier
from test_telemetry_webhook import Receiver

FIRING = Transition("firing", "acceptance_collapse", "m", "k", "ngram", 1_700_000_000.0, None, 0.05, 0.3, "acceptance 0.05")


def notifications(path):
    conn = store.connect(path)
    try:
        return [dict(r) for r in conn.execute("SELECT * FROM notifications ORDER BY id")]
    finally:
        conn.close()


def write_collapse(path, now):
    """Interval rows on which the default rules see an acceptance collapse at ``now``: 0.9
    acceptance for ten minutes, then 0.025 for the last 110 s (window 60 s, held 30 s)."""
    cols = store.COLUMNS["intervals"]
    rows = []
    for age in range(700, 0, -1):
        accepted = 36 if age > 110 else 1
        row = dict.fromkeys(cols, 0) | dict(run_id="r", model="m", key="k", drafter="ngram", start_time=now - age,
                                            end_time=now - age, draft_tokens=40, accepted_tokens=accepted,
                                            emitted_tokens=accepted + 10, proposed_per_pos="[]", accepted_per_pos="[]")
        rows.append(("intervals", tuple(row[c] for c in cols)))
    conn = store.connect(path)
    store.write_batch(conn, rows)
    conn.close()


def test_exit_waits_for_the_retries_and_the_store_records_the_delivery(tmp_path):
    # the receiver is down for two attempts; before, the process exited right after queueing
    receiver = Receiver(statuses=[503, 503])
    path = tmp_path / "t.sqlite"
    write_collapse(path, time.time())
    (recorder,) = build_observers(f"sqlite:{path}?webhook={receiver.url}")
    recorder.close()  # what a CLI run does at exit: the last evaluation fires, then the flush
    receiver.close()
    assert len(receiver.bodies) == 3  # 503, 503, then 200: all three attempts made before close returned
    assert receiver.bodies[-1]["alerts"][0]["labels"]["alertname"] == "acceptance_collapse"
    (row,) = notifications(path)
    assert (row["state"], row["attempts"]) == ("delivered", 3) and row["delivered_at"] is not None
    assert [a["state"] for a in store.read_alerts(path)] == ["firing"]


def test_pending_notifications_outlive_the_exit_and_the_next_start_sends_them(tmp_path, caplog):
    receiver = Receiver()
    receiver.down = True  # answers 503
    path = tmp_path / "t.sqlite"
    config = WebhookConfig(receiver.url, timeout_s=1.0, retries=5, backoff_s=0.5, exit_flush_s=0.1)
    first = WebhookNotifier(config, path)
    first.notify([FIRING])
    while first.stats.attempts == 0:
        time.sleep(0.01)
    with caplog.at_level(logging.WARNING, logger="adaptive_spec"):
        first.close()  # the retry is due after the flush bound: it stays pending
    (row,) = notifications(path)
    assert (row["state"], row["attempts"], row["delivered_at"]) == ("pending", 1, None)  # a 503 is not a delivery
    assert "503" in row["last_error"]
    (line,) = [m for m in caplog.messages if "still pending" in m]
    assert str(path) in line and "\n" not in line

    receiver.down = False
    second = WebhookNotifier(config, path)  # the next run, same store and webhook
    assert second.wait_idle(timeout_s=10)
    second.close()
    receiver.close()
    (row,) = notifications(path)
    assert (row["state"], row["attempts"]) == ("delivered", 2)
    assert [b["alerts"][0]["labels"]["alertname"] for b in receiver.bodies][-1] == "acceptance_collapse"
    assert second.stats.sent == 1


def test_a_notification_given_up_is_one_warning_line_and_stays_in_the_store(tmp_path, caplog):
    receiver = Receiver()
    receiver.down = True
    path = tmp_path / "t.sqlite"
    notifier = WebhookNotifier(WebhookConfig(receiver.url, timeout_s=1.0, retries=1, backoff_s=0.0), path)
    with caplog.at_level(logging.WARNING, logger="adaptive_spec"):
        notifier.notify([FIRING])
        assert notifier.wait_idle()
        notifier.close()
    receiver.close()
    (row,) = notifications(path)
    assert (row["state"], row["attempts"]) == ("failed", 2)
    assert json.loads(row["payload"])["alerts"][0]["annotations"]["summary"] == "acceptance 0.05"
    (line,) = [m for m in caplog.messages if "gave up" in m]
    assert "acceptance_collapse firing m/k/ngram" in line and "2 attempts" in line and "\n" not in line
    assert not [m for m in caplog.messages if "still pending" in m]


def test_order_is_kept_a_resolution_never_overtakes_its_firing(tmp_path):
    receiver = Receiver(statuses=[503])  # the firing fails once
    path = tmp_path / "t.sqlite"
    notifier = WebhookNotifier(WebhookConfig(receiver.url, retries=3, backoff_s=0.05), path)
    resolved = dataclasses.replace(FIRING, state="resolved", resolved_at=1_700_000_100.0, value=0.6, message="acceptance 0.6")
    notifier.notify([FIRING])
    notifier.notify([resolved])
    assert notifier.wait_idle()
    notifier.close()
    receiver.close()
    assert [b["status"] for b in receiver.bodies] == ["firing", "firing", "resolved"]
