"""``adaptive-spec loadgen``: arrival laws, statistics, and runs against a live tiny server.

Every server binds 127.0.0.1 on a free port; every run is bounded in requests and seconds. No
test asserts a wall-clock time: latencies are only checked for consistency with each other.
"""

from __future__ import annotations

import asyncio
import doctest
import importlib
import itertools
import json
import math
import random
import socket
import statistics
import sys
import time

import pytest

from adaptive_spec.errors import InvalidParameterError
from adaptive_spec.loadgen.arrivals import Phase, PromptPicker, Schedule, arrival_offsets, check_kinds, gaps, parse_schedule
from adaptive_spec.loadgen.client import RequestRecord, parse_spec_counters
from adaptive_spec.loadgen.report import FORMAT, build_report
from adaptive_spec.loadgen.run import LoadConfig, run_load
from adaptive_spec.loadgen.stats import acceptance, parse_slos, percentile, summarize
from adaptive_spec.prompts import Prompt
from adaptive_spec.server import Settings
from server_kit import MODEL, live_server, tiny_decoder
from test_layers import RUN_CLI, run_in_fresh_interpreter
from tiny import one_thread

LOADGEN_MODULES = ["adaptive_spec.loadgen", *(f"adaptive_spec.loadgen.{m}" for m in
                                              ("arrivals", "client", "stats", "run", "report", "cli"))]

# token i of the tiny model's tokenizer is the text "<i>": counting "<" counts tokens
PROMPTS = [
    Prompt("copy-0", "<1> <2> <3> <4> <1> <2> <3> <4> <1> <2>", "copy"),
    Prompt("copy-1", "<5> <9> <3> <5> <9> <3> <5> <9> <3> <5>", "copy"),
    Prompt("open-0", "<7> <11> <40> <2>", "open"),
    Prompt("open-1", "<13> <8> <21>", "open"),
]
# prompt lookup at a fixed k on every request: drafts happen, so the acceptance counters move
STATIC_NGRAM = {"speculation": {"mode": "static", "drafter": "ngram", "k": 4}}


# --- arrivals ---------------------------------------------------------------------------------

N_GAPS = 20_000


@pytest.mark.parametrize("burstiness", [1.0, 0.25, 4.0])
def test_gaps_have_mean_one_over_rate_and_cv_one_over_sqrt_burstiness(burstiness):
    rate = 5.0
    sample = list(itertools.islice(gaps(rate, burstiness, random.Random(7)), N_GAPS))
    mean, cv = statistics.fmean(sample), statistics.pstdev(sample) / statistics.fmean(sample)
    expected_cv = 1 / math.sqrt(burstiness)
    # the sample mean's standard error is cv * mean / sqrt(n): 5 of them is far outside chance
    assert abs(mean - 1 / rate) <= 5 * expected_cv / rate / math.sqrt(N_GAPS)
    # the CV estimate is noisier (heavier tails at low shape); 30 seeds stayed within 3.1%: allow 6%
    assert cv == pytest.approx(expected_cv, rel=0.06)


def test_infinite_rate_sends_every_request_at_once():
    assert list(itertools.islice(arrival_offsets(math.inf, 1.0, random.Random(0)), 5)) == [0.0] * 5


def test_arrivals_start_at_zero_rise_and_repeat_with_the_seed():
    first = list(itertools.islice(arrival_offsets(2.0, 0.5, random.Random(3)), 50))
    again = list(itertools.islice(arrival_offsets(2.0, 0.5, random.Random(3)), 50))
    assert first == again and first[0] == 0.0 and first == sorted(first)


def test_a_schedule_string_is_phases_back_to_back():
    schedule = parse_schedule("copy:300, open+collapse:60")
    assert [p.seconds for p in schedule.phases] == [300.0, 60.0] and schedule.total_s == 360.0
    assert schedule.phases[1].mix == {"open": 1.0, "collapse": 1.0}
    assert [schedule.phase_at(t) for t in (0, 299.9, 300, 359.9, 360)] == [0, 0, 1, 1, None]
    assert schedule.describe() == "copy:300,open+collapse:60"


