"""Alert rules evaluated over the telemetry store: firing -> resolved, with timestamps.

Three built-in rules, each evaluated per series at a time ``now`` from the store alone (so the
writer thread, the CLI and the dashboard all reach the same verdict):

``acceptance_collapse`` (per model, key, drafter)
    ``rolling = sum(accepted_tokens) / sum(draft_tokens)`` over the last ``window_s``, and
    ``baseline`` the same ratio over the ``baseline_s`` before that window. Fires when
    ``rolling < floor`` *and* ``rolling < fraction * baseline`` at every check over the last
    ``for_s`` (checks every ``check_every_s``), each window holding ``min_draft_tokens``. Both
    conditions: a drafter that always accepts 0.1 is poor but has not collapsed (no alert), and a
    fall from 0.95 to 0.6 is a change but still healthy (no alert). Resolves when ``rolling`` is
    back at or above ``floor``; while the window has too few draft tokens to tell (speculation
    turned off by the guard, only probes running) the state is kept.
    Detection delay after a drop to ~0: ``(1 - floor) * window_s`` for the rolling rate to cross
    the floor, plus ``for_s``, plus the evaluation period: at most ``window_s + for_s +
    evaluate_every_s`` (``CollapseRule.max_delay_s``).

``speculation_off`` (per model, key)
    The last ``speculation`` decision (``tracker.py``) switched it off (from on; a series that
    starts off, such as a plain-decoding config, is not alerted on) at least ``limit_s`` ago, and
    the series had steps in the last ``limit_s``. Resolves when speculation is back on.

``tpot_regression`` (per model, key)
    Speculative time per output token ``sum(draft_s + verify_s) / sum(emitted_tokens)`` over the
    series' speculative rows (drafter != none) in the last ``window_s``, against plain decoding's,
    from the same model's plain rows (the adaptive guard's plain probes, or a plain
    configuration) over the last ``plain_window_s``. Fires when ``spec > ratio * plain`` at every
    check over ``for_s``, both sides holding ``min_tokens``; resolves when ``spec <= ratio * plain``.

A firing alert whose series has no rows left in the lookback resolves ("no traffic").
Transitions go to the ``alerts`` table and, when configured, to a webhook (``webhook.py``): a
notifier with ``record`` writes the notification in the same transaction as the alert rows, so a
transition is never stored as done while its notification is lost (``outbox.py``).
"""

from __future__ import annotations

import bisect
import math
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from adaptive_spec.telemetry import store
from policies.outcome import PLAIN


def _check(name: str, value, low: float = 0.0, high: float | None = None, low_open: bool = True) -> None:
    # finite: an infinite for_s or window used to pass, then fail every evaluation (int(inf // step))
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low) and (high is None or value <= high)
    if not ok:
        bound = f"{'>' if low_open else '>='} {low}" + (f" and <= {high}" if high is not None else "")
        raise ValueError(f"{name} must be a finite number {bound}, got {name}={value!r}")


@dataclass(frozen=True)
class CollapseRule:
    floor: float = 0.3  # below this a drafter rarely pays for its verify cost (2 tokens/step at k=4: 1.4)
    fraction: float = 0.5  # ... and below half of what it was: a change, not a drafter that is always weak
    window_s: float = 60.0  # rolling window: ~600-6000 steps on a CPU, enough draft tokens to be sure
    baseline_s: float = 600.0  # the recent normal: 10 windows, so that one bad minute barely moves it
    for_s: float = 30.0  # must hold this long: a single bad request is not a collapse
    min_draft_tokens: int = 50  # per window: a rate over fewer tokens is noise (+-0.07 at 0.5)

    def __post_init__(self) -> None:
        _check("floor", self.floor, 0.0, 1.0)
        _check("fraction", self.fraction, 0.0, 1.0)
        for name in ("window_s", "baseline_s"):
            _check(name, getattr(self, name))
        _check("for_s", self.for_s, low_open=False)
        _check("min_draft_tokens", self.min_draft_tokens, low_open=False)

    def max_delay_s(self, evaluate_every_s: float) -> float:
        """Upper bound on the time from a drop to ~0 acceptance to the alert firing."""
        return self.window_s + self.for_s + evaluate_every_s


