"""The demo: one controller through a traffic shift, against a fixed config and plain decoding.

A short stream shifts from copy-heavy requests (repeat a given text: prompt lookup drafts well) to
open-ended ones (stories, explanations: it drafts badly) and back. Three configs serve it, each
with one long-lived controller, as a server keeps one per traffic key:

- ``adaptive``        the controller: drafter and ``k`` chosen every step, speculation off where it
                      loses to plain decoding
- ``static:ngram:8``  a fixed config: prompt lookup, ``k`` = 8 (the config the earlier demo showed
                      and the best fixed config on the copy phases of ``benchmarks/shift.jsonl``)
- ``plain``           no speculation: the speed and the tokens every other config is checked against

Every request runs under the three configs back to back, their order rotating from request to
request, so that the machine's drifts hit all of them alike (``bench.py`` does the same). Greedy
decoding: each config's tokens must equal plain decoding's, token for token, and the demo checks
that they do. Tokens/s are new tokens over wall seconds, prefill included; a phase's speed is its
total tokens over its total seconds.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import Callable

from adaptive_spec.config import GenerationConfig
from adaptive_spec.observers import ObserverSet
from policies.outcome import PLAIN, StepOutcome
from policies.registry import make_policy

ADAPTIVE, FIXED = "adaptive", "static:ngram:8"
SPECULATIVE = (ADAPTIVE, FIXED)  # the configs checked against plain decoding
CONFIGS = (*SPECULATIVE, "plain")
PHASES = ("copy", "open", "copy")  # the stream's kinds of traffic, in order
PHASE_NAMES = {"copy": "copy-heavy", "open": "open-ended"}
KEY_PREFIX = "demo/"  # each config's traffic key (and telemetry series): demo/adaptive, demo/plain, ...

# Prompts from benchmarks/shift.jsonl, embedded: the demo runs from an installed package, which
# ships no benchmark files. A phase longer than its list starts the list again.
PROMPTS = {
    "copy": (
        "Repeat the following text exactly, word for word:\n\nThe old lighthouse stood on the edge of the cliff, its "
        "white paint peeling in the salty wind. Every night the keeper climbed the hundred and twelve steps to light "
        "the lamp.",
        "Copy this paragraph exactly as written:\n\nPreheat the oven to 180 degrees. Mix the flour, sugar and a pinch "
        "of salt in a large bowl. Add the eggs one at a time, then pour in the melted butter and stir until smooth.",
        "Repeat the following text exactly, word for word:\n\nThe meeting is moved to Thursday at ten in room four. "
        "Please bring the draft budget, the staffing plan and your notes from the customer visit last week.",
        "Copy this paragraph exactly as written:\n\nOur store opens at nine on weekdays and at ten on Saturdays. We are "
        "closed on Sundays and public holidays. Returns are accepted within thirty days with a receipt.",
        "Repeat the following text exactly, word for word:\n\nThe river rises in the northern hills and runs for two "
        "hundred kilometres to the sea. Three bridges cross it in the old town, the oldest built of grey stone in 1420.",
        "Copy this paragraph exactly as written:\n\nTo reset the router, hold the small button on the back for ten "
        "seconds until the light turns orange. Wait two minutes, then connect again with the password on the label.",
    ),
    "open": (
        "Write a short story about a fox who learns to play the violin.",
        "Explain why the sky is blue to a ten-year-old.",
        "Give me some advice for my first day at a new job.",
        "Write a poem about autumn in the city.",
    ),
}
# kept out of the stream: the first calls of each shape pay for kernel selection and allocation
WARM_UP_TOKENS = 32  # enough for drafts of every length on a copy prompt; more only lengthens the wait
WARM_UP_PLAIN_TOKENS = 8  # plain decoding has one step shape: a few steps warm it, more cost the most time
WARM_UP_PROMPT = ("Repeat the following text exactly, word for word:\n\nThe library will be closed for repairs from the "
                  "first to the fifteenth of March. Books can be returned in the box by the side door, and loans will "
                  "be extended automatically.")


@dataclass(frozen=True)
class StreamRequest:
    index: int  # position in the stream, from 0
    phase: int  # 1, 2, 3
    kind: str  # "copy" | "open"
    text: str


def build_stream(requests_per_phase: int, prompts: dict[str, tuple[str, ...]] = PROMPTS) -> list[StreamRequest]:
    """The shifting stream: ``requests_per_phase`` requests of each phase of ``PHASES``; the two copy
    phases take different prompts while the list lasts.

    >>> [(r.phase, r.kind) for r in build_stream(1)]
    [(1, 'copy'), (2, 'open'), (3, 'copy')]
    """
    used: Counter[str] = Counter()
    stream = []
    for phase, kind in enumerate(PHASES, start=1):
        for _ in range(requests_per_phase):
            texts = prompts[kind]
            stream.append(StreamRequest(len(stream), phase, kind, texts[used[kind] % len(texts)]))
            used[kind] += 1
    return stream


def rotated(configs: tuple[str, ...], index: int) -> list[str]:
    """The configs' order for request ``index``: each config goes first in turn.

    >>> rotated(("a", "b", "c"), 1)
    ['b', 'c', 'a']
    """
    shift = index % len(configs)
    return list(configs[shift:] + configs[:shift])


@dataclass(frozen=True)
class ControllerUse:
    """What a controller did during one request, read off its steps."""

    steps: int
    speculative_steps: int  # steps that verified a draft (probes while speculation is off included)
    by_drafter: dict[str, tuple[int, int, int]]  # drafter -> (shortest draft, longest draft, steps)

    def describe(self) -> str:
        """One line: ``ngram k 3-8 ×12, int8 k 2 ×1 · drafts verified on 13/40 steps``."""
        if not self.speculative_steps:
            return f"no drafts verified ({self.steps} plain steps)"
        parts = []
        for drafter, (low, high, count) in self.by_drafter.items():
            parts.append(f"{drafter} k {low if low == high else f'{low}-{high}'} ×{count}")
        return f"{', '.join(parts)} · drafts verified on {self.speculative_steps}/{self.steps} steps"


def controller_use(steps: list[StepOutcome]) -> ControllerUse:
    """The drafters and draft lengths of ``steps``, most used drafter first. A length is what was
    verified (``proposed``: after the match gate, the token budget or the end of a prompt-lookup
    match cut the controller's ``k``); a lookup that found nothing was a plain step.

    >>> s = lambda d, k, proposed: StepOutcome(d, k, proposed, 0, 1, 0.0, 0.0)
    >>> controller_use([s("ngram", 8, 8), s("ngram", 8, 3), s("none", 0, 0), s("int8", 2, 2), s("ngram", 16, 0)]).describe()
    'ngram k 3-8 ×2, int8 k 2 ×1 · drafts verified on 3/5 steps'
    """
    ks: dict[str, list[int]] = {}
    for step in steps:
        if step.proposed > 0 and step.drafter != PLAIN:
            ks.setdefault(step.drafter, []).append(step.proposed)
    ordered = sorted(ks.items(), key=lambda item: -len(item[1]))
    return ControllerUse(len(steps), sum(len(k) for _, k in ordered),
                         {d: (min(k), max(k), len(k)) for d, k in ordered})


@dataclass
class RequestRun:
    """One stream request under every config."""

    request: StreamRequest
    order: list[str]  # the configs in the order they ran
    tokens: dict[str, list[int]]  # config -> generated token ids
    seconds: dict[str, float]  # config -> wall seconds, prefill included
    adaptive_use: ControllerUse

    def tokens_per_s(self, config: str) -> float:
        return len(self.tokens[config]) / self.seconds[config] if self.seconds[config] > 0 else 0.0

    def equals_plain(self, config: str) -> bool:
        return self.tokens[config] == self.tokens["plain"]


def build_controllers(drafters: list[str]) -> dict[str, object]:
    """One controller per config, each kept for the whole stream; ``adaptive`` chooses among
    ``drafters`` (those the decoder has loaded)."""
    return {name: make_policy(name, drafters, key=KEY_PREFIX + name) for name in CONFIGS}


def warm_up(decoder, drafters: list[str], max_new_tokens: int) -> None:
    """Every config once on a prompt outside the stream, unrecorded, with controllers thrown away
    afterwards: the stream's controllers start cold and learn on the job (the engine keeps the
    step costs it measured, as a running server would)."""
    recording, decoder.observers = decoder.observers, ObserverSet()  # warm-up is not traffic
    try:
        for name, policy in build_controllers(drafters).items():
            budget = WARM_UP_PLAIN_TOKENS if name == "plain" else WARM_UP_TOKENS
            decoder.generate(WARM_UP_PROMPT, GenerationConfig(max_new_tokens=min(max_new_tokens, budget)),
                             policy=policy)
    finally:
        decoder.observers = recording


def run_stream(decoder, stream: list[StreamRequest], drafters: list[str], max_new_tokens: int,
               on_start: Callable[[str, StreamRequest], None] | None = None,
               on_request: Callable[[RequestRun], None] | None = None) -> list[RequestRun]:
    """Serve ``stream`` under every config, interleaved request by request; ``on_start(config,
    request)`` before each generation, ``on_request(run)`` after each request's last config."""
    controllers = build_controllers(drafters)
    cfg = GenerationConfig(max_new_tokens=max_new_tokens)
    runs = []
    for request in stream:
        order = rotated(CONFIGS, request.index)
        tokens, seconds, use = {}, {}, None
        for name in order:
            if on_start:
                on_start(name, request)
            result = decoder.generate(request.text, cfg, policy=controllers[name], key=KEY_PREFIX + name)
            tokens[name], seconds[name] = result.token_ids, result.stats.elapsed_s
            if name == ADAPTIVE:
                use = controller_use(result.steps)
        run = RequestRun(request, order, tokens, seconds, use)
        runs.append(run)
        if on_request:
            on_request(run)
    return runs