@pytest.mark.parametrize("suffix, text", [
    (".json", '[{"seconds": 5, "kind": "copy"}, {"seconds": 10, "mix": {"copy": 1, "open": 3}}]'),
    (".yaml", "- {seconds: 5, kind: copy}\n- seconds: 10\n  mix: {copy: 1, open: 3}\n"),
])
def test_a_schedule_file_gives_weighted_phases(tmp_path, suffix, text):
    path = tmp_path / f"schedule{suffix}"
    path.write_text(text)
    schedule = parse_schedule(str(path))
    assert [(p.seconds, p.mix) for p in schedule.phases] == [(5.0, {"copy": 1.0}), (10.0, {"copy": 1.0, "open": 3.0})]
    assert schedule.describe() == "copy:5,copy=1+open=3:10"


@pytest.mark.parametrize("text, says", [
    ("copy", "is not KIND:SECONDS"),
    ("copy:0", "must be > 0 seconds"),
    ("copy:soon", "not a number of seconds"),
    (":30", "is not KIND:SECONDS"),
])
def test_a_bad_schedule_names_the_parameter(text, says):
    with pytest.raises(InvalidParameterError, match=says) as info:
        parse_schedule(text)
    assert info.value.name == "schedule"


@pytest.mark.parametrize("data, says", [
    (b"\xff\xfe[]", "byte 0xff at offset 0 is not valid UTF-8"),
    (b'[{"seconds": 1' + b"0" * 400 + b', "kind": "copy"}]', "must be > 0 seconds"),
    (b'[{"seconds": 5, "mix": {"copy": 1' + b"0" * 400 + b"}}]", "must be a finite number > 0"),
])
def test_a_schedule_file_that_is_not_utf8_or_holds_a_huge_integer_is_refused_naming_schedule(tmp_path, data, says):
    path = tmp_path / "schedule.json"
    path.write_bytes(data)
    with pytest.raises(InvalidParameterError, match=says) as info:
        parse_schedule(str(path))
    assert info.value.name == "schedule"


def test_a_schedule_kind_without_prompts_is_refused_with_the_kinds_there():
    with pytest.raises(InvalidParameterError, match=r"unknown kind 'chat'; the prompt file has copy, open") as info:
        check_kinds(parse_schedule("copy:10,chat:10"), PROMPTS)
    assert info.value.name == "schedule"


def test_prompts_follow_the_phase_and_its_weights():
    schedule = Schedule([Phase(10.0, {"copy": 1.0}), Phase(10.0, {"copy": 1.0, "open": 3.0})])
    picker = PromptPicker(PROMPTS, schedule, random.Random(0))
    assert {picker.pick(t).kind for t in (0, 5, 9.9)} == {"copy"}
    kinds = [picker.pick(15).kind for _ in range(4000)]
    # open:copy drawn 3:1; the binomial standard deviation of the open share is ~0.7%: allow 5 of them
    assert kinds.count("open") / len(kinds) == pytest.approx(0.75, abs=0.035)
    assert picker.pick(20) is None  # past the schedule


def test_a_repeated_kind_in_the_string_form_is_one_kind():
    # equal weights only on the command line; a file gives weights
    assert parse_schedule("open+open+copy:10").phases[0].mix == {"open": 1.0, "copy": 1.0}


# --- statistics -------------------------------------------------------------------------------

def test_percentiles_interpolate_like_numpy():
    values = [15, 20, 35, 40, 50]
    # numpy.percentile(values, [50, 90, 95, 99]) = 35, 46, 48, 49.6
    assert [percentile(values, q) for q in (50, 90, 95, 99)] == pytest.approx([35, 46, 48, 49.6])
    assert percentile(values, 0) == 15 and percentile(values, 100) == 50


def _record(i, ttft, e2el, tokens, status=200) -> RequestRecord:
    r = RequestRecord(i, f"p{i}", "copy", arrival_s=float(i), status=status, output_tokens=tokens,
                      prompt_tokens=10, ttft_s=ttft, e2el_s=e2el)
    r.itl_s = [(e2el - ttft) / (tokens - 1)] * (tokens - 1) if status == 200 and tokens > 1 else []
    return r


