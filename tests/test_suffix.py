"""The ``suffix`` drafter: its lookup against brute force, its history's bounds and isolation, its
file, and lossless decoding with it (greedy here and in batches; sampling in test_engine_sampling)."""

from __future__ import annotations

import json
import logging
from collections import Counter

import numpy as np
import pytest

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.batching.engine import BatchedDecoder
from adaptive_spec.drafters import HistoryLimits, HistoryStore, NgramDrafter, SuffixDrafter, SuffixSettings, build_drafter
from adaptive_spec.drafters.suffix_index import context_draft
from adaptive_spec.drafters.suffix_store import History
from adaptive_spec.errors import InvalidParameterError
from policies import StaticPolicy
from policies.adaptive import AdaptivePolicy
from tiny import loaded, one_thread, tiny_llama


# -- brute force ---------------------------------------------------------------------------------


def brute_force(documents: list[list[int]], context: list[int], max_depth: int, max_tokens: int, min_prob: float,
                min_match: int):
    """Longest suffix of ``context`` (>= min_match, <= max_depth) that occurs in a document with a
    token after it, then the most frequent continuation (ties: the latest occurrence), by counting."""
    occurrences = []  # (document index, end index) of the longest match, over documents in order
    for length in range(min(max_depth, len(context)), min_match - 1, -1):
        suffix = context[len(context) - length:]
        found = [(d, e) for d, doc in enumerate(documents) for e in range(length - 1, len(doc) - 1)
                 if doc[e - length + 1 : e + 1] == suffix]
        if found:
            occurrences = found
            break
    else:
        return [], [], 0
    tokens, probs = [], []
    alive = occurrences
    while len(tokens) < max_tokens:
        offset = len(tokens) + 1
        alive = [(d, e) for d, e in alive if e + offset < len(documents[d])]
        if not alive:
            break
        following = [documents[d][e + offset] for d, e in alive]
        counts = Counter(following)
        best = max(counts.values())
        # ties: the token of the latest occurrence (documents in order, ends in order)
        token = [t for t in following if counts[t] == best][-1]
        if best / (len(alive) + 1) < min_prob:  # one unseen continuation in the denominator
            break
        tokens.append(token)
        probs.append(best / (len(alive) + 1))
        alive = [(d, e) for (d, e), t in zip(alive, following) if t == token]
    return tokens, probs, length


def test_history_draft_equals_brute_force_on_random_streams():
    rng = np.random.default_rng(0)
    checked = drafted = 0
    for trial in range(60):
        vocab = int(rng.integers(2, 6))
        documents = [rng.integers(0, vocab, int(rng.integers(1, 40))).tolist() for _ in range(int(rng.integers(1, 6)))]
        history = History(HistoryLimits())
        for doc in documents:
            history.add(doc)
        for _ in range(10):
            context = rng.integers(0, vocab, int(rng.integers(2, 20))).tolist()
            depth, k, min_prob = int(rng.integers(2, 12)), int(rng.integers(1, 10)), float(rng.choice([0.0, 0.3, 0.6]))
            got = history.draft(np.array(context), depth, k, min_prob)
            want = brute_force(documents, context, depth, k, min_prob, min_match=1)
            assert (got.tokens, got.match_len if got.tokens else 0) == (want[0], want[2] if want[0] else 0), (documents, context)
            assert np.allclose(got.probs, want[1])
            checked += 1
            drafted += bool(got.tokens)
    assert drafted > checked // 3  # the comparison covered real drafts, not only misses


def test_request_draft_equals_brute_force_over_the_context_itself():
    rng = np.random.default_rng(1)
    for _ in range(300):
        context = rng.integers(0, 4, int(rng.integers(2, 40))).tolist()
        got = context_draft(np.array(context), 8, 6, 0.0)
        # the request's own text is one document whose last token has nothing after it
        want = brute_force([context], context, 8, 6, 0.0, min_match=1)
        assert got.tokens == want[0] and np.allclose(got.probs, want[1]), context


