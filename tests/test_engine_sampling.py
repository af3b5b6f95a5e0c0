"""With do_sample=True, speculation leaves the distribution of generated tokens unchanged.

Each configuration draws ``n`` sequences of ``STEPS`` tokens (seed ``i`` for the ``i``-th) from a
vocab-8 target and checks them two ways against the exact warped target, computed by walking
every prefix:

1. support: every token lies inside the top-k / top-p support of ``p`` given its own prefix. A
   token those filters forbid must have a zero count, however rare a bug makes it.
2. frequencies: at each position drawn by a speculative step, each token's count lies inside the
   equal-tailed exact binomial acceptance region of its exact marginal probability, at
   ``ALPHA`` per configuration split over the cells (Bonferroni). No cell is dropped or rescaled.

``n`` is not a chosen number: ``sample_size`` derives it from the power the check must have (a
``SHIFT`` in one token's marginal probability caught with probability ``POWER``), and
``test_the_check_has_the_stated_power`` shows that power on counts drawn from shifted marginals,
while ``test_the_check_rejects_a_sampler_that_ignores_top_k`` shows the support check firing on a
real engine run. The batched engine passes the same checks (``test_batched_sampling_...``): rows
of ragged draft lengths in one forward, and drafts its batch cap cuts by what the other rows draft.
"""

import math

import numpy as np
import pytest
import torch
from scipy.stats import binom, norm

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.batching import BatchedDecoder
from adaptive_spec.drafters import Int8Drafter, ModelDrafter, NgramDrafter, SuffixDrafter
from adaptive_spec.sampling import logits_to_probs
from policies import StaticPolicy
from policies.adaptive import AdaptivePolicy
from policies.batch_cap import BatchDraftCap
from policies.registry import PolicyRegistry
from tiny import ON_CPU, loaded, one_thread, tiny_llama

VOCAB = 8
PROMPT = [1, 2, 3]
SAMPLING = dict(do_sample=True, temperature=0.9, top_k=6, top_p=0.95)
# 4 tokens: position 0 comes from prefill, 1..3 from speculative steps. The first step may draft
# k <= 2 (k is capped so a step never overshoots max_new_tokens), enough for an early stop to cut
STEPS = 4
ALPHA = 1e-3  # family-wise false-alarm rate of the frequency check, per configuration
SHIFT = 0.04  # a change this large in one token's marginal probability must be caught ...
POWER = 0.9  # ... with at least this probability


# -- the exact target ------------------------------------------------------------------------------


def target_tree(model, prompt, steps):
    """``{prefix: p}``: the warped target distribution [vocab] after every reachable prefix of length < steps."""
    tree = {}

    def walk(prefix):
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([prompt + list(prefix)], device=model.device)).logits[0, -1]
        p = logits_to_probs(logits, SAMPLING["temperature"], SAMPLING["top_k"], SAMPLING["top_p"]).cpu().numpy()
        tree[prefix] = p
        if len(prefix) + 1 < steps:
            for token in np.flatnonzero(p > 0):
                walk(prefix + (int(token),))

    walk(())
    return tree


def exact_marginals(tree, steps):
    """[steps, vocab]: the marginal distribution of each position, summed over the prefix tree."""
    marginals = np.zeros((steps, VOCAB))

    def descend(prefix, prob):
        p = tree[prefix]
        marginals[len(prefix)] += prob * p
        if len(prefix) + 1 < steps:
            for token in np.flatnonzero(p > 0):
                descend(prefix + (int(token),), prob * p[token])

    descend((), 1.0)
    return marginals


def cells_to_test(marginals):
    """(position, token, p0) of every cell the frequency check tests: speculative positions, p0 > 0."""
    return [(pos, tok, marginals[pos, tok]) for pos in range(1, len(marginals)) for tok in range(VOCAB) if marginals[pos, tok] > 0]


# -- the check and its power -----------------------------------------------------------------------


def acceptance_region(n, p0, alpha_cell):
    """Counts [lo, hi] a cell of probability p0 may show in n draws: equal tails of alpha_cell / 2 each."""
    return binom.ppf(alpha_cell / 2, n, p0), binom.isf(alpha_cell / 2, n, p0)


def exact_power(n, p0, p1, alpha_cell):
    """P(the cell's count leaves its acceptance region) when its true probability is p1."""
    lo, hi = acceptance_region(n, p0, alpha_cell)
    return binom.cdf(lo - 1, n, p1) + binom.sf(hi, n, p1)