def test_goodput_counts_completed_requests_within_every_slo():
    records = [
        _record(0, 0.100, 1.000, 10),  # tpot 100 ms
        _record(1, 0.300, 0.700, 5),   # ttft over
        _record(2, 0.050, 0.250, 3),   # tpot 100 ms
        _record(3, 0.050, 2.050, 11),  # tpot 200 ms: over
        _record(4, 0.200, 0.200, 1),   # one token: no decode phase, meets any TPOT SLO
        _record(5, None, None, 0, status=429),
    ]
    summary = summarize(records, duration_s=4.0, slos=parse_slos(["ttft:200 tpot:150"]))
    assert summary["goodput"] == {"slos_ms": {"ttft": 200.0, "tpot": 150.0}, "good_requests": 3, "requests_per_s": 0.75}
    assert (summary["requests"], summary["completed"], summary["failed"]) == (6, 5, 1)
    assert summary["errors"] == {"429": 1}
    assert summary["output_tokens"] == 30 and summary["output_throughput"] == 7.5
    assert summary["request_throughput"] == 1.25
    assert summary["tpot_ms"]["p50"] == pytest.approx(100.0)  # over the 4 requests with a decode phase
    assert summary["e2el_ms"]["mean"] == pytest.approx(840.0)
    assert summarize(records, 4.0, parse_slos(["e2el:800"]))["goodput"]["good_requests"] == 3
    assert summarize(records, 4.0, {})["goodput"] is None


@pytest.mark.parametrize("spec, says", [("ttft", "METRIC:MS"), ("latency:5", "METRIC:MS"), ("tpot:fast", "not a number"),
                                        ("e2el:0", "> 0 ms")])
def test_a_bad_slo_names_goodput(spec, says):
    with pytest.raises(InvalidParameterError, match=says) as info:
        parse_slos([spec])
    assert info.value.name == "goodput"


def test_acceptance_is_derived_from_counter_increments():
    before = {"drafts": 10.0, "draft_tokens": 40.0, "accepted_tokens": 20.0}
    after = {"drafts": 30.0, "draft_tokens": 120.0, "accepted_tokens": 60.0}
    assert acceptance(before, after) == {"drafts": 20, "draft_tokens": 80, "accepted_tokens": 40,
                                         "acceptance_rate": 0.5, "mean_acceptance_length": 3.0}
    assert acceptance(None, after) is None


def test_spec_counters_are_summed_over_drafters_of_the_model_only():
    text = "\n".join([
        "# TYPE adaptive_spec_spec_decode_draft_tokens_total counter",
        'adaptive_spec_spec_decode_draft_tokens_total{adaptive_spec_drafter="ngram",gen_ai_request_model="m"} 12.0',
        'adaptive_spec_spec_decode_draft_tokens_total{adaptive_spec_drafter="int8",gen_ai_request_model="m"} 8.0',
        'adaptive_spec_spec_decode_draft_tokens_total{adaptive_spec_drafter="ngram",gen_ai_request_model="other"} 99.0',
        'adaptive_spec_spec_decode_accepted_tokens_total{adaptive_spec_drafter="ngram",gen_ai_request_model="m"} 5.0',
        'adaptive_spec_spec_decode_drafts_total{adaptive_spec_drafter="ngram",gen_ai_request_model="m"} 4.0',
    ])
    assert parse_spec_counters(text, "m") == {"drafts": 4.0, "draft_tokens": 20.0, "accepted_tokens": 5.0}
    assert parse_spec_counters("# HELP up other\nup 1\n", "m") is None  # not this project's server


@pytest.mark.parametrize("name", ["adaptive_spec.loadgen.arrivals", "adaptive_spec.loadgen.stats",
                                  "adaptive_spec.loadgen.client"])
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("change, name", [
    ({"rate": 0.0}, "rate"), ({"rate": -2.0}, "rate"), ({"rate": math.nan}, "rate"), ({"burstiness": 0.0}, "burstiness"),
    ({"max_concurrency": 0}, "max_concurrency"), ({"num_requests": 0}, "num_requests"), ({"duration_s": -1.0}, "duration"),
    ({"endpoint": "embeddings"}, "endpoint"), ({"url": "127.0.0.1:8000"}, "url"), ({"traffic_key": "{user}"}, "traffic_key"),
    ({"duration_s": 10.0}, "rate"),  # rate inf over a duration without a concurrency limit: no end to the requests
    ({"traffic_key": "{kind.foo}"}, "traffic_key"), ({"traffic_key": "{kind:d}"}, "traffic_key"),
    # fields loadgen sets itself: the report would describe other requests than those sent
    ({"extra_body": {"stream": False}}, "extra_body"), ({"extra_body": {"max_tokens": 7}}, "extra_body"),
])
def test_a_bad_config_names_the_parameter(change, name):
    with pytest.raises(InvalidParameterError) as info:
        LoadConfig(**change).validate(PROMPTS)
    assert info.value.name == name


# --- runs against a live server ----------------------------------------------------------------

