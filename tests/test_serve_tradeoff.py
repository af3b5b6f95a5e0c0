"""benchmarks/serve_tradeoff.py: its arguments, its labels and its plot (the served runs themselves
are the benchmark's; ``test_results_md`` checks the page rendered from them)."""

import argparse
import doctest
import json
from pathlib import Path

import pytest

from benchmarks import serve_batching, serve_tradeoff


def test_labels_name_each_bound():
    result = doctest.testmod(serve_tradeoff)
    assert result.failed == 0 and result.attempted > 0  # a module whose examples vanished passes no test
    assert serve_tradeoff.label(0.0) == "adaptive@0"


@pytest.mark.parametrize("bounds, said", [("0,-1", "plain_slowdown"), ("fast", "plain_slowdown"),
                                          ("0.05,0.05", "each once"), (",", "at least one"),
                                          ("latency:off", "batch_objective"), ("off,goodput:off", "each once")])
def test_a_bad_bound_is_refused_before_any_server_starts(tmp_path, capsys, bounds, said):
    with pytest.raises(SystemExit) as exc:
        serve_tradeoff.main(["--bounds", bounds, "--out", str(tmp_path / "out.json")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"bounds={bounds!r}" in err and said in err
    assert not (tmp_path / "out.json").exists()


def test_the_plot_puts_each_config_at_its_median_p95_and_throughput(tmp_path):
    def run(config, round_, tok_s, p95):
        return {"config": config, "concurrency": 4, "round": round_, "output_tokens_per_s": tok_s,
                "e2el_s": {"p50": 1.0, "p95": p95}, "speculative_step_share": 0.1}

    runs = [run(c, r, 30 + 5 * i + r, 5 + i / 2) for i, c in enumerate(["plain", "static:ngram:8", "adaptive@0",
                                                                      "adaptive@off"]) for r in range(3)]
    path = tmp_path / "tradeoff.png"
    serve_tradeoff.plot(runs, ["plain", "static:ngram:8", "adaptive@0", "adaptive@off"], path)
    assert path.stat().st_size > 10_000 and path.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("rate", ["0", "-1", "inf", "nan"])
def test_a_rate_that_is_not_a_positive_number_is_refused_before_any_server_starts(tmp_path, capsys, rate):
    with pytest.raises(SystemExit) as exc:
        serve_tradeoff.main(["--rate", rate, "--out", str(tmp_path / "out.json")])
    assert exc.value.code == 2
    assert "rate=" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()


def test_loadgen_is_sent_the_rate_or_a_closed_loop(monkeypatch, tmp_path):
    """The rate reaches the client; without one the client sends as fast as the concurrency allows."""
    sent = []

    def fake_run(command, check, cwd):
        sent.append(command[command.index("--rate") + 1])
        Path(command[command.index("--out") + 1]).write_text(json.dumps({"summary": {}}))

    monkeypatch.setattr(serve_batching.subprocess, "run", fake_run)
    args = argparse.Namespace(prompts="p.jsonl", requests=4, max_tokens=8, seed=0, rate=0.5)
    serve_batching.loadgen("http://127.0.0.1:1", args, "plain", 8, tmp_path / "a.json")
    serve_batching.loadgen("http://127.0.0.1:1", argparse.Namespace(**{**vars(args), "rate": None}), "plain", 8,
                           tmp_path / "b.json")
    assert sent == ["0.5", "inf"]


def test_a_split_with_no_prompts_is_refused_before_any_server_starts(tmp_path, capsys, monkeypatch):
    started = []
    monkeypatch.setattr(serve_tradeoff, "start_server", lambda *a, **k: started.append(a))
    with pytest.raises(SystemExit) as exc:
        serve_tradeoff.main(["--prompts", "benchmarks/corpus/corpus.jsonl", "--split", "dve",
                             "--out", str(tmp_path / "out.json")])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "split='dve'" in err and "dev, test" in err
    assert not started and not (tmp_path / "out.json").exists()


def test_the_split_reaches_loadgen(monkeypatch, tmp_path):
    """The dev prompts a bound is chosen on, not the whole corpus."""
    sent = []

    def fake_run(command, check, cwd):
        sent.append(command[command.index("--split") + 1] if "--split" in command else None)
        Path(command[command.index("--out") + 1]).write_text(json.dumps({"summary": {}}))

    monkeypatch.setattr(serve_batching.subprocess, "run", fake_run)
    args = argparse.Namespace(prompts="p.jsonl", requests=4, max_tokens=8, seed=0, rate=None, split="dev")
    serve_batching.loadgen("http://127.0.0.1:1", args, "plain", 4, tmp_path / "a.json")
    serve_batching.loadgen("http://127.0.0.1:1", argparse.Namespace(**{**vars(args), "split": None}), "plain", 4,
                           tmp_path / "b.json")
    assert sent == ["dev", None]


def test_the_server_default_round_trips_through_its_flag():
    """The benchmarks pass the cap's default to the server as a flag: 'off' for none."""
    from adaptive_spec.server.cli import format_plain_slowdown, parse_plain_slowdown

    for value in (None, 0.0, 0.05, 0.3):
        assert parse_plain_slowdown(format_plain_slowdown(value)) == value


def test_the_default_bound_is_the_one_whose_worst_ratio_is_largest():
    def compared(bound, tok_s, p95):
        return {"reference": serve_tradeoff.label(bound), "config": "static:ngram:8",
                "throughput": {"median": tok_s}, "e2el_p95": {"median": p95}}

    c4 = {"bounds": [0.05, 0.15, None], "comparisons": [compared(0.05, 0.95, 1.01), compared(0.15, 1.00, 1.00),
                                                        compared(None, 1.09, 1.06)]}
    c8 = {"bounds": [0.05, 0.15, None], "comparisons": [compared(0.05, 1.03, 1.15), compared(0.15, 1.10, 1.11),
                                                        compared(None, 1.07, 0.99)]}
    choice = serve_tradeoff.choose_bound([c4, c8], 0.05)
    assert choice["worst"] == {"adaptive@0.05": 0.95, "adaptive@0.15": 1.00, "adaptive@off": 0.99}
    assert choice["best"] == 0.15 and choice["chosen"] == 0.15
    # the default within the margin of the best stays
    assert serve_tradeoff.choose_bound([c4, c8], 0.05, margin=0.06)["chosen"] == 0.05
    with pytest.raises(ValueError, match="static:ngram:8"):
        serve_tradeoff.choose_bound([{"bounds": [0.05], "comparisons": []}], 0.05)


def test_each_rule_chooses_from_its_own_dev_runs_and_the_bound_again_weighs_plain_decoding(tmp_path):
    """The third rule's files (``serve_bound_dev_*``) are its own: the bound is chosen from them
    against drafting always and plain decoding, not mixed into the first rule's section."""
    from benchmarks import tradeoff_sections

    def compared(bound, against, tok_s, p95):
        ratio = lambda m: {"median": m, "low": m - 0.02, "high": m + 0.02,
                           "verdict": "ahead in every round" if m - 0.02 > 1 else "no consistent difference"}
        return {"reference": serve_tradeoff.label(bound), "config": against,
                "throughput": ratio(tok_s), "e2el_p95": ratio(p95)}

    def run(concurrency, ratios):
        return {"concurrency": concurrency, "split": "dev", "bounds": [0.05, 0.15],
                "comparisons": [compared(b, against, t, p) for (b, against), (t, p) in ratios.items()]}

    # 0.15 is level with drafting always at 4 requests and trails plain decoding's p95 at 8 by less
    # than 0.05 trails drafting always's throughput at 4: its worst is the larger
    c4 = run(4, {(0.05, "static:ngram:8"): (0.94, 1.02), (0.05, "plain"): (1.20, 1.03),
                 (0.15, "static:ngram:8"): (1.01, 1.00), (0.15, "plain"): (1.25, 1.01)})
    c8 = run(8, {(0.05, "static:ngram:8"): (1.05, 1.30), (0.05, "plain"): (1.10, 1.08),
                 (0.15, "static:ngram:8"): (1.08, 1.25), (0.15, "plain"): (1.12, 0.98)})
    def chosen(text):  # the rule's choice, whichever the server's default is
        for variant in ("adaptive@0.05", "adaptive@0.15"):
            if f"`{variant}`, is that choice" in text or f"default would be `{variant}`" in text:
                return variant

    for name, data in (("serve_bound_dev_c4.json", c4), ("serve_bound_dev_c8.json", c8)):
        (tmp_path / name).write_text(json.dumps(data))
    sections = tradeoff_sections._choices(tmp_path, ["serve_bound_dev_c4.json", "serve_bound_dev_c8.json"])
    assert len(sections) == 1 and sections[0].startswith("### Choosing the bound again")
    assert "the largest worst case is `adaptive@0.15`'s, 0.98×" in sections[0]
    assert "|  | `static:ngram:8` | 0.94× [0.92, 0.96] | 1.02× [1.00, 1.04] |" in sections[0]
    assert chosen(sections[0]) == "adaptive@0.15"
    # near a tie the default when the rule was fixed stays
    c4["comparisons"][0]["throughput"]["median"] = 0.97
    (tmp_path / "serve_bound_dev_c4.json").write_text(json.dumps(c4))
    again = tradeoff_sections._choices(tmp_path, ["serve_bound_dev_c4.json", "serve_bound_dev_c8.json"])[0]
    assert "the largest worst case is `adaptive@0.15`'s, 0.98×" in again
    assert chosen(again) == "adaptive@0.05"
