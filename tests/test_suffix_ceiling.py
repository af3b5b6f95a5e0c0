"""The hindsight ceiling: its search is exact, and it is what no controller can beat."""

from __future__ import annotations

import itertools
import random

import pytest

from benchmarks.suffix_ceiling import SETS, Step, accepted, ceilings, cheapest, position_steps


def brute_force(options):
    """Every sequence of choices, tried one by one."""
    best = float("inf")

    def walk(i, spent):
        nonlocal best
        if i == len(options):
            best = min(best, spent)
            return
        for s in options[i]:
            walk(i + s.emitted, spent + s.seconds)

    walk(0, 0.0)
    return best


@pytest.mark.parametrize("seed", range(30))
def test_cheapest_equals_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 9)
    options = []
    for i in range(n):
        steps = [Step(0, 1, rng.uniform(0.5, 1.5))]
        for _ in range(rng.randint(0, 3)):
            steps.append(Step(rng.randint(1, 8), rng.randint(1, n - i), rng.uniform(0.5, 3.0)))
        options.append(steps)
    seconds, path = cheapest(options)
    assert seconds == pytest.approx(brute_force(options))
    # the path is the one priced: the cheapest step between consecutive starts adds up to the total
    ends = path[1:] + [n]
    spent = sum(min(s.seconds for s in options[a] if s.emitted == b - a) for a, b in zip(path, ends))
    assert path[0] == 0 and spent == pytest.approx(seconds)


def test_cheapest_refuses_a_step_past_the_end():
    with pytest.raises(ValueError, match=r"options\[1\]\[0\] emits 2 tokens with 1 left"):
        cheapest([[Step(0, 1, 1.0)], [Step(3, 2, 1.0)]])


def test_position_steps_count_what_verification_keeps():
    output = [1, 2, 3, 4, 5]
    price = lambda drafter, k: 1.0 + 0.1 * k  # noqa: E731
    steps = position_steps(output, 1, {"a": [2, 3, 9, 9]}, ["a"], price)
    # plain emits one; a draft cut to k keeps its matching prefix and the target's own next token
    assert [(s.k, s.emitted) for s in steps] == [(0, 1), (1, 2), (2, 3), (3, 3), (4, 3)]
    assert [s.seconds for s in steps] == pytest.approx([1.0, 1.1, 1.2, 1.3, 1.4])
    # near the end a fully accepted draft emits only what is left
    end = position_steps(output, 3, {"a": [4, 5]}, ["a"], price)
    assert [(s.k, s.emitted) for s in end] == [(0, 1), (1, 2), (2, 2)]
    assert accepted([], [1]) == 0


class WidthCost:
    """A forward costs more the more tokens it verifies, with a step up past four (as on this CPU)."""

    def verify_s(self, tokens, context_len):
        return 1.0 + 0.05 * tokens + (0.5 if tokens > 4 else 0.0) + 1e-4 * context_len

    def draft_s(self, drafter, k):
        return 0.3 * k  # a model drafter pays per token

    def prefill_s(self, prompt_tokens):
        return 0.01 * prompt_tokens


def fake_requests(seed, n_requests=3, length=20, max_k=8):
    """Outputs over a small vocabulary, with drafts that are right for a random stretch, then wrong."""
    rng = random.Random(seed)
    requests = []
    for r in range(n_requests):
        output = [rng.randrange(5) for _ in range(length)]
        drafts = []
        for i in range(length):
            per = {}
            for name in ("ngram", "int8", "suffix"):
                good = rng.randint(0, max_k)
                truth = output[i:i + good]
                per[name] = truth + [9] * rng.randint(0, max_k - len(truth))
            drafts.append(per)
        requests.append({"id": f"r{r}", "prompt_tokens": 10, "output": output, "drafts": drafts,
                         "lookup_s": {"ngram": [0.01], "suffix": [0.02]}})
    return requests


def static_seconds(request, cost, drafter, k, lookup_s):
    """A fixed policy: draft ``k`` with one drafter at every step."""
    output, i, spent = request["output"], 1, cost.prefill_s(request["prompt_tokens"])  # the prefill emits output[0]
    while i < len(output):
        draft = request["drafts"][i][drafter][:k]
        spent += (lookup_s if drafter != "int8" else cost.draft_s(drafter, len(draft))) + cost.verify_s(len(draft) + 1, request["prompt_tokens"] + i)
        i += min(accepted(draft, output[i:]) + 1, len(output) - i)
    return spent


@pytest.mark.parametrize("seed", range(5))
def test_no_fixed_policy_beats_the_ceiling_and_more_drafters_never_raise_it(seed):
    cost, requests = WidthCost(), fake_requests(seed)
    result = ceilings(requests, cost)
    t = result["total_s"]
    assert t["adaptive-suffix"] <= min(t["adaptive"], t["ngram+suffix"]) + 1e-9
    assert max(t["adaptive"], t["ngram+suffix"]) <= t["ngram"] + 1e-9 <= t["plain"] + 1e-9
    for name, drafters in SETS.items():
        for drafter, k in itertools.product(drafters, range(1, 9)):
            lookup = result["lookup_s"].get(drafter, 0.0)
            fixed = sum(static_seconds(r, cost, drafter, k, lookup) for r in requests)
            assert t[name] <= fixed + 1e-9, (name, drafter, k)
    # drafts here are right often enough that speculation pays: the ceiling is well under plain
    assert t["adaptive-suffix"] < 0.8 * t["plain"]