@pytest.fixture(scope="module")
def served():
    from adaptive_spec.telemetry.spec import build_prometheus_observer

    with one_thread(), live_server(tiny_decoder(observers=[build_prometheus_observer([])])) as (url, app):
        yield url


def _run(config: LoadConfig, prompts=PROMPTS, **kwargs):
    return asyncio.run(asyncio.wait_for(run_load(config, prompts, **kwargs), timeout=120))


def test_a_run_records_every_request_with_the_servers_token_counts(served):
    schedule = parse_schedule("copy:0.2,open:60")
    config = LoadConfig(url=served, rate=50.0, max_concurrency=4, num_requests=30, max_tokens=8, seed=1,
                        schedule=schedule, extra_body=STATIC_NGRAM, slos_ms={"ttft": 60_000.0})
    before = time.time()
    result = _run(config)
    after = time.time()
    records = result.records
    assert [r.index for r in records] == list(range(30))
    # the run's t = 0 in Unix time, so a server's own records line up with the trace
    assert before <= result.origin_unix <= result.origin_unix + max(r.finished_s for r in records) <= after
    assert all(r.ok for r in records), [(r.status, r.error) for r in records if not r.ok]
    by_id = {p.id: p for p in PROMPTS}
    for r in records:
        assert r.usage_reported and r.output_tokens == r.text.count("<") == 8  # the tiny model has no EOS
        assert r.prompt_tokens == len(by_id[r.prompt_id].prompt.split())
        assert r.kind == by_id[r.prompt_id].kind
        assert 0 < r.ttft_s <= r.e2el_s and len(r.itl_s) == r.chunks - 1
        assert r.arrival_s <= r.sent_s < r.finished_s
    for r in records:  # each request's kind is the one of the phase it arrived in
        assert r.kind == ("copy" if r.arrival_s < 0.2 else "open")
    assert _most_in_flight(records) <= 4

    report = json.loads(json.dumps(build_report(config, result, "prompts.jsonl")))  # what the file holds
    assert report["format"] == FORMAT and report["model"] == MODEL and not report["interrupted"]
    assert report["origin_unix"] == result.origin_unix
    assert report["summary"]["completed"] == 30 and report["summary"]["errors"] == {}
    assert report["summary"]["output_tokens"] == 30 * 8
    assert report["summary"]["goodput"]["good_requests"] == 30
    # the counters the server exported moved by exactly what its responses reported
    assert report["speculation"] == report["speculation_per_request"]
    assert report["speculation"]["draft_tokens"] > 0
    assert [p["requests"] for p in report["phases"]] == [sum(r.arrival_s < 0.2 for r in records),
                                                         sum(r.arrival_s >= 0.2 for r in records)]
    rows = report["requests"]
    assert [row["output_tokens"] for row in rows] == [r.output_tokens for r in records]
    assert all(row["class"] == row["kind"] and row["status"] == 200 for row in rows)

    from simulator.replay import requests_from_rows  # the trace replays as it is

    replayed = requests_from_rows([row for row in rows if row["ok"]], class_names=["copy", "open"])
    assert len(replayed) == 30 and replayed[0].arrival_s == 0.0


def _most_in_flight(records) -> int:
    """Requests in flight at once, at most: a slot is released after ``finished_s`` is taken and
    taken again before ``sent_s`` is, so the intervals of one slot never overlap."""
    events = sorted([(r.sent_s, 1) for r in records] + [(r.finished_s, -1) for r in records], key=lambda e: (e[0], e[1]))
    return max(itertools.accumulate(delta for _, delta in events))


def test_chat_requests_stream_and_count_like_completions(served):
    result = _run(LoadConfig(url=served, endpoint="chat", num_requests=4, max_concurrency=2, max_tokens=5))
    assert [r.status for r in result.records] == [200] * 4
    assert all(r.output_tokens == r.text.count("<") == 5 for r in result.records)
    # a chat prompt is the user turn's marker, the content, then the assistant's marker
    by_id = {p.id: p for p in PROMPTS}
    assert all(r.prompt_tokens == len(by_id[r.prompt_id].prompt.split()) + 2 for r in result.records)


def test_a_closed_loop_over_a_duration_keeps_the_concurrency(served):
    result = _run(LoadConfig(url=served, rate=math.inf, max_concurrency=2, duration_s=0.5, max_tokens=4))
    assert result.records and all(r.ok for r in result.records)
    assert _most_in_flight(result.records) <= 2
    assert all(r.arrival_s < 0.5 for r in result.records)


