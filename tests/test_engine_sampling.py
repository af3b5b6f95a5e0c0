"""With do_sample=True, speculation leaves the distribution of generated tokens unchanged."""

import itertools

import numpy as np
import torch
from scipy.stats import chisquare

from adaptive_spec import SpeculativeDecoder
from adaptive_spec.drafters import ModelDrafter, NgramDrafter
from adaptive_spec.sampling import logits_to_probs
from policies import StaticPolicy
from policies.adaptive import AdaptivePolicy
from tiny import loaded, tiny_llama

VOCAB = 8
PROMPT = [1, 2, 3]
SAMPLING = dict(do_sample=True, temperature=0.9, top_k=6, top_p=0.95)


def exact_marginals(model, prompt, steps):
    """Exact marginal distribution of each of the first ``steps`` tokens under the warped target."""
    marginals = [np.zeros(VOCAB) for _ in range(steps)]

    def walk(prefix, prob, depth):
        with torch.inference_mode():
            logits = model(input_ids=torch.tensor([prompt + prefix])).logits[0, -1]
        p = logits_to_probs(logits, SAMPLING["temperature"], SAMPLING["top_k"], SAMPLING["top_p"]).numpy()
        marginals[depth] += prob * p
        if depth + 1 < steps:
            for token in range(VOCAB):
                if p[token] > 0:
                    walk(prefix + [token], prob * p[token], depth + 1)

    walk([], 1.0, 0)
    return marginals


def sample_counts(decoder, policy, n, steps):
    counts = [np.zeros(VOCAB) for _ in range(steps)]
    for seed in range(n):
        ids = decoder.generate(PROMPT, max_new_tokens=steps, policy=policy, seed=seed, ignore_eos=True, **SAMPLING).token_ids
        for position, token in enumerate(ids):
            counts[position][token] += 1
    return counts


def test_speculative_sampling_matches_target_marginals():
    target = loaded(tiny_llama(seed=11, vocab=VOCAB, layers=1, hidden=16, init=0.5))
    draft = tiny_llama(seed=12, vocab=VOCAB, layers=1, hidden=16, init=0.5)  # a different model: real rejections
    decoder = SpeculativeDecoder(target, [ModelDrafter(draft, name="draft"), NgramDrafter()])
    steps, n = 4, 1500
    expected = exact_marginals(target.model, PROMPT, steps)
    # the adaptive policy learns across the 1500 requests, and its n-gram match gate cuts drafts to
    # lengths chosen from what earlier draws did: the choice must not bend the distribution
    adaptive = AdaptivePolicy(["ngram"])
    for policy in (StaticPolicy("draft", 3), StaticPolicy("ngram", 3), adaptive):
        counts = sample_counts(decoder, policy, n, steps)
        for position in range(1, steps):  # position 0 comes from prefill; 1..3 from the speculative step(s)
            mask = expected[position] * n >= 5  # chi-square needs expected counts >= 5 per cell
            observed = counts[position][mask]
            exp = expected[position][mask] / expected[position][mask].sum() * observed.sum()
            assert chisquare(observed, exp).pvalue > 1e-3, (policy.name, position, counts[position], expected[position] * n)
    gate = adaptive.draft_gate("ngram")
    assert sum(gate.seen.values()) > 0 and gate.profiles  # the gate was consulted and learned


def test_same_seed_same_output_and_seeds_differ():
    target = loaded(tiny_llama(seed=11, vocab=VOCAB, layers=1, hidden=16, init=0.5))
    decoder = SpeculativeDecoder(target, [NgramDrafter()])
    run = lambda seed: decoder.generate(PROMPT, max_new_tokens=12, policy=StaticPolicy("ngram", 3), seed=seed, **SAMPLING).token_ids
    assert run(5) == run(5)
    assert len({tuple(run(s)) for s in range(6)}) > 1
