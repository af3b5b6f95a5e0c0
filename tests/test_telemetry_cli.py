"""``--telemetry`` specs, ``telemetry summary`` and ``alerts`` on a store written by a real decoder."""

import json

import pytest
from typer.testing import CliRunner

from adaptive_spec import InvalidParameterError, SpeculativeDecoder
from adaptive_spec.drafters import NgramDrafter
from adaptive_spec.telemetry import build_observers, parse_spec
from adaptive_spec.telemetry.cli import alerts_command, telemetry_app
from adaptive_spec.telemetry.recorder import StoreRecorder
from adaptive_spec.telemetry.spec import OtlpSpec, PrometheusSpec, SqliteSpec
from adaptive_spec.telemetry.summary import summarize
from policies import StaticPolicy
from tiny import loaded, tiny_llama

PROMPT = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]


@pytest.mark.parametrize("spec, reason", [
    ("", "empty spec"), ("sqlit:/x", "unknown exporter"), ("prometheus:http", "needs a port"),
    ("prometheus:70000", "port must be"), ("off,sqlite", "cannot be combined"), ("otlp,otlp", "appears twice"),
    ("sqlite:/tmp/x.db?retention=3", "unknown sqlite option"), ("otlp:grpc", "unknown exporter"),
])
def test_bad_specs_name_the_parameter_and_value(spec, reason):
    with pytest.raises(InvalidParameterError) as err:
        parse_spec(spec)
    assert err.value.name == "telemetry" and repr(spec) in str(err.value) and reason in str(err.value)


def test_spec_forms(tmp_path, monkeypatch):
    monkeypatch.setenv("ADAPTIVE_SPEC_TELEMETRY_DB", str(tmp_path / "default.sqlite"))
    assert parse_spec("off") == [] and build_observers("off") == []
    (default,) = parse_spec("sqlite")
    assert isinstance(default, SqliteSpec) and default.path == tmp_path / "default.sqlite"
    parts = parse_spec(f"sqlite:{tmp_path}/t.db?steps=1&interval_s=0.5,prometheus:127.0.0.1:9464,otlp")
    assert [type(p) for p in parts] == [SqliteSpec, PrometheusSpec, OtlpSpec]
    assert parts[0].options == {"steps": "1", "interval_s": "0.5"} and (parts[1].host, parts[1].port) == ("127.0.0.1", 9464)
    (recorder,) = build_observers(f"sqlite:{tmp_path}/t.db?steps=1&interval_s=0.5&max_rows=10")
    assert recorder.config.step_rows and recorder.config.interval_s == 0.5
    assert recorder.writer.config.retention.max_rows == 10 and len(recorder.writer.jobs) == 1  # the alert evaluator
    recorder.close()
    with pytest.raises(InvalidParameterError, match="interval_s"):
        build_observers(f"sqlite:{tmp_path}/t.db?interval_s=-1")


@pytest.mark.parametrize("option", ["max_rows=inf", "queue_size=inf", "interval_s=inf", "max_age_days=inf",
                                    "alerts_every_s=inf", "max_rows=1.5", "queue_size=2.5"])
def test_sqlite_options_out_of_range_are_one_error_naming_the_option(tmp_path, option):
    # inf used to reach int() (OverflowError) or the aggregator (a bare ValueError); 1.5 rows became 1
    spec = f"sqlite:{tmp_path}/t.db?{option}"
    with pytest.raises(InvalidParameterError) as err:
        build_observers(spec)
    name, _, value = option.partition("=")
    assert err.value.name == "telemetry" and f"{name}={value!r}" in str(err.value)


def test_otlp_without_its_exporter_is_a_clear_error_or_an_observer():
    try:
        import opentelemetry.exporter.otlp  # noqa: F401
    except ImportError:
        with pytest.raises(InvalidParameterError, match="opentelemetry-exporter-otlp"):
            build_observers("otlp")
    else:
        (observer,) = build_observers("otlp")
        observer.close()


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "t.sqlite"
    recorder = StoreRecorder(path)
    decoder = SpeculativeDecoder(loaded(tiny_llama(0)), [NgramDrafter()], StaticPolicy("ngram", 4), observers=[recorder])
    for _ in range(3):
        decoder.generate(PROMPT, max_new_tokens=16)
    decoder.generate(PROMPT, max_new_tokens=16, policy=StaticPolicy("none", 0))
    recorder.close()
    return path


def test_summary_derives_rates_from_counters(store_path):
    runner = CliRunner()
    out = runner.invoke(telemetry_app, ["summary", "--db", str(store_path), "--window", "1h", "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["drafter"]: r for r in json.loads(out.output)}
    assert set(rows) == {"ngram", "none"} and (rows["ngram"]["requests"], rows["none"]["requests"]) == (3, 1)
    ngram, plain = rows["ngram"], rows["none"]
    assert ngram["acceptance_rate"] == pytest.approx(ngram["accepted_tokens"] / ngram["draft_tokens"])
    assert ngram["mean_acceptance_length"] == pytest.approx(1 + ngram["accepted_tokens"] / ngram["drafts"])
    assert plain["acceptance_rate"] is None and plain["drafts"] == 0  # no drafts: no rate, not 0
    assert ngram["ttft_p50"] > 0 and ngram["tpot_p99"] >= ngram["tpot_p50"] > 0
    table = runner.invoke(telemetry_app, ["summary", "--db", str(store_path)])
    assert table.exit_code == 0 and "ngram" in table.output


def test_summary_of_literal_rows():
    interval = dict(model="m", drafter="d", steps=4, drafts=4, draft_tokens=16, accepted_tokens=8, emitted_tokens=12,
                    draft_s=0.1, verify_s=0.5)
    request = dict(model="m", main_drafter="d", error=None, ttft_s=0.1, decode_s=0.9, tpot_s=0.09, new_tokens=11)
    (row,) = summarize([interval, interval], [request])
    assert (row.acceptance_rate, row.mean_acceptance_length) == (0.5, 3.0)  # 16/32; 1 + 16/8
    assert row.decode_tokens_per_s == pytest.approx(24 / 1.2) and row.tokens_per_s == pytest.approx(11.0)


def test_alerts_command_lists_nothing_on_a_healthy_store_and_rejects_bad_input(store_path, tmp_path):
    import typer

    app = typer.Typer()
    app.command()(alerts_command)
    runner = CliRunner()
    out = runner.invoke(app, ["--db", str(store_path), "--json"])
    assert out.exit_code == 0 and json.loads(out.output) == []
    missing = runner.invoke(app, ["--db", str(tmp_path / "none.sqlite")])
    assert isinstance(missing.exception, InvalidParameterError) and missing.exception.name == "db"
    bad = runner.invoke(app, ["--db", str(store_path), "--window", "soon"])
    assert isinstance(bad.exception, InvalidParameterError) and bad.exception.name == "window"


def test_prometheus_spec_serves_metrics_over_http():
    import socket
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (observer,) = build_observers(f"prometheus:127.0.0.1:{port}")
    # the process shares one Prometheus registry (other tests count their own models in it): a model name of its own
    model = "tiny-prometheus-http"
    decoder = SpeculativeDecoder(loaded(tiny_llama(0), name=model), [NgramDrafter()], StaticPolicy("ngram", 4),
                                 observers=[observer])
    result = decoder.generate(PROMPT, max_new_tokens=16)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    line = next(x for x in body.splitlines()
                if x.startswith("adaptive_spec_spec_decode_draft_tokens_total{") and f'"{model}"' in x)
    assert float(line.rsplit(" ", 1)[1]) == result.stats.draft_tokens
    assert "gen_ai_server_time_to_first_token_seconds_count" in body
