"""``adaptive-spec loadgen``: drive a running server with streamed requests and report latency.

Everything the user gives is checked before the first request: the prompt file, the schedule's
kinds, the SLOs, the output path (so a long run never ends on an unwritable file) and the server
itself (one line when it is not there). The table is printed before the JSON is written, which
is written atomically.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from adaptive_spec.errors import InvalidParameterError


def loadgen(
    url: str = typer.Option("http://127.0.0.1:8000", help="Base URL of the server (adaptive-spec serve, vLLM, ...)."),
    prompts: Path = typer.Option(Path("benchmarks/workloads.jsonl"), help="JSONL prompt file: one {id, prompt, kind} a line."),
    split: Optional[str] = typer.Option(None, "--split", help="Only the prompts of this split (dev | test, e.g. of "
                                        "benchmarks/corpus/corpus.jsonl)."),
    endpoint: str = typer.Option("completions", help="completions (/v1/completions) | chat (/v1/chat/completions)."),
    model: Optional[str] = typer.Option(None, help="Model to request (default: the first one the server lists)."),
    rate: float = typer.Option(float("inf"), help="Requests per second, or inf (all at once, paced by --max-concurrency)."),
    burstiness: float = typer.Option(1.0, help="Gamma shape of the gaps between arrivals: 1 Poisson, < 1 burstier, > 1 smoother."),
    max_concurrency: Optional[int] = typer.Option(None, help="Requests in flight at most (default: no limit)."),
    num_requests: Optional[int] = typer.Option(None, help="Requests to send (default 100 unless --duration or --schedule bound the run)."),
    duration: Optional[float] = typer.Option(None, help="Stop arriving after this many seconds."),
    schedule: Optional[str] = typer.Option(None, help="Traffic-mix shifts: KIND[+KIND]:SECONDS,... (e.g. copy:300,open:300), or a .json/.yaml file of phases."),
    max_tokens: int = typer.Option(64, help="max_tokens of every request."),
    temperature: float = typer.Option(0.0, help="Sampling temperature of every request (0: greedy)."),
    seed: int = typer.Option(0, help="Seed of the arrival times and of the prompt choices."),
    goodput: Optional[List[str]] = typer.Option(None, help="SLOs in ms for goodput, e.g. --goodput ttft:500 tpot:50 e2el:2000."),
    api_key: Optional[str] = typer.Option(None, envvar="ADAPTIVE_SPEC_API_KEY", help="Sent as 'Authorization: Bearer KEY'."),
    traffic_key: Optional[str] = typer.Option(None, help="X-Traffic-Key header of every request; {kind} becomes the prompt's kind."),
    extra_body: Optional[str] = typer.Option(None, help='JSON object merged into every request, e.g. \'{"speculation": {"mode": "off"}}\'.'),
    timeout: float = typer.Option(600.0, help="Seconds a request may wait for the next bytes of its response."),
    out: Optional[Path] = typer.Option(None, help="Write the report and the per-request trace to this JSON file."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
    more_slos: Optional[List[str]] = typer.Argument(None, hidden=True, metavar="SLO"),
) -> None:
    """Send streamed requests to a server and report TTFT, TPOT, ITL, E2EL, throughput, goodput and acceptance."""
    import asyncio
    import datetime as dt
    import signal

    from rich.console import Console

    from adaptive_spec.loadgen.arrivals import parse_schedule
    from adaptive_spec.loadgen.report import build_report, render
    from adaptive_spec.loadgen.run import LoadConfig, run_load
    from adaptive_spec.loadgen.stats import parse_slos
    from adaptive_spec.outputs import check_writable, write_json_atomic
    from adaptive_spec.prompts import load_prompts, select_split

    # --goodput ttft:500 tpot:50: click gives --goodput one value; the others arrive as arguments
    if more_slos and not goodput:
        raise InvalidParameterError("argument", more_slos[0], "unexpected; SLOs follow --goodput")
    slos = parse_slos([*(goodput or []), *(more_slos or [])])
    out_path = check_writable(out, "out") if out is not None else None
    if not prompts.is_file():
        raise InvalidParameterError("prompts", str(prompts), "file not found")
    prompt_list = load_prompts(prompts)
    if split is not None:
        prompt_list = select_split(prompt_list, split, str(prompts))
    config = LoadConfig(
        url=url.rstrip("/"), endpoint=endpoint, model=model, rate=rate, burstiness=burstiness,
        max_concurrency=max_concurrency, num_requests=num_requests, duration_s=duration,
        schedule=parse_schedule(schedule) if schedule is not None else None, max_tokens=max_tokens,
        temperature=temperature, seed=seed, slos_ms=slos, api_key=api_key, traffic_key=traffic_key,
        extra_body=_json_object(extra_body, "extra_body"), timeout_s=timeout)
    config.validate(prompt_list)

    started = dt.datetime.now(dt.timezone.utc)
    console = Console(stderr=True)

    async def main():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def interrupt() -> None:  # first Ctrl-C: stop and report; the next one ends at once
            console.print("[yellow]interrupted: cancelling the requests in flight, then reporting[/yellow]")
            stop.set()
            loop.remove_signal_handler(signal.SIGINT)

        try:
            loop.add_signal_handler(signal.SIGINT, interrupt)
        except (NotImplementedError, RuntimeError):  # not the main thread, or no signals here
            pass
        with _Progress(console, config, quiet) as progress:
            return await run_load(config, prompt_list, on_done=progress.done, stop=stop, on_start=progress.start)

    result = asyncio.run(main())
    report = build_report(config, result, str(prompts), started)
    if split is not None:
        report["split"] = split
    Console(width=max(120, Console().width)).print(render(report))  # before the file: a failed write loses nothing
    if out_path is not None:
        write_json_atomic(out_path, report, "out")
        console.print(f"wrote {out_path}", highlight=False)
    if result.interrupted:
        raise typer.Exit(130)


def _json_object(text: str | None, param: str) -> dict | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise InvalidParameterError(param, text, f"not valid JSON ({exc})") from None
    if not isinstance(value, dict):
        raise InvalidParameterError(param, text, "must be a JSON object")
    return value


class _Progress:
    """Finished requests on stderr, once the server has answered; nothing when quiet. On a terminal a
    bar; elsewhere (a log, a pipe), where the bar would only show at the end, a line every
    ``interval_s`` seconds."""

    interval_s = 10.0

    def __init__(self, console, config, quiet: bool) -> None:
        self.console, self.config, self.quiet = console, config, quiet
        self.bar, self.failed, self.finished = None, 0, 0
        self.lines = False  # a line now and then instead of the bar
        self.model, self.started, self.next_line = "", 0.0, 0.0

    def __enter__(self) -> "_Progress":
        return self

    def start(self, model: str) -> None:
        if self.quiet:
            return
        import time

        from rich.markup import escape
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.model, self.started = model, time.monotonic()
        if not self.console.is_terminal:
            self.lines, self.next_line = True, self.started + self.interval_s
            return
        self.bar = Progress(TextColumn(f"loadgen {escape(model)}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("{task.fields[failed]} failed"), console=self.console)
        self.task = self.bar.add_task("requests", total=self.config.request_limit, failed=0)
        self.bar.start()

    def done(self, record) -> None:
        self.failed += not record.ok
        self.finished += 1
        if self.bar is not None:
            self.bar.update(self.task, advance=1, failed=self.failed)
        elif self.lines:
            import time

            now = time.monotonic()
            if now >= self.next_line:
                limit = self.config.request_limit
                self.console.print(f"loadgen {self.model}: {self.finished}" + (f"/{limit}" if limit else "")
                                   + f" requests finished, {self.failed} failed, {now - self.started:.0f} s elapsed",
                                   markup=False, highlight=False, soft_wrap=True)
                self.next_line = now + self.interval_s

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()