@dataclass(frozen=True)
class SpeculationOffRule:
    limit_s: float = 600.0  # the guard's probes notice a recovery within ~5 s; off for 10 min is a state

    def __post_init__(self) -> None:
        _check("limit_s", self.limit_s)


@dataclass(frozen=True)
class TpotRegressionRule:
    ratio: float = 1.1  # 10% slower than plain: beyond the guard's 5% off-margin plus noise
    window_s: float = 300.0
    plain_window_s: float = 3600.0  # plain steps are rarer (probes: 1 in 64), so look further back
    for_s: float = 60.0
    min_tokens: int = 200  # per side: TPOT of fewer tokens is dominated by a few slow steps

    def __post_init__(self) -> None:
        _check("ratio", self.ratio)
        _check("window_s", self.window_s)
        _check("plain_window_s", self.plain_window_s)
        _check("for_s", self.for_s, low_open=False)
        _check("min_tokens", self.min_tokens, low_open=False)


@dataclass(frozen=True)
class AlertRules:
    collapse: CollapseRule = field(default_factory=CollapseRule)
    speculation_off: SpeculationOffRule = field(default_factory=SpeculationOffRule)
    tpot_regression: TpotRegressionRule = field(default_factory=TpotRegressionRule)
    check_every_s: float = 5.0  # resolution of the "held for for_s" checks

    def __post_init__(self) -> None:
        _check("check_every_s", self.check_every_s)

    @property
    def lookback_s(self) -> float:
        c, t = self.collapse, self.tpot_regression
        return max(c.window_s + c.baseline_s + c.for_s, t.plain_window_s + t.for_s, self.speculation_off.limit_s)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A rule's answer for one series: ``active`` True (firing), False (resolved), None (keep)."""

    rule: str
    model: str
    key: str
    drafter: str
    active: bool | None
    value: float | None = None
    threshold: float | None = None
    message: str = ""

    @property
    def series(self) -> tuple[str, str, str, str]:
        return (self.rule, self.model, self.key, self.drafter)


class _Sums:
    """Prefix sums over rows sorted by ``end_time``: the total of any column over (a, b] in O(log n)."""

    def __init__(self, rows: list[dict], columns: dict[str, callable]) -> None:
        rows = sorted(rows, key=lambda r: r["end_time"])
        self.times = [r["end_time"] for r in rows]
        self.prefix = {name: [0.0] for name in columns}
        for r in rows:
            for name, get in columns.items():
                self.prefix[name].append(self.prefix[name][-1] + get(r))

    def total(self, name: str, start: float, end: float) -> float:
        lo = bisect.bisect_right(self.times, start)
        hi = bisect.bisect_right(self.times, end)
        p = self.prefix[name]
        return p[hi] - p[lo]