def test_draft_grows_with_the_match_and_is_cut_by_min_prob():
    store = HistoryStore()
    drafter = SuffixDrafter(store, SuffixSettings(factor=2.0, min_prob=0.1, window=0)).for_request("a")
    drafter.learn([10, 11, 12, 13, 14, 15, 16, 17, 18, 19])
    # a 2-token match drafts at most factor (2) x 2 = 4 tokens; a 5-token match up to 10
    assert drafter.propose([1, 10, 11], 8, None, None).tokens == [12, 13, 14, 15]
    long = drafter.propose([10, 11, 12, 13, 14], 8, None, None)
    # seen once: probability 1/2 (one unseen continuation in the denominator), and unanimous
    assert long.tokens == [15, 16, 17, 18, 19] and long.match_order == 4 and long.confidences == (0.5,) * 5
    assert not long.match_ambiguous
    drafter.learn([10, 11, 20])  # now [10, 11] continued two ways: the most recent wins the tie
    split = drafter.propose([1, 10, 11], 8, None, None)
    assert split.tokens[0] == 20 and split.match_ambiguous and split.confidences[0] == pytest.approx(1 / 3)
    # a new value between template tokens: the last token alone still finds the template's continuation
    drafter.learn([30, 31, 12, 13, 14])
    assert drafter.propose([99, 98, 97, 13], 2, None, None).tokens == [14, 15]


def test_the_tokens_before_a_match_pick_the_template_slot_that_follows():
    # records "key value ," with keys 101, 102, 103 in order and new values every time: after "," the
    # next key depends on the key before the value, which no exact suffix match reaches
    records = [[101, 50, 7, 102, 51, 7, 103, 52, 7], [101, 60, 7, 102, 61, 7, 103, 62, 7]]
    context = [101, 70, 7]  # the first key's line: 102 comes next
    plain = SuffixDrafter(HistoryStore(), SuffixSettings(window=0)).for_request("")
    weighted = SuffixDrafter(HistoryStore(), SuffixSettings(window=2)).for_request("")
    for drafter in (plain, weighted):
        for record in records:
            drafter.learn(record)
    assert plain.propose(context, 1, None, None).tokens == [103]  # a tie on counts: the most recent
    assert weighted.propose(context, 1, None, None).tokens == [102]  # the occurrence after key 101 weighs double


# -- the history's bounds ------------------------------------------------------------------------


def live_documents(history: History) -> list[list[int]]:
    return [tokens for tokens, _ in history.outputs()]


def test_eviction_keeps_every_limit_and_lookups_see_only_live_outputs():
    rng = np.random.default_rng(2)
    limits = HistoryLimits(max_tokens=200, max_outputs=12)
    history = History(limits)
    added = []
    for i in range(400):
        doc = rng.integers(0, 5, int(rng.integers(1, 30))).tolist()
        history.add(doc)
        added.append(doc)
        live = live_documents(history)
        assert history.tokens == sum(map(len, live)) <= 200 and len(live) <= 12
        assert live == added[len(added) - len(live):]  # the newest, in order: oldest evicted first
        if i % 20 == 0:
            context = rng.integers(0, 5, 8).tolist()
            got = history.draft(np.array(context), 6, 5, 0.0)
            assert got.tokens == brute_force(live, context, 6, 5, 0.0, 1)[0]
    # compaction keeps the buffer and the index near the live size, not the total ever added (~8,000)
    assert history._buffer.shape[0] == 1024  # never grew: 200 tokens + separators fit, with evicted room
    assert sum(len(p) for p in history._index.values()) <= history._buffer.shape[0]


def test_outputs_age_out():
    now = [0.0]
    history = History(HistoryLimits(max_age_s=10.0), clock=lambda: now[0])
    history.add([1, 2, 3])
    now[0] = 5.0
    history.add([4, 5, 6])
    now[0] = 12.0
    history.evict()
    assert live_documents(history) == [[4, 5, 6]]
    assert history.draft(np.array([1, 2]), 8, 4, 0.0).tokens == []


def test_bad_limits_name_the_parameter():
    with pytest.raises(InvalidParameterError, match="max_tokens"):
        HistoryLimits(max_tokens=0)
    with pytest.raises(InvalidParameterError, match="max_age_s"):
        HistoryLimits(max_age_s=-1)