def shifted(p0, shift):
    """The alternatives for a cell: p0 moved by +-shift, where that is still a probability."""
    return [p1 for p1 in (p0 + shift, p0 - shift) if 0.0 <= p1 <= 1.0]


def sample_size(probs, alpha_cell, shift=SHIFT, power=POWER):
    """Smallest n (to 2%) at which every cell's two-sided test catches p0 -> p0 +- shift with ``power``.

    Normal approximation: the test rejects when |count - n p0| > z_a sqrt(n p0 (1 - p0)), with
    z_a = z_{1 - alpha_cell / 2}. If the truth is p1 = p0 + d, the count is centred on n p1 with
    sd sqrt(n p1 (1 - p1)); it lands beyond the bound with probability ``power`` when
        sqrt(n) |d| >= z_a sqrt(p0 (1 - p0)) + z_b sqrt(p1 (1 - p1)),   z_b = z_{power},
    i.e. n = ((z_a sqrt(p0 (1 - p0)) + z_b sqrt(p1 (1 - p1))) / d)^2, taken at the worst cell and
    sign. The approximation is then checked with the exact binomial power and n raised by 2% steps
    until every cell has it.
    """
    z_a, z_b = norm.isf(alpha_cell / 2), norm.isf(1 - power)
    n = max(((z_a * math.sqrt(p0 * (1 - p0)) + z_b * math.sqrt(p1 * (1 - p1))) / shift) ** 2
            for p0 in probs for p1 in shifted(p0, shift))
    n = math.ceil(n)
    while min(exact_power(n, p0, p1, alpha_cell) for p0 in probs for p1 in shifted(p0, shift)) < power:
        n = math.ceil(n * 1.02)
    return n


def support_violations(sequences, tree):
    """(position, prefix, token) of every sampled token the warped target gives probability 0."""
    bad = []
    for ids in sequences:
        for pos, token in enumerate(ids):
            prefix = tuple(int(t) for t in ids[:pos])
            if tree[prefix][token] == 0:
                bad.append((pos, prefix, int(token)))
                break  # the rest of the sequence has no target prefix to compare with
    return bad


def frequency_failures(counts, regions):
    """(position, token, count, (lo, hi)) of every tested cell whose count leaves its region.

    ``counts`` maps a position to its [vocab] counts, ``regions`` a (position, token) cell to its
    acceptance region; only cells at the positions in ``counts`` are tested.
    """
    failures = []
    for (pos, tok), (lo, hi) in regions.items():
        if pos in counts and not lo <= counts[pos][tok] <= hi:
            failures.append((pos, tok, int(counts[pos][tok]), (lo, hi)))
    return failures


# -- the engine ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def world():
    with one_thread():
        yield build_world()


def build_world():
    target = loaded(tiny_llama(seed=11, vocab=VOCAB, layers=1, hidden=16, init=0.5))
    draft = tiny_llama(seed=12, vocab=VOCAB, layers=1, hidden=16, init=0.5)  # a different model: real rejections
    # int8 self-draft of the same weights; dynamic quantization runs in float32 only
    target32 = tiny_llama(seed=11, vocab=VOCAB, layers=1, hidden=16, init=0.5, dtype=torch.float32)
    drafters = [ModelDrafter(draft, name="draft"), NgramDrafter()] + ([Int8Drafter(target32)] if ON_CPU else [])
    decoder = SpeculativeDecoder(target, drafters)
    suffix = SpeculativeDecoder(target, [SuffixDrafter()])  # its own decoder: its history is the suffix draws'
    return dict(decoder=decoder, suffix=suffix, **checks(target))


def checks(target):
    tree = target_tree(target.model, PROMPT, STEPS)
    marginals = exact_marginals(tree, STEPS)
    cells = cells_to_test(marginals)
    alpha_cell = ALPHA / len(cells)
    n = sample_size([p0 for _, _, p0 in cells], alpha_cell)
    regions = {(pos, tok): acceptance_region(n, p0, alpha_cell) for pos, tok, p0 in cells}
    print(f"\nsampling check: {len(cells)} cells, alpha per cell {alpha_cell:.2e}, n = {n} sequences per configuration")
    return dict(tree=tree, marginals=marginals, cells=cells, alpha_cell=alpha_cell, n=n, regions=regions)


