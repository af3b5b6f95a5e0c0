"""The engine worker with continuous batching: the same queue and contract as ``EngineWorker``,
but up to ``max_batch`` jobs decode together in one ``BatchedDecoder``.

Between steps the worker takes what the queue holds while rows are free (it blocks on the queue
only when nothing is decoding), drops the rows of jobs whose client went away, and runs one
step; each job's new tokens become text pieces (``TextPieces``: stop strings and split characters
held back) on its event loop. A step that fails fails the jobs in the batch with a 500, not the
worker.
"""

from __future__ import annotations

import logging
import queue
import time

from adaptive_spec.batching import BatchedDecoder
from adaptive_spec.config import PREFILL_CHUNK
from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.server.errors import APIError
from adaptive_spec.server.worker import EngineWorker, Job
from adaptive_spec.text_pieces import TextPieces
from policies.batch_cap import BatchDraftCap

log = logging.getLogger("adaptive_spec.server")


class BatchedWorker(EngineWorker):
    def __init__(self, decoder, max_queue: int, max_batch: int, retry_after_s: int = 1,
                 prefill_chunk: int | None = PREFILL_CHUNK, step_costs: tuple = (),
                 plain_slowdown: float | None = BatchDraftCap.plain_slowdown,
                 objective: str = BatchDraftCap.objective, cut: str = BatchDraftCap.cut) -> None:
        cap = BatchDraftCap(plain_slowdown=plain_slowdown, objective=objective, cut=cut)
        cap.warm(step_costs)  # (rows, width, seconds, context) from a calibrated profile: costs known from the first step
        self.engine = BatchedDecoder(decoder, max_batch=max_batch, draft_cap=cap,  # before the thread starts
                                     prefill_chunk=prefill_chunk)
        self._jobs: dict[int, tuple[Job, TextPieces | None]] = {}  # engine request id -> job
        super().__init__(decoder, max_queue, retry_after_s)

    def _run(self) -> None:
        engine = self.engine
        while True:
            while engine.pending < engine.max_batch:
                try:  # wait for work only when there is nothing to decode
                    job = self.queue.get_nowait() if engine.pending else self.queue.get()
                except queue.Empty:
                    break
                if job is None:
                    return
                self._admit(job)
            for request_id, (job, _) in list(self._jobs.items()):
                if job.cancelled.is_set():  # its client went away: its row leaves before the next step
                    engine.cancel(request_id)
                    self._end(request_id)
                    self.cancelled += 1
            if not engine.pending:
                continue
            try:
                finished = engine.step()
            except Exception as exc:
                log.exception("the engine failed on a batch")
                for request_id in engine.fail_all(exc):
                    job, _ = self._end(request_id)
                    job.emit("error", APIError(500, "the engine failed on this request; the server log has the details"))
                # those that finished in that step before it failed: their results are in, and
                # their clients would otherwise wait for ever (the step never returned their ids)
                finished = [request_id for request_id in self._jobs if request_id in engine.results]
            for request_id in finished:
                job, pieces = self._end(request_id)
                try:
                    result = engine.results.pop(request_id)
                    rest = pieces.finish(result.text) if pieces is not None else None
                except Exception:  # this job's answer alone: the thread serves the others on
                    log.exception("finishing a request failed")
                    job.emit("error", APIError(500, "the engine failed on this request; the server log has the details"))
                    continue
                if rest:
                    job.emit("text", rest)
                self.served += 1
                job.emit("done", result)

    def _admit(self, job: Job) -> None:
        if job.cancelled.is_set():
            self.cancelled += 1
            self._one_less()
            return
        job.started = time.perf_counter()
        pieces = TextPieces(self.decoder.tokenizer, job.config.stop_strings) if job.streamed else None

        def on_tokens(tokens: list[int]) -> None:
            piece = pieces.add(tokens)
            if piece:
                job.emit("text", piece)

        try:
            request_id = self.engine.submit(job.prompt_ids, job.config, key=job.key,
                                            on_tokens=on_tokens if pieces is not None else None, **job.overrides)
        except InvalidParameterError as exc:
            job.emit("error", APIError.from_invalid(exc))
            self._one_less()
            return
        except Exception:  # refused alone: a job the engine cannot take must not stop the thread
            log.exception("the engine could not take a request")
            job.emit("error", APIError(500, "the engine failed on this request; the server log has the details"))
            self._one_less()
            return
        self._jobs[request_id] = (job, pieces)

    def _end(self, request_id: int) -> tuple[Job, TextPieces | None]:
        entry = self._jobs.pop(request_id)
        self._one_less()
        return entry

    def _one_less(self) -> None:
        with self._idle:
            self.in_flight -= 1
            self._idle.notify_all()