def _speed(runs: list[RequestRun], config: str) -> float:
    seconds = sum(r.seconds[config] for r in runs)
    return sum(len(r.tokens[config]) for r in runs) / seconds if seconds > 0 else 0.0


def summarize(runs: list[RequestRun]) -> dict:
    """Per phase and overall: each config's tokens/s, its speed-up against plain (total tokens over
    total seconds, divided by plain's) and the range of its per-request speed-ups (how much one
    request's ratio moves: the noise a phase's ratio carries); and whether every output equalled
    plain decoding's, token for token."""
    groups = [(f"{p} {PHASE_NAMES[kind]}", [r for r in runs if r.request.phase == p])
              for p, kind in enumerate(PHASES, start=1)]
    groups.append(("all", list(runs)))
    rows = []
    for label, group in groups:
        if not group:
            continue
        plain = _speed(group, "plain")
        row = {"phase": label, "requests": len(group), "configs": {}}
        for name in CONFIGS:
            ratios = [r.tokens_per_s(name) / r.tokens_per_s("plain") for r in group if r.tokens_per_s("plain") > 0]
            row["configs"][name] = {"tokens_per_s": _speed(group, name),
                                    "speedup_vs_plain": _speed(group, name) / plain if plain > 0 else 0.0,
                                    "speedup_range": (min(ratios), max(ratios)) if ratios else None}
        row["adaptive_speculative_steps"] = (sum(r.adaptive_use.speculative_steps for r in group),
                                             sum(r.adaptive_use.steps for r in group))
        rows.append(row)
    equal = {name: sum(r.equals_plain(name) for r in runs) for name in SPECULATIVE}
    return {"rows": rows, "requests": len(runs), "equal_to_plain": equal,
            "identical": all(count == len(runs) for count in equal.values())}


