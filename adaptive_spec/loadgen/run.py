"""The load run: arrivals on schedule, each request streamed on its own task, counters read around it.

``run_load(config, prompts)`` is the whole run as one coroutine:

1. check the server (``/health``, ``/v1/models``) and read its spec-decode counters;
2. walk the arrival times: at each, pick a prompt (by the schedule's phase) and start a task that
   waits for a concurrency slot, then streams the request. With a finite rate the arrival times are
   fixed in advance, as in ``vllm bench serve`` (requests due while every slot is busy wait for one,
   and ``sent_s`` records when they went out); with ``rate = inf`` the next request is started when
   a slot frees (a closed loop), so ``--duration`` needs ``--max-concurrency`` there;
3. stop arriving at ``num_requests``, at ``duration_s`` or at the schedule's end, whichever comes
   first; wait for the requests in flight;
4. read the counters again.

Setting ``stop`` (the CLI does on Ctrl-C) ends the arrivals and cancels the requests in flight;
the run returns what it has, marked ``interrupted``.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.loadgen.arrivals import PromptPicker, Schedule, arrival_offsets, check_kinds
from adaptive_spec.loadgen.client import RequestRecord, check_server, request_body, send, spec_counters
from adaptive_spec.prompts import Prompt

ENDPOINTS = ("completions", "chat")
# fields --extra-body may not set, or the report's config would say one thing and the requests
# another: what every body holds from loadgen's own options (``client.request_body``), and two
# that would override them on the server (a budget over --max-tokens, choices loadgen does not read)
LOADGEN_FIELDS = {field: "loadgen sets this field itself (its own option, or a streamed request it times)"
                  for field in ("model", "prompt", "messages", "max_tokens", "temperature", "stream", "stream_options")}
LOADGEN_FIELDS |= {"max_completion_tokens": "it would override --max-tokens on the server",
                   "n": "loadgen reads and times one choice per request"}
DEFAULT_NUM_REQUESTS = 100  # when nothing else bounds the run: vLLM's 1000 is hours on a CPU model


@dataclass(frozen=True)
class LoadConfig:
    url: str = "http://127.0.0.1:8000"
    endpoint: str = "completions"  # completions | chat
    model: str | None = None  # None: the first model the server lists
    rate: float = math.inf  # requests per second; inf sends as fast as the concurrency limit allows
    burstiness: float = 1.0  # Gamma shape of the gaps: 1 is Poisson, < 1 burstier, > 1 smoother
    max_concurrency: int | None = None  # requests in flight at most; None: no limit
    num_requests: int | None = None
    duration_s: float | None = None
    schedule: Schedule | None = None
    max_tokens: int = 128
    temperature: float = 0.0  # greedy by default: outputs (and acceptance) then repeat run to run
    seed: int = 0  # arrivals and prompt choices
    slos_ms: dict[str, float] = field(default_factory=dict)  # goodput SLOs: ttft | tpot | e2el -> ms
    api_key: str | None = None
    traffic_key: str | None = None  # X-Traffic-Key header; "{kind}" is replaced by the prompt's kind
    extra_body: dict | None = None  # merged into every request body (e.g. a "speculation" override)
    timeout_s: float = 600.0  # per request, between bytes of the response

    def validate(self, prompts: Sequence[Prompt] = ()) -> None:
        """One ``InvalidParameterError`` naming the first bad parameter."""
        if not self.url.startswith(("http://", "https://")):
            raise InvalidParameterError("url", self.url, "expected http://HOST:PORT or https://...")
        if self.endpoint not in ENDPOINTS:
            raise InvalidParameterError("endpoint", self.endpoint, f"expected one of {', '.join(ENDPOINTS)}")
        if not self.rate > 0:  # also refuses NaN
            raise InvalidParameterError("rate", self.rate, "must be > 0 requests per second, or inf")
        if not (self.burstiness > 0 and math.isfinite(self.burstiness)):
            raise InvalidParameterError("burstiness", self.burstiness, "must be a finite number > 0 (1 is Poisson)")
        for name, value in (("max_concurrency", self.max_concurrency), ("num_requests", self.num_requests),
                            ("max_tokens", self.max_tokens)):
            if value is not None and value < 1:
                raise InvalidParameterError(name, value, "must be >= 1")
        if self.duration_s is not None and not (self.duration_s > 0 and math.isfinite(self.duration_s)):
            raise InvalidParameterError("duration", self.duration_s, "must be a finite number of seconds > 0")
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise InvalidParameterError("temperature", self.temperature, "must be >= 0")
        if not (self.timeout_s > 0):
            raise InvalidParameterError("timeout", self.timeout_s, "must be > 0 seconds")
        if math.isinf(self.rate) and self.max_concurrency is None and self.request_limit is None:
            raise InvalidParameterError("rate", self.rate, "rate=inf with --duration or --schedule would start "
                                        "requests without end; give --max-concurrency or a finite --rate")
        if self.traffic_key is not None:
            try:
                self.traffic_key.format(kind="kind")
            except (KeyError, IndexError, ValueError, AttributeError, TypeError) as exc:  # "{kind.x}", "{kind[0]:d}"
                raise InvalidParameterError("traffic_key", self.traffic_key, f"only {{kind}} may be replaced ({exc})") from None
        owned = sorted(set(self.extra_body or {}) & set(LOADGEN_FIELDS))
        if owned:
            raise InvalidParameterError("extra_body", owned[0], f"not allowed: {LOADGEN_FIELDS[owned[0]]}, so the report "
                                        "would not describe what was sent")
        if self.schedule is not None and prompts:
            check_kinds(self.schedule, prompts)

    @property
    def end_s(self) -> float | None:
        """No arrival at or after this offset."""
        ends = [t for t in (self.duration_s, self.schedule.total_s if self.schedule else None) if t is not None]
        return min(ends) if ends else None

    @property
    def request_limit(self) -> int | None:
        if self.num_requests is None and self.end_s is None:
            return DEFAULT_NUM_REQUESTS
        return self.num_requests


@dataclass
class LoadResult:
    model: str
    records: list[RequestRecord]
    duration_s: float  # first request sent to last one finished
    spec_before: dict | None  # the server's spec-decode counters before and after
    spec_after: dict | None
    interrupted: bool = False
    origin_unix: float | None = None  # Unix time of the run's t = 0, which arrival_s and sent_s count from


async def run_load(config: LoadConfig, prompts: Sequence[Prompt],
                   on_done: Callable[[RequestRecord], None] | None = None,
                   stop: asyncio.Event | None = None, on_start: Callable[[str], None] | None = None) -> LoadResult:
    """Run the load described by ``config`` with ``prompts``. ``on_start`` is called with the model's
    name once the server has answered, ``on_done`` with each finished request."""
    config.validate(prompts)
    stop = stop or asyncio.Event()
    headers = {"Authorization": f"Bearer {config.api_key}"} if config.api_key else {}
    limits = httpx.Limits(max_connections=config.max_concurrency, max_keepalive_connections=config.max_concurrency or 64)
    timeout = httpx.Timeout(config.timeout_s, connect=10.0, pool=None)  # pool: waiting for a slot is not a failure
    async with httpx.AsyncClient(base_url=config.url, headers=headers, timeout=timeout, limits=limits) as client:
        model = await check_server(client, config.url, config.model)
        before = await spec_counters(client, model)
        if on_start is not None:
            on_start(model)
        records, interrupted, origin_unix = await _arrive_and_send(client, config, model, prompts, on_done, stop)
        after = await spec_counters(client, model)
    sent = [r.sent_s for r in records if r.sent_s is not None]
    finished = [r.finished_s for r in records if r.finished_s is not None]
    duration = max(finished) - min(sent) if sent and finished else 0.0
    return LoadResult(model, records, duration, before, after, interrupted, origin_unix)


async def _arrive_and_send(client, config: LoadConfig, model: str, prompts, on_done, stop: asyncio.Event):
    # separate streams: a new schedule does not move the arrival times, nor a new rate the prompts
    arrivals = arrival_offsets(config.rate, config.burstiness, random.Random(f"{config.seed}:arrivals"))
    picker = PromptPicker(prompts, config.schedule, random.Random(f"{config.seed}:prompts"))
    slots = asyncio.Semaphore(config.max_concurrency) if config.max_concurrency else None
    closed_loop = math.isinf(config.rate)
    limit, end = config.request_limit, config.end_s
    records: list[RequestRecord] = []
    tasks: list[asyncio.Task] = []
    origin, origin_unix = time.perf_counter(), time.time()

    async def one(record: RequestRecord, prompt: Prompt, holding_slot: bool) -> None:
        acquired = holding_slot
        try:
            if slots is not None and not acquired:
                await slots.acquire()
                acquired = True
            headers = {"X-Traffic-Key": config.traffic_key.format(kind=prompt.kind)} if config.traffic_key else {}
            body = request_body(config.endpoint, prompt.prompt, model, config.max_tokens, config.temperature,
                                config.extra_body)
            await send(client, record, config.endpoint, body, headers, origin)
        except asyncio.CancelledError:  # only run_load cancels, on stop: the record says so
            record.status, record.error = "cancelled", "the run was interrupted"
        finally:
            record.finished_s = time.perf_counter() - origin
            if slots is not None and acquired:
                slots.release()
        if on_done is not None:
            on_done(record)

    for index, offset in enumerate(arrivals):
        if limit is not None and index >= limit:
            break
        if closed_loop:
            if slots is not None and not await _unless_stopped(slots.acquire(), stop):
                break
            offset = time.perf_counter() - origin
        elif end is not None and offset >= end:  # past the end: not worth sleeping until it
            break
        elif not await _unless_stopped(asyncio.sleep(max(0.0, origin + offset - time.perf_counter())), stop):
            break
        if stop.is_set() or (end is not None and offset >= end):
            if closed_loop and slots is not None:
                slots.release()
            break
        prompt = picker.pick(offset)
        record = RequestRecord(index, prompt.id, prompt.kind, offset)
        records.append(record)
        tasks.append(asyncio.create_task(one(record, prompt, holding_slot=closed_loop)))

    if tasks:
        everything = asyncio.gather(*tasks)
        if not await _unless_stopped(asyncio.shield(everything), stop):
            for task in tasks:
                task.cancel()
        await asyncio.gather(everything, return_exceptions=True)
    for record in records:
        if record.status == "not_sent":  # cancelled before its task first ran
            record.status, record.error = "cancelled", "the run was interrupted"
    return records, stop.is_set(), origin_unix


async def _unless_stopped(awaitable, stop: asyncio.Event) -> bool:
    """Await ``awaitable`` unless ``stop`` is set first; True when it finished."""
    if stop.is_set():
        if asyncio.iscoroutine(awaitable):
            awaitable.close()
        return False
    work = asyncio.ensure_future(awaitable)
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({work, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if work.done():
        return True
    work.cancel()
    return False
