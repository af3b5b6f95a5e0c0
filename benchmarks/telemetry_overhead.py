"""Per-step cost of the telemetry observers, without a model: the hooks alone, timed.

    python benchmarks/telemetry_overhead.py [--steps 20000] [--out telemetry_overhead.json]

A decode step of SmolLM2 on the 2-core CPUs lasts ~30-100 ms, so the 2% budget of the issue is
0.6-2 ms per step; this prints what each observer spends per ``on_step`` (and per request) in
microseconds, so the margin can be read off directly.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

from adaptive_spec.config import GenerationConfig
from adaptive_spec.observers import RequestInfo
from adaptive_spec.outputs import output_path, write_json_atomic
from policies.outcome import StepOutcome


def outcomes(n: int, seed: int = 0) -> list[StepOutcome]:
    rng = random.Random(seed)
    now = time.time()
    out = []
    for i in range(n):
        k = 4
        accepted = min(k, int(rng.expovariate(0.5)))
        out.append(StepOutcome("ngram", k, k, accepted, accepted + 1, 1e-4, 0.03, context_len=100 + i, key="",
                               timestamp=now + i * 0.03))
    return out


def time_observer(observer, steps: list[StepOutcome], steps_per_request: int = 64) -> dict:
    cfg = GenerationConfig(max_new_tokens=10_000)
    result = SimpleNamespace(finish_reason="length", stats=SimpleNamespace(
        prompt_tokens=10, new_tokens=100, steps=64, drafts=64, draft_tokens=256, accepted_tokens=100, prefill_s=0.01,
        decode_s=1.0))
    step_s = request_s = 0.0
    for start in range(0, len(steps), steps_per_request):
        request = RequestInfo(model="m", key="", config=cfg, prompt_tokens=10, policy="static")
        t0 = time.perf_counter()
        observer.on_request_start(request)
        t1 = time.perf_counter()
        for outcome in steps[start:start + steps_per_request]:
            observer.on_step(request, outcome, [])
        t2 = time.perf_counter()
        observer.on_request_end(request, result, None)
        t3 = time.perf_counter()
        step_s += t2 - t1
        request_s += (t1 - t0) + (t3 - t2)
    requests = -(-len(steps) // steps_per_request)
    return {"us_per_step": step_s / len(steps) * 1e6, "us_per_request": request_s / requests * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--out", type=output_path, default="telemetry_overhead.json")
    args = parser.parse_args()
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider

    from adaptive_spec.telemetry.otel import OTelObserver
    from adaptive_spec.telemetry.recorder import RecorderConfig, StoreRecorder

    steps = outcomes(args.steps)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in [
            ("sqlite (1 s intervals)", lambda: StoreRecorder(Path(tmp) / "a.sqlite")),
            ("sqlite + step rows", lambda: StoreRecorder(Path(tmp) / "b.sqlite", RecorderConfig(step_rows=True))),
            ("otel (metrics + span)", lambda: OTelObserver(MeterProvider(metric_readers=[InMemoryMetricReader()]),
                                                           TracerProvider())),
        ]:
            observer = make()
            time_observer(observer, steps[:1000])  # warm-up
            rows[name] = time_observer(observer, steps)
            if hasattr(observer, "writer"):
                observer.flush(30)
                rows[name]["dropped"] = observer.writer.stats.dropped_full + observer.writer.stats.dropped_errors
            observer.close()
    print(f"{'observer':26} {'us/step':>9} {'us/request':>11}")
    for name, r in rows.items():
        print(f"{name:26} {r['us_per_step']:9.1f} {r['us_per_request']:11.1f}")
    write_json_atomic(args.out, rows, "out")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
