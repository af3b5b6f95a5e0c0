"""Response bodies in OpenAI's shapes, with per-request speculation statistics in vLLM's.

``metrics.speculative_decoding`` counts, for this request, what the Prometheus counters count
for all of them (``num_draft_tokens``, ``num_accepted_draft_tokens``, ...), so summed over
requests the two agree. ``acceptance_histogram[i]`` is the number of drafting steps that kept
exactly ``i`` draft tokens. Timing is from the request's arrival at the server:
``queue_time_ms`` waiting for the engine, ``time_to_first_token_ms`` until the first token was
computed (queue included).
"""

from __future__ import annotations

import time
from collections import Counter

from adaptive_spec.result import GenerationResult
from adaptive_spec.server.worker import Job

FINISH = {"eos": "stop", "stop": "stop", "length": "length"}


def cut_at_stop(text: str, stops: tuple[str, ...]) -> str:
    """``text`` before its first stop string: OpenAI's answers leave the stop sequence out, while
    the engine's text ends with it (as transformers' ``stop_strings`` does).

    >>> cut_at_stop("<1><5><2><5>", ("<9>", "<5>")), cut_at_stop("<1><2>", ("<5>",))
    ('<1>', '<1><2>')
    """
    found = [i for i in (text.find(stop) for stop in stops) if i >= 0]
    return text[:min(found)] if found else text


def sendable(unsent: str, stops: tuple[str, ...]) -> int:
    """How many characters of a stream's ``unsent`` text can go out now: those before a stop string,
    and none of a tail that the next text could complete into one (the engine's stream holds such a
    tail back only until its step ends with the stop string, which it then sends).

    >>> sendable("<1><5><2>", ("<5>",)), sendable("<1><", ("<5>",)), sendable("<1><2>", ("<5>",))
    (3, 3, 6)
    """
    cut = len(cut_at_stop(unsent, stops))
    if cut < len(unsent) or not stops:
        return cut
    for start in range(max(0, len(unsent) - max(map(len, stops)) + 1), len(unsent)):
        if any(stop.startswith(unsent[start:]) for stop in stops):
            return start
    return len(unsent)


def usage(result: GenerationResult) -> dict:
    s = result.stats
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.new_tokens,
            "total_tokens": s.prompt_tokens + s.new_tokens}


def metrics(result: GenerationResult, job: Job) -> dict:
    s = result.stats
    drafting = [step for step in result.steps if step.proposed]
    histogram = [0] * (max((step.num_accepted for step in drafting), default=0) + 1) if drafting else []
    for step in drafting:
        histogram[step.num_accepted] += 1
    queue_s = (job.started or job.arrived) - job.arrived
    return {
        "speculative_decoding": {
            "num_spec_steps": s.drafts, "num_draft_tokens": s.draft_tokens,
            "num_accepted_draft_tokens": s.accepted_tokens, "draft_acceptance_rate": s.acceptance_rate,
            "mean_acceptance_length": s.mean_acceptance_length, "acceptance_histogram": histogram,
            "drafters": dict(Counter(step.drafter for step in drafting)),
            "k": {str(k): n for k, n in sorted(Counter(step.k for step in drafting).items())},
        },
        "steps": s.steps,
        "traffic_key": job.key,
        "queue_time_ms": queue_s * 1e3,
        "time_to_first_token_ms": (queue_s + s.prefill_s) * 1e3,
        "tokens_per_second": s.tokens_per_s,
    }


def completion(request_id: str, model: str, result: GenerationResult, job: Job) -> dict:
    return {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": cut_at_stop(result.text, job.config.stop_strings), "logprobs": None,
                         "finish_reason": FINISH[result.finish_reason]}],
            "usage": usage(result), "metrics": metrics(result, job)}


def chat_completion(request_id: str, model: str, result: GenerationResult, job: Job) -> dict:
    return {"id": request_id, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant",
                                                 "content": cut_at_stop(result.text, job.config.stop_strings)},
                         "logprobs": None,
                         "finish_reason": FINISH[result.finish_reason]}],
            "usage": usage(result), "metrics": metrics(result, job)}


def chunk(request_id: str, model: str, chat: bool, text: str | None, finish: str | None = None,
          first: bool = False) -> dict:
    """One streamed chunk: ``text`` (None in the final chunk) and the finish reason once known."""
    if chat:
        delta = {"role": "assistant"} if first else {}
        if text is not None:
            delta["content"] = text
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return {"id": request_id, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                "choices": [choice]}
    choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
    return {"id": request_id, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [choice]}


def usage_chunk(request_id: str, model: str, chat: bool, result: GenerationResult, job: Job) -> dict:
    """The extra last chunk of ``stream_options.include_usage``: no choices, the usage and statistics."""
    return {"id": request_id, "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()), "model": model, "choices": [], "usage": usage(result),
            "metrics": metrics(result, job)}
