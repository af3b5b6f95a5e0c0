"""What telemetry hears of the batched engine's forwards (``on_batch_step``), in process and on a
server's /metrics: rows per forward, rows that drafted, the batch cap's call, riding prompts."""

from __future__ import annotations

import re
import threading

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.batching import BatchedDecoder
from adaptive_spec.server import Settings
from batch_kit import Confident, EchoDrafter, dear_drafts_cap
from policies.batch_step import CAP_CALLS
from policies.registry import make_policy
from server_kit import MODEL, StepCounter, client, live_server, tiny_decoder, wait_until
from tiny import loaded, one_thread, tiny_llama

COPY = [1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6]
LATE = [9, 9, 30, 31, 32, 9, 30]


class Heard:
    def __init__(self) -> None:
        self.forwards, self.row_steps = [], []

    def on_step(self, request, outcome, events) -> None:
        self.row_steps.append(outcome)

    def on_batch_step(self, model, step) -> None:
        self.forwards.append((model, step))


def test_every_forward_is_heard_with_its_rows_drafts_cap_call_and_riding_prompt():
    heard = Heard()
    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0)), [EchoDrafter()], observers=[heard])
    cap = dear_drafts_cap()  # a step with any multi-token row costs ~4x a plain one
    with one_thread():
        engine = BatchedDecoder(decoder, max_batch=4, draft_cap=cap)
        assert engine.slots.carries_riders  # the late prompt rides in a decode forward
        bound = engine.submit(COPY, policy=Confident("echo", start_k=8), max_new_tokens=30)
        fixed = engine.submit(COPY, policy=make_policy("static:echo:4", ["echo"]), max_new_tokens=12)
        engine.step()
        engine.step()
        late = engine.submit(LATE, policy=make_policy("plain", ["echo"]), max_new_tokens=6)
        results = engine.run()
    steps = [step for _, step in heard.forwards]
    assert {model for model, _ in heard.forwards} == {decoder.target_model.name}
    # one forward per decode step of the batch, and its rows are the rows' steps the observers heard
    assert sum(s.rows for s in steps) == len(heard.row_steps) == sum(r.stats.steps for r in results.values())
    assert sum(s.drafting for s in steps) == sum(1 for o in heard.row_steps if o.proposed)
    assert sum(s.prompt_tokens for s in steps) == len(LATE)
    assert all(s.cap in CAP_CALLS and 0 <= s.drafting <= s.rows and s.seconds > 0 for s in steps)
    # beside the others, the bound row's drafts cost them 4x: cut to nothing, 8 tokens a step
    company = [s for s in steps if s.rows > 1]
    assert company and all(s.cap == "plain" and s.cut_tokens == 8 and s.drafting == 1 for s in company[:6])
    alone = [s for s in steps if s.rows == 1]
    assert alone and all(s.cap == "none" and s.cut_tokens == 0 for s in alone)  # a lone row is never cut
    assert sum(s.cut_tokens for s in steps) == 8 * sum(1 for s in steps if s.cap == "plain")
    assert results[bound].stats.draft_tokens > 0 and results[fixed].stats.draft_tokens > 0 and late in results


def test_a_failing_batch_observer_does_not_break_generation():
    class Broken:
        def on_batch_step(self, model, step):
            raise RuntimeError("telemetry down")

    decoder = SpeculativeDecoder(loaded(tiny_llama(seed=0)), [EchoDrafter()], observers=[Broken()])
    reference = SpeculativeDecoder(loaded(tiny_llama(seed=0)), [EchoDrafter()])
    with one_thread():
        engine = BatchedDecoder(decoder, max_batch=2)
        ids = [engine.submit(p, policy=make_policy("static:echo:3", ["echo"]), max_new_tokens=10) for p in (COPY, LATE)]
        results = engine.run()
        assert [results[i].token_ids for i in ids] == [reference.generate(p, max_new_tokens=10).token_ids for p in (COPY, LATE)]
    assert decoder.observers.errors_by_hook["on_batch_step"] > 0


def test_served_batches_are_on_the_metrics_page_by_rows():
    from adaptive_spec.telemetry.spec import build_prometheus_observer

    # slowed steps (a row-step 20 ms, a request half a second or more): the four requests, sent
    # together, overlap on any machine
    decoder = tiny_decoder(observers=[build_prometheus_observer([]), StepCounter(delay_s=0.02)],
                           policy="static:ngram:3")
    prompts = ["<5> <9> <3> <5> <9> <3> <5>", "<1> <2> <3> <4> <1> <2>", "<7> <7> <8> <7> <7> <8> <7>", "<4> <2>"]
    answers = []
    with one_thread(), live_server(decoder, Settings(max_batch=4)) as (url, app), client(url) as http:
        before = _batch_counters(http.get("/metrics").text)

        def ask(prompt):
            body = {"prompt": prompt, "max_tokens": 24, "temperature": 0}
            answers.append(http.post("/v1/completions", json=body).json())

        threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
        for t in threads:
            t.start()
        # while they decode, the gauge counts the batch's rows
        running = wait_until(lambda: _running(http.get("/metrics").text) >= 2, timeout_s=30)
        for t in threads:
            t.join(timeout=60)
        page = http.get("/metrics").text
    assert running
    after = _batch_counters(page)
    assert len(answers) == 4 and all("metrics" in a for a in answers), answers
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    rows = {int(k[1]) for k in delta if k[0] == "forwards" and delta[k] > 0}
    assert max(rows) >= 2, rows  # they shared forwards
    row_steps = sum(v for k, v in delta.items() if k[0] == "row_steps")
    assert row_steps == sum(a["metrics"]["steps"] for a in answers)
    assert sum(v for k, v in delta.items() if k[0] == "drafting_row_steps") == \
        sum(a["metrics"]["speculative_decoding"]["num_spec_steps"] for a in answers)
    # every row a forward holds is a row-step of that forward's size
    assert all(delta[("row_steps", str(r))] == r * delta[("forwards", str(r))] for r in rows)
    assert _running(page) == 0


def _running(text: str) -> float:
    return float(re.search(r"^adaptive_spec_requests_running (\S+)$", text, re.M).group(1))


def _batch_counters(text: str) -> dict[tuple[str, str], float]:
    """The tiny model's batch counters on a /metrics page, by (name, rows)."""
    out: dict[tuple[str, str], float] = {}
    pattern = re.compile(r'^adaptive_spec_batch_(forwards|row_steps|drafting_row_steps)_total\{(.*)\} (\S+)$', re.M)
    for name, labels, value in pattern.findall(text):
        if f'gen_ai_request_model="{MODEL}"' in labels:
            rows = re.search(r'adaptive_spec_batch_rows="(\d+)"', labels).group(1)
            out[name, rows] = out.get((name, rows), 0.0) + float(value)
    return out


def test_the_one_at_a_time_worker_counts_its_running_request():
    decoder = tiny_decoder(observers=[StepCounter(delay_s=0.02)], policy="plain")
    with one_thread(), live_server(decoder, Settings(max_batch=1)) as (url, _), client(url) as http:
        asked = threading.Thread(target=http.post, args=("/v1/completions",),
                                 kwargs={"json": {"prompt": "<1> <2>", "max_tokens": 30, "temperature": 0}})
        asked.start()
        assert wait_until(lambda: _running(http.get("/metrics").text) == 1, timeout_s=30)
        asked.join(timeout=60)
        # the answer goes out just before the worker counts the request ended
        assert wait_until(lambda: _running(http.get("/metrics").text) == 0, timeout_s=10)