def draw(decoder, policy, n, sampling=SAMPLING, **force):
    """n sequences [n, STEPS] (seed i for the i-th) and every step record."""
    sequences = np.zeros((n, STEPS), dtype=int)
    steps = []
    for seed in range(n):
        result = decoder.generate(PROMPT, max_new_tokens=STEPS, policy=policy, seed=seed, ignore_eos=True, **sampling, **force)
        sequences[seed] = result.token_ids
        steps.extend(result.steps)
    return sequences, steps


def position_counts(sequences):
    return {pos: np.bincount(sequences[:, pos], minlength=VOCAB) for pos in range(sequences.shape[1])}


def default_policy():
    """The CLI's default: adaptive over n-gram lookup and (on CPU) the int8 self-draft, early stop and match gate on."""
    policy = AdaptivePolicy(["ngram", "int8"] if ON_CPU else ["ngram"])
    assert policy.config.early_stop != "off" and policy.config.match_gate
    return policy


CONFIGS = {
    "static-draft": (lambda: StaticPolicy("draft", 3), {}),
    "static-ngram": (lambda: StaticPolicy("ngram", 3), {}),
    # the adaptive policy learns across the n requests, and its n-gram match gate cuts drafts to
    # lengths chosen from what earlier draws did: the choices must not bend the distribution
    "default": (default_policy, {}),
    # on models this small the default rarely picks int8 (its measured cost is high), so the int8
    # drafts and the early stop that cuts them are exercised by forcing the drafter
    **({"default-int8": (default_policy, dict(force_drafter="int8", force_k=3))} if ON_CPU else {}),
    # drafts from the earlier draws' outputs (the history) and from the request itself: a draft that
    # depends on past samples must not bend this sample's distribution either
    "static-suffix": (lambda: StaticPolicy("suffix", 3), {}),
}


@pytest.mark.parametrize("config", list(CONFIGS))
def test_speculative_sampling_matches_the_target_exactly(world, config):
    make_policy, force = CONFIGS[config]
    policy = make_policy()
    n = world["n"]
    sequences, steps = draw(world["suffix" if config == "static-suffix" else "decoder"], policy, n, **force)

    assert support_violations(sequences, world["tree"]) == []
    failures = frequency_failures(position_counts(sequences), world["regions"])
    expected = {pos: np.round(world["marginals"][pos] * n) for pos in range(1, STEPS)}
    assert failures == [], (config, failures, expected)

    # speculation really happened, with rejections, in the configuration under test
    proposed = sum(s.proposed for s in steps)
    accepted = sum(s.num_accepted for s in steps)
    assert 0 < accepted < proposed, (config, accepted, proposed)
    if config == "default":
        gate = policy.draft_gate("ngram")
        assert sum(gate.seen.values()) > 0 and gate.profiles  # the gate was consulted and learned
    if config == "default-int8":
        cut = [s for s in steps if s.drafter == "int8" and s.proposed < s.k]
        assert cut, "the early stop never cut an int8 draft"


def test_the_check_has_the_stated_power(world):
    """Counts drawn from the exact marginals with one token moved by +-SHIFT fail the check >= POWER of the time."""
    n, cells, regions, marginals = world["n"], world["cells"], world["regions"], world["marginals"]
    rng = np.random.default_rng(0)
    trials = 300
    allowance = 3 * math.sqrt(POWER * (1 - POWER) / trials)  # 3 Monte Carlo standard errors
    for pos in range(1, STEPS):
        null = rng.multinomial(n, marginals[pos], size=trials)
        false_alarms = sum(bool(frequency_failures({pos: c}, regions)) for c in null)
        assert false_alarms <= 2, (pos, false_alarms)  # expected: at most ALPHA * trials = 0.3
        for _, tok, p0 in [c for c in cells if c[0] == pos]:
            for p1 in shifted(p0, SHIFT):
                assert exact_power(n, p0, p1, world["alpha_cell"]) >= POWER
                # a wrong sampler: token `tok` moved to p1, the other tokens rescaled to make room
                wrong = marginals[pos] * (1 - p1) / (1 - p0)
                wrong[tok] = p1
                caught = sum(bool(frequency_failures({pos: c}, regions))
                             for c in rng.multinomial(n, wrong / wrong.sum(), size=trials))
                assert caught / trials >= POWER - allowance, (pos, tok, p0, p1, caught / trials)