def describe_request(run: RequestRun) -> str:
    """One line per finished request (rich markup)."""
    r = run.request
    speeds = " · ".join(f"{name} {run.tokens_per_s(name):5.1f}" for name in CONFIGS)
    same = "" if all(run.equals_plain(n) for n in CONFIGS) else "  [red]differs from plain![/red]"
    return (f"[bold]#{r.index + 1}[/bold] {PHASE_NAMES[r.kind]:<10}  tok/s: {speeds}  "
            f"[dim]adaptive: {run.adaptive_use.describe()}[/dim]{same}")


def summary_table(summary: dict):
    """Speed-up against plain per phase and overall (in brackets: the lowest and highest of the
    phase's requests), plain decoding's tokens/s, and the share of steps ``adaptive`` verified a draft in."""
    from rich import box
    from rich.table import Table

    # narrow enough for an 80-column terminal
    table = Table(title="speed-up against plain decoding (lowest-highest request)", box=box.SIMPLE_HEAD)
    table.add_column("phase", no_wrap=True)
    table.add_column("n", justify="right")
    for name in SPECULATIVE:
        table.add_column(name, justify="right", no_wrap=True)
    table.add_column("plain\ntok/s", justify="right")
    table.add_column("adaptive\ndrafting", justify="right")
    for row in summary["rows"]:
        cells = []
        for name in SPECULATIVE:
            c = row["configs"][name]
            low, high = c["speedup_range"] or (0.0, 0.0)
            cells.append(f"{c['speedup_vs_plain']:.2f}× ({low:.2f}-{high:.2f})")
        on, steps = row["adaptive_speculative_steps"]
        cells += [f"{row['configs']['plain']['tokens_per_s']:.1f}", f"{on / steps:.0%}" if steps else "-"]
        table.add_row(row["phase"], str(row["requests"]), *cells)
    return table


