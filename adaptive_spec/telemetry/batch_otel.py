"""The batched engine's forwards as OpenTelemetry counters (``OTelObserver.on_batch_step``).

Prometheus names after the exporter's translation in brackets; every counter carries
``gen_ai.request.model``, the per-forward ones also ``adaptive_spec.batch.rows`` (requests decoding in
the forward, so a rate over them reads by how full the batch was):

- ``adaptive_spec.batch.forwards`` [``adaptive_spec_batch_forwards_total``]: decode forwards
- ``adaptive_spec.batch.row_steps`` [``..._row_steps_total``]: rows' decode steps (one per row a forward)
- ``adaptive_spec.batch.drafting_row_steps`` [``..._drafting_row_steps_total``]: of those, the ones
  that verified a draft
- ``adaptive_spec.batch.duration`` s [``..._duration_seconds_total``]: the steps' seconds (drafting,
  forward, verification)
- ``adaptive_spec.batch.cap_calls`` [``..._cap_calls_total``], by ``adaptive_spec.batch.cap`` (none,
  kept, shortened, plain: ``policies.batch_step.CAP_CALLS``), and
  ``adaptive_spec.batch.cut_draft_tokens``: the draft tokens the batch cap cut
- ``adaptive_spec.batch.prompt_tokens``: newcomers' prompt tokens that rode in decode forwards

Derived (PromQL in ``deploy/prometheus/alerts.yml``)::

    drafting share by rows = rate(drafting_row_steps) / rate(row_steps)
    mean rows per forward  = rate(row_steps) / rate(forwards)
    seconds per forward    = rate(duration) / rate(forwards)

Summed into plain dicts between the observer's flushes, as its per-step counters are.
"""

from __future__ import annotations

from collections import defaultdict

MODEL, ROWS, CAP = "gen_ai.request.model", "adaptive_spec.batch.rows", "adaptive_spec.batch.cap"


class BatchCounters:
    """The instruments on ``meter`` and the counts summed since the last ``take``; the caller
    serialises ``add`` and ``take`` (the observer's lock)."""

    def __init__(self, meter) -> None:
        c = meter.create_counter
        self.forwards = c("adaptive_spec.batch.forwards", unit="{forward}", description="Decode forwards of the batched engine")
        self.row_steps = c("adaptive_spec.batch.row_steps", unit="{step}", description="Rows' decode steps in batched forwards")
        self.drafting = c("adaptive_spec.batch.drafting_row_steps", unit="{step}",
                          description="Rows' decode steps in batched forwards that verified a draft")
        self.duration = c("adaptive_spec.batch.duration", unit="s", description="Seconds of the batched engine's decode steps")
        self.cap_calls = c("adaptive_spec.batch.cap_calls", unit="{step}", description="The batch cap's call on each decode step")
        self.cut_tokens = c("adaptive_spec.batch.cut_draft_tokens", unit="{token}", description="Draft tokens the batch cap cut")
        self.prompt_tokens = c("adaptive_spec.batch.prompt_tokens", unit="{token}",
                               description="Prompt tokens that rode in decode forwards")
        self._reset()

    def add(self, model: str, step) -> None:
        counts = self._by_rows[model, step.rows]
        counts[0] += 1
        counts[1] += step.rows
        counts[2] += step.drafting
        counts[3] += step.seconds
        self._calls[model, step.cap] += 1
        tokens = self._tokens[model]
        tokens[0] += step.cut_tokens
        tokens[1] += step.prompt_tokens

    def take(self) -> tuple:
        """The counts since the last take, for ``publish`` (outside the caller's lock)."""
        taken = self._by_rows, self._calls, self._tokens
        self._reset()
        return taken

    def publish(self, taken: tuple) -> None:
        by_rows, calls, tokens = taken
        for (model, rows), (forwards, row_steps, drafting, seconds) in by_rows.items():
            attrs = {MODEL: model, ROWS: rows}
            self.forwards.add(forwards, attrs)
            self.row_steps.add(row_steps, attrs)
            self.drafting.add(drafting, attrs)
            self.duration.add(seconds, attrs)
        for (model, call), n in calls.items():
            self.cap_calls.add(n, {MODEL: model, CAP: call})
        for model, (cut, prompt) in tokens.items():
            self.cut_tokens.add(cut, {MODEL: model})
            self.prompt_tokens.add(prompt, {MODEL: model})

    def _reset(self) -> None:
        # by (model, rows): forwards, row-steps, drafting row-steps, seconds
        self._by_rows: dict[tuple[str, int], list[float]] = defaultdict(lambda: [0, 0, 0, 0.0])
        self._calls: dict[tuple[str, str], int] = defaultdict(int)  # by (model, the cap's call)
        self._tokens: dict[str, list[int]] = defaultdict(lambda: [0, 0])  # by model: cut draft tokens, riding prompt tokens