# -- isolation and persistence -------------------------------------------------------------------


def test_one_keys_outputs_never_reach_another_keys_drafts_unless_shared():
    output = [7, 8, 9, 10, 11, 12]
    for shared in (False, True):
        drafter = SuffixDrafter(HistoryStore(HistoryLimits(shared=shared)))
        drafter.for_request("tenant-a").learn(output)
        same = drafter.for_request("tenant-a").propose([3, 7, 8], 4, None, None).tokens
        other = drafter.for_request("tenant-b").propose([3, 7, 8], 4, None, None).tokens
        assert same == [9, 10, 11, 12]
        assert other == ([9, 10, 11, 12] if shared else [])


def test_least_recently_used_keys_are_dropped_beyond_max_keys():
    store = HistoryStore(HistoryLimits(max_keys=2))
    for key in ("a", "b", "a", "c"):
        store.add(key, [1, 2, 3])
    assert store.stats()["keys"] == 2
    assert store.draft("b", np.array([1, 2]), 8, 4, 0.0).tokens == []  # b was dropped, a kept
    assert store.draft("a", np.array([1, 2]), 8, 4, 0.0).tokens == [3]


def test_history_survives_a_restart_only_through_its_file(tmp_path):
    path = tmp_path / "suffix" / "tiny.json"
    store = HistoryStore()
    store.add("a", [1, 2, 3, 4])
    store.add("b", [5, 6, 7])
    store.save(path, model="tiny")
    again = HistoryStore()
    assert again.load(path, model="tiny") == 2
    assert again.draft("a", np.array([1, 2]), 8, 4, 0.0).tokens == [3, 4]
    assert again.draft("b", np.array([5, 6]), 8, 4, 0.0).tokens == [7]
    assert again.stats()["tokens"] == 7


@pytest.mark.parametrize("content, reason", [
    ("{not json", "unreadable"),
    (json.dumps({"format": "adaptive-spec-suffix-history", "version": 99, "model": "tiny", "shared": False, "keys": {}}), "version 99"),
    (json.dumps({"format": "adaptive-spec-suffix-history", "version": 1, "model": "other", "shared": False, "keys": {}}), "model 'other'"),
    (json.dumps({"format": "adaptive-spec-suffix-history", "version": 1, "model": "tiny", "shared": False,
                 "keys": {"a": [{"age_s": 0, "tokens": [1, "x"]}]}}), "malformed output"),
])
def test_a_corrupt_or_foreign_file_is_ignored_with_a_warning(tmp_path, caplog, content, reason):
    path = tmp_path / "h.json"
    path.write_text(content)
    store = HistoryStore()
    with caplog.at_level(logging.WARNING):
        assert store.load(path, model="tiny") == 0
    assert reason in caplog.text and store.stats()["tokens"] == 0


def test_memory_is_reported_and_bounded():
    store = HistoryStore(HistoryLimits(max_tokens=1000))
    rng = np.random.default_rng(3)
    sizes = []
    for _ in range(300):
        store.add("a", rng.integers(0, 50, 40).tolist())
        sizes.append(store.stats()["memory_bytes"])
    stats = store.stats()
    assert stats["tokens"] <= 1000 and stats["outputs"] == 25
    assert max(sizes[100:]) < 2 * sizes[60]  # bounded: flat once the limit is reached


# -- lossless decoding ---------------------------------------------------------------------------

# a request stream where answers repeat across requests: the same prompt twice, and prompts sharing
# a prefix (the random-init model's answer depends mostly on the last tokens)
STREAM = [[5, 9, 13], [7, 2, 13], [5, 9, 13], [30, 31, 5, 9, 13], [7, 2, 13], [44, 45, 46]]


@pytest.fixture(scope="module")
def target():
    with one_thread():
        yield loaded(tiny_llama(seed=3))