def test_stopping_a_run_cancels_what_is_in_flight_and_keeps_every_record(served):
    async def go():
        stop = asyncio.Event()
        done = []

        def on_done(record):
            done.append(record)
            if len(done) == 3:
                stop.set()

        # 40 arrivals take ~8 s at 5/s; three requests finish long before: the rest never arrive
        config = LoadConfig(url=served, rate=5.0, max_concurrency=2, num_requests=40, max_tokens=30)
        return await run_load(config, PROMPTS, on_done=on_done, stop=stop)

    result = asyncio.run(asyncio.wait_for(go(), timeout=120))
    assert result.interrupted and 3 <= len(result.records) < 40
    assert {r.status for r in result.records} <= {200, "cancelled"}
    assert sum(r.ok for r in result.records) >= 3


def test_a_full_queue_is_counted_as_429s(tmp_path):
    with one_thread(), live_server(tiny_decoder(), Settings(max_queue=1)) as (url, _):
        result = _run(LoadConfig(url=url, rate=math.inf, num_requests=12, max_tokens=30))
    statuses = [r.status for r in result.records]
    assert set(statuses) <= {200, 429} and 429 in statuses  # 12 at once against one engine and one queue slot
    summary = summarize(result.records, result.duration_s, {})
    assert summary["errors"] == {"429": statuses.count(429)} and summary["completed"] == statuses.count(200)
    assert all("queue" in r.error for r in result.records if r.status == 429), [r.error for r in result.records]


@pytest.mark.parametrize("event", ["null", "5", '{"choices": ["x"]}', '{"choices": [{"text": 7}]}',
                                   '{"choices": [], "usage": 5}', '{"choices": [], "usage": {"completion_tokens": "2"}}',
                                   '{"choices": [], "usage": {"completion_tokens": true}}',
                                   '{"choices": [], "usage": {"completion_tokens": 2, "prompt_tokens": "3"}}',
                                   '{"choices": [], "metrics": [1]}'])
def test_an_event_not_shaped_as_openais_fails_that_request_alone(event):
    import httpx

    from adaptive_spec.loadgen.client import send

    def answer(request):
        return httpx.Response(200, text=f'data: {{"choices": [{{"text": "a"}}]}}\n\ndata: {event}\n\ndata: [DONE]\n\n',
                              headers={"content-type": "text/event-stream"})

    async def one():
        async with httpx.AsyncClient(base_url="http://127.0.0.1:1", transport=httpx.MockTransport(answer)) as client:
            return await send(client, RequestRecord(0, "p0", "copy", 0.0), "completions", {}, {}, time.perf_counter())

    record = asyncio.run(one())
    assert record.status == "stream_error" and record.error.startswith("unreadable event") and not record.ok
    if event.startswith('{"choices": ["x"]'):  # a chat chunk whose delta is not an object, likewise
        async def chat():
            def answer_chat(request):
                return httpx.Response(200, text='data: {"choices": [{"delta": "hi"}]}\n\ndata: [DONE]\n\n')
            async with httpx.AsyncClient(base_url="http://127.0.0.1:1", transport=httpx.MockTransport(answer_chat)) as c:
                return await send(c, RequestRecord(0, "p0", "copy", 0.0), "chat", {}, {}, time.perf_counter())
        assert asyncio.run(chat()).status == "stream_error"
    summary = summarize([record], 1.0, {})  # and the report is made, the request counted as an error
    assert summary["completed"] == 0 and summary["errors"] == {"stream_error": 1}


def test_a_run_over_a_duration_at_a_slow_rate_ends_at_the_duration(served):
    config = LoadConfig(url=served, rate=0.01, duration_s=1.0, max_tokens=2, seed=2)
    second = list(itertools.islice(arrival_offsets(0.01, 1.0, random.Random("2:arrivals")), 2))[1]
    assert second > 60  # the next arrival is far past the end: the run must not wait for it
    result = asyncio.run(asyncio.wait_for(run_load(config, PROMPTS), timeout=30))
    assert len(result.records) == 1 and result.records[0].ok


def test_a_model_the_server_does_not_serve_is_named(served):
    with pytest.raises(InvalidParameterError, match="not served") as info:
        _run(LoadConfig(url=served, model="gpt-4", num_requests=1))
    assert info.value.name == "model"


# --- the command --------------------------------------------------------------------------------

@pytest.fixture
def prompt_file(tmp_path):
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"id": p.id, "prompt": p.prompt, "kind": p.kind}) + "\n" for p in PROMPTS))
    return path


