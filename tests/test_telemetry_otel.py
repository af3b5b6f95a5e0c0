"""OpenTelemetry: the span's GenAI attributes and events, the metrics' values, and the Prometheus
names the alert rules in deploy/prometheus/alerts.yml rely on."""

import re
from pathlib import Path

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry, generate_latest

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.batching import BatchedDecoder
from adaptive_spec.drafters import NgramDrafter
from adaptive_spec.telemetry.otel import OTelObserver
from policies import StaticPolicy
from policies.change import AcceptanceCollapse
from tiny import loaded, tiny_llama

PROMPT = [3, 4, 5, 6, 3, 4, 5, 6, 3, 4]
RULES = Path(__file__).parent.parent / "deploy" / "prometheus" / "alerts.yml"


class CollapsingPolicy(StaticPolicy):
    """Static ngram k=4 that raises one AcceptanceCollapse event at its 3rd step."""

    def __init__(self):
        super().__init__("ngram", 4)
        self.steps, self.events = 0, []

    def observe(self, outcome):
        self.steps += 1
        if self.steps == 3:
            self.events.append(AcceptanceCollapse(3, outcome.timestamp, "ngram", "", 0.9, 0.1, 2))

    def drain_events(self):
        events, self.events = self.events, []
        return events


@pytest.fixture
def otel():
    spans, reader = InMemorySpanExporter(), InMemoryMetricReader()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    return OTelObserver(MeterProvider(metric_readers=[reader]), tracer_provider), spans, reader


def metric_points(reader):
    out = {}
    for rm in reader.get_metrics_data().resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = [(dict(p.attributes), p) for p in m.data.data_points]
    return out


def test_span_follows_genai_conventions_with_speculation_attributes_and_events(otel):
    observer, spans, _ = otel
    decoder = SpeculativeDecoder(loaded(tiny_llama(0)), [NgramDrafter()], CollapsingPolicy(), observers=[observer])
    result = decoder.generate(PROMPT, max_new_tokens=20, key="copy")
    (span,) = spans.get_finished_spans()
    a, s = span.attributes, result.stats
    assert span.name == "text_completion tiny"
    assert (a["gen_ai.operation.name"], a["gen_ai.request.model"], a["gen_ai.request.max_tokens"]) == ("text_completion", "tiny", 20)
    assert a["gen_ai.request.temperature"] == 0.0 and a["gen_ai.usage.input_tokens"] == len(PROMPT)
    assert a["gen_ai.usage.output_tokens"] == 20 and tuple(a["gen_ai.response.finish_reasons"]) == ("length",)
    assert tuple(a["adaptive_spec.speculation.drafters"]) == ("ngram",)
    assert (a["adaptive_spec.speculation.steps"], a["adaptive_spec.speculation.draft_tokens"],
            a["adaptive_spec.speculation.accepted_tokens"]) == (s.steps, s.draft_tokens, s.accepted_tokens)
    names = [e.name for e in span.events]
    assert "adaptive_spec.acceptance.collapse" in names and "adaptive_spec.drafter.switch" in names
    collapse = next(e for e in span.events if e.name == "adaptive_spec.acceptance.collapse")
    assert collapse.attributes["adaptive_spec.acceptance_after"] == 0.1


def test_failed_generation_ends_its_span_with_an_error(otel):
    observer, spans, _ = otel
    decoder = SpeculativeDecoder(loaded(tiny_llama(0)), [NgramDrafter()], StaticPolicy("medusa", 2), observers=[observer])
    with pytest.raises(ValueError):
        decoder.generate(PROMPT, max_new_tokens=5)
    (span,) = spans.get_finished_spans()
    assert span.status.status_code.name == "ERROR" and span.attributes["error.type"] == "InvalidParameterError"


def test_metrics_count_what_the_generation_did(otel):
    observer, _, reader = otel
    decoder = SpeculativeDecoder(loaded(tiny_llama(0)), [NgramDrafter()], StaticPolicy("ngram", 4), observers=[observer])
    results = [decoder.generate(PROMPT, max_new_tokens=24) for _ in range(2)]
    m = metric_points(reader)
    by_drafter = lambda name: sum(p.value for attrs, p in m[name] if attrs["adaptive_spec.drafter"] == "ngram")  # noqa: E731
    assert by_drafter("adaptive_spec.spec_decode.draft_tokens") == sum(r.stats.draft_tokens for r in results)
    assert by_drafter("adaptive_spec.spec_decode.accepted_tokens") == sum(r.stats.accepted_tokens for r in results)
    assert by_drafter("adaptive_spec.spec_decode.drafts") == sum(r.stats.drafts for r in results)
    per_pos = {a["adaptive_spec.position"]: p.value for a, p in m["adaptive_spec.spec_decode.accepted_tokens_per_pos"]}
    assert sum(per_pos.values()) == sum(r.stats.accepted_tokens for r in results)
    assert by_drafter("adaptive_spec.decode.output_tokens") == sum(r.stats.new_tokens - 1 for r in results)  # first from prefill
    (ttft_attrs, ttft), = m["gen_ai.server.time_to_first_token"]
    assert ttft.count == 2 and ttft.sum == pytest.approx(sum(r.stats.prefill_s for r in results))
    usage = {a["gen_ai.token.type"]: p.sum for a, p in m["gen_ai.client.token.usage"]}
    assert usage == {"input": 2 * len(PROMPT), "output": 48}
    (_, enabled), = m["adaptive_spec.speculation.enabled"]
    (_, k), = m["adaptive_spec.speculation.k"]
    assert (enabled.value, k.value) == (1, 4)


def test_prometheus_export_serves_every_series_the_alert_rules_use():
    registry = CollectorRegistry()
    observer = OTelObserver(MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)]))
    plain = SpeculativeDecoder(loaded(tiny_llama(0)), [NgramDrafter()], StaticPolicy("none", 0), observers=[observer])
    plain.generate(PROMPT, max_new_tokens=12)
    plain.generate(PROMPT, max_new_tokens=12, policy=StaticPolicy("ngram", 4))
    batched = BatchedDecoder(plain, max_batch=2)  # the batch's series come from batched forwards
    for policy in (StaticPolicy("ngram", 4), StaticPolicy("none", 0)):
        batched.submit(PROMPT, policy=policy, max_new_tokens=8)
    batched.run()
    observer.flush_counters()
    exported = generate_latest(registry).decode()
    used = set(re.findall(r"\b(adaptive_spec_[a-z_]+|gen_ai_[a-z_]+)", RULES.read_text()))
    labels = ("adaptive_spec_drafter", "adaptive_spec_traffic_key", "adaptive_spec_batch_rows", "gen_ai_request_model")
    used = {name for name in used if not name.startswith(labels)}
    assert used, "no metric names found in the rules file"
    missing = [name for name in sorted(used) if not re.search(rf"^{name}[{{ ]", exported, re.M)]
    assert missing == []
    assert 'adaptive_spec_drafter="none"' in exported and 'adaptive_spec_drafter="ngram"' in exported