def next_steps(store: str | None) -> list[str]:
    """Where to go from here: the server, the dashboard on what was just recorded, the simulator."""
    dashboard = f"adaptive-spec dashboard --telemetry-db {store}" if store else "adaptive-spec dashboard"
    return [
        "adaptive-spec serve --port 8000      # the same controller behind an OpenAI-compatible API",
        f"{dashboard}   # acceptance, draft length, speculation on/off of this run",
        "adaptive-spec simulate compare smollm2_cpu_shift   # the same policies at scale (a shipped scenario)",
    ]


def run_demo(decoder, drafters: list[str], requests_per_phase: int, max_new_tokens: int, console,
             store: str | None) -> dict:
    """Warm up, serve the stream with a live progress display, print the summary and next steps;
    returns the summary."""
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    stream = build_stream(requests_per_phase)
    console.print(f"A stream of {len(stream)} requests: {requests_per_phase} copy-heavy, {requests_per_phase} "
                  f"open-ended, {requests_per_phase} copy-heavy; each under {', '.join(CONFIGS)} in turn "
                  f"(greedy, {max_new_tokens} new tokens at most).")
    started_s = time.perf_counter()
    with console.status("warming up (the first calls of each shape pay for kernel selection) ..."):
        warm_up(decoder, drafters, max_new_tokens)
    warm_s = time.perf_counter() - started_s
    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("serving", total=len(stream))

        def started(name: str, request: StreamRequest) -> None:
            progress.update(task, description=f"#{request.index + 1} {PHASE_NAMES[request.kind]} · {name}")

        def finished(run: RequestRun) -> None:
            progress.console.print(describe_request(run), soft_wrap=True)
            progress.advance(task)

        runs = run_stream(decoder, stream, drafters, max_new_tokens, on_start=started, on_request=finished)
    summary = summarize(runs)
    summary["warm_up_s"], summary["stream_s"] = warm_s, time.perf_counter() - started_s - warm_s
    console.print(summary_table(summary))
    console.print(f"served in {summary['stream_s']:.0f} s after a {warm_s:.0f} s warm-up")
    equal = ", ".join(f"{name} {count}/{summary['requests']}" for name, count in summary["equal_to_plain"].items())
    verdict = "[green]yes[/green]" if summary["identical"] else "[red]NO[/red]"
    console.print(f"identical to plain decoding: {verdict} (token by token: {equal} requests)")
    console.print(f"telemetry recorded in {escape(store)}" if store else "telemetry off: nothing recorded")
    console.print("next:")
    for line in next_steps(store):
        console.print(f"  {escape(line)}", soft_wrap=True, highlight=False)
    return summary
