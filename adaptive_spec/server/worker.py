"""The engine worker: one thread that runs every forward, fed by a bounded FIFO queue.

The event loop never runs a model: a request becomes a ``Job`` on the queue, the worker thread
decodes it and hands its text pieces and its result back to the job's event loop. A full queue
is a 429 with ``Retry-After``, a draining worker a 503. A job whose client went away is
cancelled: skipped if still queued, else stopped at its next step (the decoder's stream is
closed, so its request ends and the decoder moves on).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass, field

from adaptive_spec.config import GenerationConfig
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.result import GenerationResult
from adaptive_spec.server.errors import APIError

log = logging.getLogger("adaptive_spec.server")


@dataclass
class Job:
    prompt_ids: list[int]
    config: GenerationConfig
    key: str
    overrides: dict
    loop: asyncio.AbstractEventLoop
    # only a stream needs its text as it comes: a non-streamed job sends none, since every event
    # wakes the event loop's thread, which then competes with the engine's thread for the GIL
    streamed: bool = True
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    arrived: float = field(default_factory=time.perf_counter)
    started: float | None = None
    cancelled: threading.Event = field(default_factory=threading.Event)

    def emit(self, kind: str, value=None) -> None:
        """Hand an event to the job's event loop (called from the worker thread)."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, (kind, value))
        except RuntimeError:  # the loop is closed: the client is gone, nobody waits for this
            self.cancelled.set()


class EngineWorker:
    """Runs jobs one at a time on ``decoder``; ``max_queue`` jobs wait at most."""

    def __init__(self, decoder, max_queue: int, retry_after_s: int = 1) -> None:
        self.decoder = decoder
        self.queue: queue.Queue[Job | None] = queue.Queue(maxsize=max_queue)
        self.retry_after_s = retry_after_s
        self.draining = False
        self.in_flight = 0
        self.served = self.cancelled = 0
        self._idle = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="adaptive-spec-engine", daemon=True)
        self._thread.start()

    @property
    def depth(self) -> int:
        return self.queue.qsize()

    @property
    def running(self) -> int:
        """Requests taken from the queue and not yet ended: generating, or with continuous batching
        also prefilling or about to join the batch."""
        return max(0, self.in_flight - self.depth)

    def submit(self, job: Job) -> None:
        if self.draining:
            raise APIError(503, "the server is shutting down; retry on another replica", code="draining")
        with self._idle:
            try:
                self.queue.put_nowait(job)
            except queue.Full:
                raise APIError(429, f"the request queue is full ({self.queue.maxsize} waiting); retry shortly",
                               code="queue_full", headers={"Retry-After": str(self.retry_after_s)}) from None
            self.in_flight += 1

    def drain(self, grace_s: float) -> bool:
        """Refuse new jobs, wait up to ``grace_s`` for the queued and running ones; True if all ended."""
        self.draining = True
        deadline = time.monotonic() + grace_s
        with self._idle:
            while self.in_flight and time.monotonic() < deadline:
                self._idle.wait(timeout=max(0.0, min(0.5, deadline - time.monotonic())))
            return self.in_flight == 0

    def stop(self) -> None:
        self.draining = True
        try:
            self.queue.put_nowait(None)
        except queue.Full:  # jobs still queued at a forced stop: they are cancelled with the process
            pass

    def _run(self) -> None:
        while True:
            job = self.queue.get()
            if job is None:
                return
            try:
                if job.cancelled.is_set():
                    self.cancelled += 1
                else:
                    self._serve(job)
            finally:
                with self._idle:
                    self.in_flight -= 1
                    self._idle.notify_all()

    def _serve(self, job: Job) -> None:
        job.started = time.perf_counter()
        results: list[GenerationResult] = []
        try:
            pieces = self.decoder.stream(job.prompt_ids, job.config, key=job.key, on_result=results.append,
                                         **job.overrides)
            try:
                for piece in pieces:
                    if job.cancelled.is_set():
                        break
                    if job.streamed:
                        job.emit("text", piece)
            finally:
                pieces.close()
        except InvalidParameterError as exc:
            job.emit("error", APIError.from_invalid(exc))
            return
        except Exception:
            log.exception("the engine failed on a request")
            job.emit("error", APIError(500, "the engine failed on this request; the server log has the details"))
            return
        if job.cancelled.is_set():
            self.cancelled += 1
            return
        if not results:  # a stream that ended without its result: the job is answered, the thread goes on
            log.error("the engine ended a request without a result")
            job.emit("error", APIError(500, "the engine failed on this request; the server log has the details"))
            return
        self.served += 1
        job.emit("done", results[0])