def _check_times(now: float, for_s: float, step: float) -> list[float]:
    n = int(for_s // step)
    return [now - for_s + i * step for i in range(n)] + [now]


def evaluate_collapse(rows: list[dict], now: float, rule: CollapseRule, check_every_s: float,
                      firing: bool) -> tuple[bool | None, float | None, float | None]:
    """(active, rolling, baseline) for one (model, key, drafter) series' interval rows."""
    sums = _Sums(rows, {"draft": lambda r: r["draft_tokens"], "accepted": lambda r: r["accepted_tokens"]})

    def rates(t: float):
        drafted = sums.total("draft", t - rule.window_s, t)
        rolling = sums.total("accepted", t - rule.window_s, t) / drafted if drafted >= rule.min_draft_tokens else None
        base_start, base_end = t - rule.window_s - rule.baseline_s, t - rule.window_s
        base_drafted = sums.total("draft", base_start, base_end)
        baseline = (sums.total("accepted", base_start, base_end) / base_drafted
                    if base_drafted >= rule.min_draft_tokens else None)
        return rolling, baseline

    rolling, baseline = rates(now)
    if firing:
        return (None if rolling is None else rolling < rule.floor), rolling, baseline
    for t in _check_times(now, rule.for_s, check_every_s):
        r, b = rates(t)
        if r is None or b is None or not (r < rule.floor and r < rule.fraction * b):
            return False, rolling, baseline
    return True, rolling, baseline


def evaluate_tpot(spec_rows: list[dict], plain_rows: list[dict], now: float, rule: TpotRegressionRule,
                  check_every_s: float, firing: bool) -> tuple[bool | None, float | None, float | None]:
    """(active, speculative TPOT, plain TPOT) for one (model, key) series."""
    cols = {"s": lambda r: r["draft_s"] + r["verify_s"], "tokens": lambda r: r["emitted_tokens"]}
    spec, plain = _Sums(spec_rows, cols), _Sums(plain_rows, cols)

    def tpots(t: float):
        st, pt = spec.total("tokens", t - rule.window_s, t), plain.total("tokens", t - rule.plain_window_s, t)
        s = spec.total("s", t - rule.window_s, t) / st if st >= rule.min_tokens else None
        p = plain.total("s", t - rule.plain_window_s, t) / pt if pt >= rule.min_tokens else None
        return s, p

    s_now, p_now = tpots(now)
    if firing:
        return (None if s_now is None or p_now is None else s_now > rule.ratio * p_now), s_now, p_now
    for t in _check_times(now, rule.for_s, check_every_s):
        s, p = tpots(t)
        if s is None or p is None or not s > rule.ratio * p:
            return False, s_now, p_now
    return True, s_now, p_now


def evaluate_rules(intervals: list[dict], last_speculation: list[dict], now: float, rules: AlertRules,
                   firing: set[tuple[str, str, str, str]] = frozenset()) -> list[Verdict]:
    """Every rule's verdict for every series with data; pure (the test calls it on literal rows).

    ``intervals``: rows with ``end_time`` in the lookback; ``last_speculation``: the latest
    ``speculation`` decision of each (model, key); ``firing``: series keys of alerts firing now.
    """
    by_drafter: dict[tuple[str, str, str], list[dict]] = {}
    for r in intervals:
        if r["end_time"] <= now:
            by_drafter.setdefault((r["model"], r["key"], r["drafter"]), []).append(r)
    out: list[Verdict] = []
    c = rules.collapse
    for (model, key, drafter), rows in by_drafter.items():
        if drafter == PLAIN:
            continue
        active, rolling, baseline = evaluate_collapse(rows, now, c, rules.check_every_s,
                                                      ("acceptance_collapse", model, key, drafter) in firing)
        out.append(Verdict("acceptance_collapse", model, key, drafter, active, rolling, c.floor,
                           f"acceptance {_fmt(rolling)} over {c.window_s:g}s (baseline {_fmt(baseline)}, "
                           f"floor {c.floor:g}, fraction {c.fraction:g})"))
    # plain rows per model, speculative rows per (model, key)
    t = rules.tpot_regression
    plain: dict[str, list[dict]] = {}
    spec: dict[tuple[str, str], list[dict]] = {}
    for (model, key, drafter), rows in by_drafter.items():
        (plain.setdefault(model, []) if drafter == PLAIN else spec.setdefault((model, key), [])).extend(rows)
    for (model, key), rows in spec.items():
        active, s, p = evaluate_tpot(rows, plain.get(model, []), now, t, rules.check_every_s,
                                     ("tpot_regression", model, key, "") in firing)
        out.append(Verdict("tpot_regression", model, key, "", active, s, None if p is None else t.ratio * p,
                           f"speculative time per output token {_fmt(s, 4)} s vs plain {_fmt(p, 4)} s "
                           f"(limit {t.ratio:g}x) over {t.window_s:g}s"))
    o = rules.speculation_off
    recent = {(r["model"], r["key"]) for r in intervals if now - o.limit_s < r["end_time"] <= now}
    for d in last_speculation:
        series = (d["model"], d["key"])
        off_for = now - d["time"]
        active = d["value"] == "off" and d["previous"] == "on" and off_for >= o.limit_s and series in recent
        out.append(Verdict("speculation_off", d["model"], d["key"], "", active, off_for if d["value"] == "off" else 0.0,
                           o.limit_s, f"speculation off for {off_for:.0f}s (limit {o.limit_s:g}s)"))
    return out


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


@dataclass(frozen=True, slots=True)
class Transition:
    """An alert changing state; what the webhook is told."""

    state: str  # "firing" | "resolved"
    rule: str
    model: str
    key: str
    drafter: str
    fired_at: float
    resolved_at: float | None
    value: float | None
    threshold: float | None
    message: str


class AlertEvaluator:
    """Applies ``evaluate_rules`` to a store and records the transitions in its ``alerts`` table.

    Use it as a writer job (``writer.jobs.append(evaluator)``: called as ``evaluator(conn, now)``
    in the writer's thread) or on a path (``evaluate_path``, for the CLI and tests).
    """

    def __init__(self, rules: AlertRules | None = None, notifier=None) -> None:
        self.rules = rules or AlertRules()
        # a durable notifier (record(conn, transitions, now) + wake(), the webhook), or anything
        # with .notify(list[Transition]) that must not block, told after the commit
        self.notifier = notifier

    __name__ = "alert-evaluator"

    def evaluate_path(self, path: str | Path, now: float, timeout_s: float = 0.5) -> list[Transition]:
        conn = store.connect(path, timeout_s=timeout_s)
        try:
            return self(conn, now)
        finally:
            conn.close()

    def close(self, timeout_s: float | None = None) -> None:
        """Let the notifier send what is pending (bounded by its own exit flush), then stop it."""
        close = getattr(self.notifier, "close", None)
        if close is not None:
            close(timeout_s)

    def __call__(self, conn: sqlite3.Connection, now: float) -> list[Transition]:
        since = now - self.rules.lookback_s
        intervals = [dict(r) for r in conn.execute(
            "SELECT model, key, drafter, end_time, draft_tokens, accepted_tokens, emitted_tokens, draft_s, verify_s "
            "FROM intervals WHERE end_time > ? AND end_time <= ?", (since, now))]
        last = [dict(r) for r in conn.execute(
            "SELECT d.model, d.key, d.drafter, d.time, d.value, d.previous FROM decisions d JOIN "
            "(SELECT MAX(id) AS id FROM decisions WHERE kind = 'speculation' AND time <= ? GROUP BY model, key) m "
            "ON d.id = m.id", (now,))]
        firing = {(r["rule"], r["model"], r["key"], r["drafter"]): r for r in map(dict, conn.execute(
            "SELECT * FROM alerts WHERE state = 'firing'"))}
        verdicts = evaluate_rules(intervals, last, now, self.rules, set(firing))
        transitions: list[Transition] = []
        seen = set()
        conn.execute("BEGIN")
        try:
            for v in verdicts:
                seen.add(v.series)
                row = firing.get(v.series)
                if v.active and row is None:
                    conn.execute("INSERT INTO alerts (rule, model, key, drafter, state, fired_at, value, threshold, "
                                 "message, updated_at) VALUES (?, ?, ?, ?, 'firing', ?, ?, ?, ?, ?)",
                                 (*v.series, now, v.value, v.threshold, v.message, now))
                    transitions.append(Transition("firing", *v.series, now, None, v.value, v.threshold, v.message))
                elif v.active and row is not None:
                    conn.execute("UPDATE alerts SET value = ?, message = ?, updated_at = ? WHERE id = ?",
                                 (v.value, v.message, now, row["id"]))
                elif v.active is False and row is not None:
                    transitions.append(self._resolve(conn, row, now, v.value, v.message))
            for series, row in firing.items():
                if series not in seen:
                    transitions.append(self._resolve(conn, row, now, None, "no traffic in the lookback"))
            durable = hasattr(self.notifier, "record")
            if transitions and durable:
                self.notifier.record(conn, transitions, now)
            conn.execute("COMMIT")
        except BaseException:
            store.rollback(conn)
            raise
        if transitions and durable:
            self.notifier.wake()
        elif transitions and self.notifier is not None:
            self.notifier.notify(transitions)
        return transitions

    @staticmethod
    def _resolve(conn, row: dict, now: float, value, message: str) -> Transition:
        conn.execute("UPDATE alerts SET state = 'resolved', resolved_at = ?, value = ?, message = ?, updated_at = ? "
                     "WHERE id = ?", (now, value, message, now, row["id"]))
        return Transition("resolved", row["rule"], row["model"], row["key"], row["drafter"], row["fired_at"], now,
                          value, row["threshold"], message)