def test_the_command_prints_the_table_writes_the_json_and_never_imports_torch(served, prompt_file, tmp_path):
    out = tmp_path / "runs" / "loadgen.json"
    code = "import " + ", ".join(LOADGEN_MODULES) + "\n" + RUN_CLI
    report, output = run_in_fresh_interpreter(
        code, "loadgen", "--url", served, "--prompts", str(prompt_file), "--num-requests", "6", "--rate", "50",
        "--max-concurrency", "2", "--max-tokens", "4", "--goodput", "ttft:60000", "e2el:60000", "--quiet",
        "--extra-body", json.dumps(STATIC_NGRAM), "--out", str(out), tmp_path=tmp_path)
    assert report == {"code": 0, "torch": False, "transformers": False}, output
    assert "TTFT" in output and "E2EL" in output and "goodput" in output
    data = json.loads(out.read_text())
    assert data["summary"]["completed"] == 6 and len(data["requests"]) == 6
    assert data["summary"]["goodput"]["slos_ms"] == {"ttft": 60000.0, "e2el": 60000.0}
    assert data["config"]["num_requests"] == 6 and data["config"]["rate"] == 50.0


def test_a_split_sends_only_that_splits_prompts_and_is_recorded(served, tmp_path, monkeypatch):
    from adaptive_spec.cli import main

    path = tmp_path / "split.jsonl"
    path.write_text("".join(json.dumps({"id": p.id, "prompt": p.prompt, "kind": p.kind, "split": ("dev", "test")[i % 2]})
                            + "\n" for i, p in enumerate(PROMPTS)))
    out = tmp_path / "loadgen.json"
    monkeypatch.setattr(sys, "argv", ["adaptive-spec", "loadgen", "--url", served, "--prompts", str(path), "--split",
                                      "test", "--num-requests", "8", "--max-tokens", "2", "--quiet", "--out", str(out)])
    try:
        main()
    except SystemExit as exc:
        assert exc.code in (0, None)
    data = json.loads(out.read_text())
    assert data["split"] == "test" and data["summary"]["completed"] == 8
    assert {r["id"] for r in data["requests"]} == {"copy-1", "open-1"}  # the test split's, both drawn in 8


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens there once closed


@pytest.mark.parametrize("args, name", [
    (["--rate", "0"], "rate"),
    (["--burstiness", "-1"], "burstiness"),
    (["--schedule", "copy:10,chat:10"], "schedule"),
    (["--schedule", "copy"], "schedule"),
    (["--goodput", "ttft:soon"], "goodput"),
    (["--extra-body", "[1]"], "extra_body"),
    (["--prompts", "missing.jsonl"], "prompts"),
    (["--split", "test"], "split"),  # the file's prompts have no split: none would be sent
    (["ttft:500"], "argument"),
    (["--out", "{tmp}"], "out"),  # a folder
    (["--out", "{tmp}/prompts.jsonl/x.json"], "out"),  # under a file
    ([], "url"),  # nothing listens: checked last, so every other error above came before any request
])
def test_bad_input_is_one_line_naming_the_parameter(args, name, prompt_file, tmp_path, capsys, monkeypatch):
    from adaptive_spec.cli import main

    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    argv = ["adaptive-spec", "loadgen", "--url", f"http://127.0.0.1:{_free_port()}", "--num-requests", "2",
            *(["--prompts", str(prompt_file)] if "--prompts" not in args else []), *args]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as exit_info:
        main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err.startswith(f"error: invalid {name}=") and err.count("\n") == 1 and "Traceback" not in err, err


def test_progress_is_a_line_now_and_then_when_stderr_is_not_a_terminal():
    import io

    from rich.console import Console

    from adaptive_spec.loadgen.cli import _Progress

    stream = io.StringIO()  # a log: rich's bar would only show once the run ends
    progress = _Progress(Console(file=stream), LoadConfig(num_requests=3), quiet=False)
    progress.interval_s = 0.0  # every finished request a line
    with progress:
        progress.start("[/m]")
        progress.done(_record(0, 0.1, 0.2, 4))
        progress.done(_record(1, 0.1, 0.2, 4, status=500))
    lines = stream.getvalue().splitlines()
    assert [line.split(",")[:2] for line in lines] == [["loadgen [/m]: 1/3 requests finished", " 0 failed"],
                                                       ["loadgen [/m]: 2/3 requests finished", " 1 failed"]]
