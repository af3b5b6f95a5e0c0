"""The verifier's pure functions, on literal arrays, plus the statistical proof of exactness."""

import numpy as np
import pytest
import torch
from scipy.stats import chisquare

from adaptive_spec.verifier import rejection_sample, verify_greedy


def one_hot_logits(argmaxes, vocab=10):
    logits = torch.zeros(len(argmaxes), vocab)
    logits[torch.arange(len(argmaxes)), torch.tensor(argmaxes)] = 5.0
    return logits


def test_greedy_docstring_example_partial_accept():
    assert verify_greedy([5, 7, 2], one_hot_logits([5, 7, 9, 4])) == (2, 9)


def test_greedy_all_accepted_gets_bonus_token():
    assert verify_greedy([5, 7, 2], one_hot_logits([5, 7, 2, 4])) == (3, 4)


def test_greedy_first_rejected_and_no_drafts():
    assert verify_greedy([1, 7], one_hot_logits([3, 7, 2])) == (0, 3)
    assert verify_greedy([], one_hot_logits([6])) == (0, 6)


def test_greedy_rejects_wrong_shape():
    with pytest.raises(ValueError, match="k \\+ 1"):
        verify_greedy([1, 2], one_hot_logits([1, 2]))


P = torch.tensor([[0.05, 0.40, 0.20, 0.10, 0.15, 0.10], [0.30, 0.10, 0.10, 0.20, 0.20, 0.10]], dtype=torch.float64)
Q = torch.tensor([[0.30, 0.10, 0.30, 0.05, 0.05, 0.20]], dtype=torch.float64)


def wrong_sampler(draft_tokens, draft_probs, target_probs, generator):
    """A plausible bug: on rejection, resample from p instead of the residual norm(max(0, p - q))."""
    token = draft_tokens[0]
    u = torch.rand(1, generator=generator, dtype=torch.float64).item()
    if u < min(1.0, target_probs[0, token].item() / draft_probs[0, token].item()):
        return 1, int(torch.multinomial(target_probs[1], 1, generator=generator))
    return 0, int(torch.multinomial(target_probs[0], 1, generator=generator))


def first_token_counts(sampler, n, seed, deterministic=False):
    gen = torch.Generator().manual_seed(seed)
    draft_gen = np.random.default_rng(seed)
    counts = np.zeros(P.shape[1])
    for _ in range(n):
        d = int(draft_gen.choice(6, p=Q[0].numpy())) if not deterministic else 2
        num_accepted, token = sampler([d], None if deterministic else Q, P, gen)
        counts[d if num_accepted else token] += 1
    return counts


N = 20000  # with 6 cells, enough to detect a 0.02 shift in any probability at p < 1e-6


def test_rejection_sampler_first_token_is_distributed_as_p():
    counts = first_token_counts(rejection_sample, N, seed=1)
    assert chisquare(counts, P[0].numpy() * N).pvalue > 1e-3


def test_rejection_sampler_with_deterministic_draft_is_distributed_as_p():
    counts = first_token_counts(rejection_sample, N, seed=2, deterministic=True)
    assert chisquare(counts, P[0].numpy() * N).pvalue > 1e-3


def test_same_test_rejects_a_wrong_sampler():
    counts = first_token_counts(wrong_sampler, N, seed=1)
    assert chisquare(counts, P[0].numpy() * N).pvalue < 1e-6


def test_bonus_token_is_drawn_from_last_position_when_all_accepted():
    gen = torch.Generator().manual_seed(3)
    p = P.clone()
    p[0] = torch.tensor([0, 0, 1.0, 0, 0, 0], dtype=torch.float64)  # the draft token 2 is always accepted
    counts = np.zeros(6)
    for _ in range(5000):
        n, token = rejection_sample([2], Q, p, gen)
        assert n == 1
        counts[token] += 1
    assert chisquare(counts, P[1].numpy() * 5000).pvalue > 1e-3