def test_the_check_rejects_a_sampler_that_ignores_top_k(world):
    """The engine run with top-k off is what a sampler that drops the filter would emit: forbidden tokens appear."""
    no_top_k = {**SAMPLING, "top_k": 0}
    sequences, _ = draw(world["decoder"], StaticPolicy("draft", 3), 500, sampling=no_top_k)
    violations = support_violations(sequences, world["tree"])
    assert violations, "top-k ignored, yet no token outside the top-k support was drawn"


def test_same_seed_same_output_and_seeds_differ():
    target = loaded(tiny_llama(seed=11, vocab=VOCAB, layers=1, hidden=16, init=0.5))
    decoder = SpeculativeDecoder(target, [NgramDrafter()])
    run = lambda seed: decoder.generate(PROMPT, max_new_tokens=12, policy=StaticPolicy("ngram", 3), seed=seed, **SAMPLING).token_ids
    assert run(5) == run(5)
    assert len({tuple(run(s)) for s in range(6)}) > 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_a_tiny_temperature_is_the_greedy_limit_not_nan(dtype):
    logits = torch.tensor([[30.0, 29.0, -5.0], [2.0, 7.0, 7.0]], dtype=dtype)
    probs = logits_to_probs(logits, 1e-320 if dtype == torch.float64 else 1e-40, 0, 1.0)
    assert torch.equal(probs, torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.5, 0.5]], dtype=dtype))  # ties share


# -- the batched engine ----------------------------------------------------------------------------


class FixedPrices(BatchDraftCap):
    """The batch's cap on prices it does not relearn from the machine's timings, so that whether it
    cuts a row's draft depends on the other rows' drafts and the rows' credits, not on how fast the
    tiny model ran; it counts the drafts it cut and kept."""

    def __post_init__(self) -> None:
        super().__post_init__()
        # a wide step a little dearer per token than a plain one: drafts with little expected of them are cut
        self.warm([(r, w, 0.01 + 0.01 * r + 0.002 * r * w, 8) for r in (1, 2, 4, 8) for w in (1, 2, 5, 9)])
        self.cut_kept = [0, 0]

    def observe(self, rows, width, seconds, context=0.0) -> None:
        pass

    def allot(self, lengths, *args, **kwargs):
        kept = super().allot(lengths, *args, **kwargs)
        for n, c in zip(lengths, kept or ()):
            self.cut_kept[c == n] += n > 0
        return kept


BATCHED = {
    # fixed drafts of ragged lengths in one forward: each row verified and rolled back on its own
    "static-ngram": (lambda: None, lambda i: dict(policy=StaticPolicy("ngram", 1 + i % 3))),
    # pooled adaptive controllers whose drafts the batch's cap cuts by what the other rows draft
    # and by the rows' credits: choices that depend on the other rows' samples must not bend this
    # row's distribution either
    "adaptive-capped": (lambda: FixedPrices(plain_slowdown=0.05), lambda i: {}),
}


@pytest.mark.parametrize("config", list(BATCHED))
def test_batched_sampling_matches_the_target_exactly(world, config):
    """The batched engine, rows joining and leaving a batch of 8 with the single requests' seeds,
    passes the same checks as ``generate``: support and frequencies, at the same power."""
    make_cap, request = BATCHED[config]
    decoder = SpeculativeDecoder(world["decoder"].target_model, [NgramDrafter()],
                                 policy=PolicyRegistry("adaptive", ["ngram"]))
    engine = BatchedDecoder(decoder, max_batch=8, draft_cap=make_cap())
    n = world["n"]
    ids = [engine.submit(PROMPT, max_new_tokens=STEPS, seed=seed, ignore_eos=True, **SAMPLING, **request(seed))
           for seed in range(n)]
    results = engine.run()
    sequences = np.array([results[i].token_ids for i in ids])

    assert support_violations(sequences, world["tree"]) == []
    assert frequency_failures(position_counts(sequences), world["regions"]) == [], config
    steps = [s for i in ids for s in results[i].steps]
    proposed, accepted = sum(s.proposed for s in steps), sum(s.num_accepted for s in steps)
    assert 0 < accepted < proposed, (config, accepted, proposed)  # drafts verified, some rejected
    if engine.draft_cap is not None:
        cut, kept = engine.draft_cap.cut_kept
        assert cut > 0 and kept > 0, (cut, kept)  # the cap cut some rows' drafts and let others through