def test_suffix_drafts_from_past_outputs_and_greedy_output_equals_plain(target):
    plain = SpeculativeDecoder(target)
    decoder = SpeculativeDecoder(target, [build_drafter("suffix", target)])
    accepted_from_history = 0
    for i, prompt in enumerate(STREAM):
        want = plain.generate(prompt, max_new_tokens=24).token_ids
        result = decoder.generate(prompt, max_new_tokens=24, policy=StaticPolicy("suffix", 8))
        assert result.token_ids == want, i
        if i == 2:  # the first prompt again: its whole answer comes from the history
            accepted_from_history = result.stats.accepted_tokens
    assert accepted_from_history >= 16


def test_adaptive_with_suffix_and_ngram_equals_plain(target):
    plain = SpeculativeDecoder(target)
    decoder = SpeculativeDecoder(target, [NgramDrafter(), build_drafter("suffix", target)])
    policy = AdaptivePolicy(["ngram", "suffix"])
    chosen = Counter()
    for prompt in STREAM * 2:
        result = decoder.generate(prompt, max_new_tokens=24, policy=policy, key="k")
        assert result.token_ids == plain.generate(prompt, max_new_tokens=24).token_ids
        chosen.update(s.drafter for s in result.steps if s.proposed)
    assert chosen["suffix"] > 0


def test_batched_rows_draft_from_their_own_keys_history_and_equal_single_requests(target):
    plain = SpeculativeDecoder(target)
    decoder = SpeculativeDecoder(target, [build_drafter("suffix", target)])
    engine = BatchedDecoder(decoder, max_batch=3)
    first = [engine.submit(p, max_new_tokens=20, policy=StaticPolicy("suffix", 6), key=f"k{i}") for i, p in enumerate(STREAM[:2])]
    engine.run()
    # the same prompts again, each under the key that answered it before, plus one under a new key
    again = {engine.submit(STREAM[0], max_new_tokens=20, policy=StaticPolicy("suffix", 6), key="k0"): ("k0", STREAM[0]),
             engine.submit(STREAM[1], max_new_tokens=20, policy=StaticPolicy("suffix", 6), key="k1"): ("k1", STREAM[1]),
             engine.submit(STREAM[0], max_new_tokens=20, policy=StaticPolicy("suffix", 6), key="new"): ("new", STREAM[0])}
    results = engine.run()
    for rid in first:
        assert results[rid].token_ids == plain.generate(STREAM[first.index(rid)], max_new_tokens=20).token_ids
    for rid, (key, prompt) in again.items():
        assert results[rid].token_ids == plain.generate(prompt, max_new_tokens=20).token_ids
    by_key = {key: results[rid].stats.accepted_tokens for rid, (key, _) in again.items()}
    assert by_key["k0"] >= 12 and by_key["k1"] >= 12
    # the new key had no history: whatever it accepted came from its own request only
    own_only = SpeculativeDecoder(target, [build_drafter("suffix", target)]).generate(
        STREAM[0], max_new_tokens=20, policy=StaticPolicy("suffix", 6), key="new")
    assert by_key["new"] == own_only.stats.accepted_tokens


# -- the benchmark's histories -------------------------------------------------------------------


def test_bench_gives_each_suffix_config_its_own_history_emptied_every_round():
    from adaptive_spec.bench import Prompt, run_bench

    target = loaded(tiny_llama(seed=3))
    text = " ".join(str(t) for t in STREAM[0])
    # the same text twice: the second can be drafted from the first's answer, the first from nothing
    prompts = [Prompt("first", text, "repeat"), Prompt("again", text, "repeat")]
    with one_thread():
        result = run_bench(target, prompts, ["plain", "static:suffix:8", "adaptive-suffix"], 24, rounds=3)
        alone = SpeculativeDecoder(target, [build_drafter("suffix", target)]).generate(
            target.tokenizer(text)["input_ids"], max_new_tokens=24, policy=StaticPolicy("suffix", 8))
    block = result["per_round"]["configs"]
    accepted = block["static:suffix:8"]["accepted_tokens"]
    # every round starts empty (and the config running before it on the same prompt taught it nothing)
    assert accepted[0] == [alone.stats.accepted_tokens] * 3
    assert all(a >= 16 and a > alone.stats.accepted_tokens for a in accepted[1])
    assert all(all(row) for c in block.values() for row in c["equals_plain"])
    assert block["plain"]["accepted_tokens"] == [[0, 0, 0], [0, 0, 0]]