def test_a_drafter_that_is_always_right_reaches_the_cheapest_possible_steps():
    cost = WidthCost()
    output = list(range(12))
    drafts = [{"ngram": [], "int8": [], "suffix": output[i:i + 3]} for i in range(12)]
    request = {"id": "r", "prompt_tokens": 0, "output": output, "drafts": drafts,
               "lookup_s": {"ngram": [0.0], "suffix": [0.0]}}
    result = ceilings([request], cost)
    row = result["requests"][0]
    # the prefill emits the first token; then three drafted + the target's own: four tokens a step at
    # width four, and the last three tokens at width three
    assert row["ngram+suffix"]["steps"] == 3
    assert row["ngram+suffix"]["seconds"] == pytest.approx(2 * cost.verify_s(4, 0) + cost.verify_s(3, 0), abs=0.01)
    assert row["ngram"]["steps"] == 11  # nothing to draft: plain, one step per token after the first
    assert row["plain_s"] == pytest.approx(11 * cost.verify_s(1, 0), abs=0.01)


def test_collect_runs_every_drafter_at_every_position_of_the_plain_output():
    from adaptive_spec.decoder import SpeculativeDecoder
    from adaptive_spec.prompts import Prompt
    from benchmarks.suffix_ceiling import collect, first_token_right
    from policies.lookup import lookup
    from tests.tiny import ON_CPU, loaded, one_thread, tiny_llama

    if not ON_CPU:
        pytest.skip("the int8 drafter runs on CPU only")
    target = loaded(tiny_llama(seed=3, dtype=__import__("torch").float32))
    rows = [Prompt(id=f"p{i}", prompt="<5> <9> <2> <5> <9> <7> <1>") for i in range(2)]
    with one_thread():
        requests = collect(target, rows, max_new_tokens=24, max_k=6, progress=lambda line: None)
        plain = SpeculativeDecoder(target).generate(SpeculativeDecoder(target).encode_prompt(rows[0].prompt),
                                                    max_new_tokens=24).token_ids
    prompt = [5, 9, 2, 5, 9, 7, 1]
    for r in requests:
        assert r["output"] == plain and r["prompt_tokens"] == len(prompt)
        assert len(r["drafts"]) == len(plain)
        for i, drafts in enumerate(r["drafts"]):
            assert drafts["ngram"] == lookup(prompt + plain[:i], 6)[0]
            assert all(len(d) <= 6 for d in drafts.values())
            assert len(drafts["int8"]) == 6  # a model drafter always proposes max_k
        assert len(r["lookup_s"]["ngram"]) == len(r["lookup_s"]["suffix"]) == len(plain)
    # the second request drafts from the first one's answer: its suffix drafts are right more often
    first, second = (first_token_right([r])["suffix"] for r in requests)
    assert second > first


def test_measured_speedups_are_plain_over_config_per_round_then_the_median():
    from benchmarks.suffix_ceiling import measured_speedups

    bench = {"per_round": {"prompt_ids": ["a", "b"], "configs": {
        "plain": {"seconds": [[2.0, 2.0, 2.0], [3.0, 3.0, 3.0]]},
        "adaptive": {"seconds": [[1.0, 2.0, 0.5], [3.0, 1.5, 3.0]]}}}}
    assert measured_speedups(bench, ["b", "a"], ["adaptive"]) == {"adaptive": [1.0, 2.0]}
    with pytest.raises(ValueError, match="no prompt 'c'"):
        measured_speedups(bench, ["c"], ["adaptive"])


def test_the_command_prices_stored_proposals_again_and_plots_them(tmp_path, capsys):
    from benchmarks.suffix_ceiling import main

    saved = {"prompts_file": "p.jsonl", "split": "test", "max_new_tokens": 20, "max_k": 8,
             "machine": {"cpus": 2}, "collected": fake_requests(0, n_requests=2)}
    stored = tmp_path / "ceiling.json"
    stored.write_text(__import__("json").dumps(saved))
    ids = [r["id"] for r in saved["collected"]]
    bench = {"per_round": {"prompt_ids": ids, "configs": {
        name: {"seconds": [[s] * 3 for s in seconds]} for name, seconds in
        (("plain", (2.0, 2.0)), ("adaptive", (1.5, 1.6)), ("adaptive-suffix", (1.0, 1.2)))}}}
    measured = tmp_path / "bench.json"
    measured.write_text(__import__("json").dumps(bench))
    out, png = tmp_path / "again.json", tmp_path / "ceiling.png"
    assert main(["--reprice", str(stored), "--measured", str(measured), "--plot", str(png), "--out", str(out)]) == 0
    again = __import__("json").loads(out.read_text())
    assert again["collected"] == saved["collected"] and again["max_k"] == 8
    assert again["total_s"]["adaptive-suffix"] <= again["total_s"]["plain"]
    assert png.read_bytes()[:4] == b"\x89PNG"
    assert "ceiling of adaptive-suffix over adaptive" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["--reprice", str(stored), "--plot", str(png)])
    assert "--plot needs --measured" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--reprice", str(measured)])
    assert "not a JSON written by this benchmark" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # the stored run fixed its prompts: another split would mislabel it
        main(["--reprice", str(stored), "--split", "dev"])
    assert "drop --split" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--reprice", str(stored), "--profile", str(tmp_path / "none.json")])
    assert "--profile" in capsys.readouterr().err
    bench["per_round"]["prompt_ids"] = ["elsewhere"] * len(ids)
    measured.write_text(__import__("json").dumps(bench))
    with pytest.raises(SystemExit):  # refused before any work, not after it
        main(["--reprice", str(stored), "--measured", str(measured), "--plot", str(png)])
    assert "the measured run has no prompt" in capsys.readouterr().err
