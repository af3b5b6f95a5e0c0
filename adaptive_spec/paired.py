"""Paired speed comparisons with bootstrap intervals: what ``bench`` can claim on a noisy machine.

On these shared 2-core machines speed swings by 25% and more within seconds, so one run cannot say
whether a 5% difference between two configs is real. ``bench`` therefore runs every config on every
prompt in every round, configs back to back for each prompt, and this module compares them *paired*:

- a **unit** is one (round, prompt): both configs generated for the same prompt within seconds of
  each other, so slow drifts of the machine hit both alike;
- the unit's **ratio** is config A's tokens/s over config B's on that unit (> 1: A faster);
- the **estimate** is the median of the units' ratios (per kind of prompt, and over all prompts);
- its **95% interval** is a two-way percentile bootstrap (the "pigeonhole" bootstrap for crossed
  designs, Owen 2007, *Annals of Applied Statistics* 1(2)): each of ``resamples`` (2000) resamples
  draws the prompts with replacement - within each kind, so every kind keeps its number of prompts
  in an overall interval - and, independently, the rounds with replacement, takes every unit of a
  drawn prompt in a drawn round, and computes the median ratio of those units; the interval is the
  2.5th and 97.5th percentiles of the resampled medians. Random draws come from
  ``numpy.random.default_rng(seed)`` (seed 0): the same data always gives the same interval.
  Resampling both prompts and rounds makes the interval speak for other prompts like these and for
  other moments on this machine, not only for the units measured; with few rounds (3-5) the round
  part of the variance is estimated from few draws, one more reason the interval is an honest
  guide, not an exact one.
- an interval that contains 1.0 is labelled ``"no difference detected"``, never a win or a loss;
  a single unit has no interval (``low``/``high`` None, ``"too few units for an interval"``).

The **noise floor** is the same comparison between two configs that do the same work (``plain``,
our decode loop without drafts, and ``hf-plain``, transformers' ``generate``): its interval shows how
large a difference the harness can report from noise alone, and it should contain 1.0.

``schedule`` is the order the configs run in: rotated every round and every prompt, so each
config runs first, middle and last equally often.

Pure numpy, no torch: ``benchmarks/make_results.py`` recomputes the intervals from bench's JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

RESAMPLES = 2000  # percentiles at 2.5% / 97.5% move by < 1% of the interval's width between seeds
LEVEL = 0.95
SEED = 0
NO_DIFFERENCE = "no difference detected"
TOO_FEW = "too few units for an interval"  # one (round, prompt): nothing to resample
METHOD = ("median over paired units (same round, same prompt) of tokens/s ratios; 95% percentile bootstrap, "
          "prompts (within kind) and rounds resampled with replacement, independently (Owen 2007), "
          f"{RESAMPLES} resamples, numpy default_rng(seed {SEED})")


@dataclass(frozen=True)
class Comparison:
    config: str
    against: str
    role: str  # "plain", "best other" or "noise floor"
    kind: str  # a kind of prompt, or "all"
    units: int
    median: float  # median ratio of tokens/s, config over against
    low: float | None  # the interval's ends; None for a single unit
    high: float | None
    verdict: str  # "faster", "slower", NO_DIFFERENCE or TOO_FEW

    def to_dict(self) -> dict:
        return asdict(self)


def schedule(configs: list[str], round_: int, prompt_index: int) -> list[str]:
    """The order the configs run in for one prompt of one round: ``configs`` rotated left by
    ``round_ + prompt_index``. Over any ``len(configs)`` consecutive rounds (or prompts) each config
    takes each position once; over a whole run a config's counts per position differ by at most
    ``min(rounds % n, prompts % n)`` (n configs): equal when either is a multiple of n.

    >>> [schedule(["a", "b", "c"], r, 0) for r in range(3)]
    [['a', 'b', 'c'], ['b', 'c', 'a'], ['c', 'a', 'b']]
    """
    shift = (round_ + prompt_index) % len(configs)
    return configs[shift:] + configs[:shift]


def verdict(low: float, high: float) -> str:
    """``"faster"`` when the interval lies above 1.0, ``"slower"`` below, else no difference.

    >>> verdict(1.02, 1.10), verdict(0.90, 0.99), verdict(0.97, 1.04)
    ('faster', 'slower', 'no difference detected')
    """
    if low > 1.0:
        return "faster"
    if high < 1.0:
        return "slower"
    return NO_DIFFERENCE


def bootstrap_median(ratios: np.ndarray, strata: list[str] | None = None, resamples: int = RESAMPLES,
                     seed: int = SEED, level: float = LEVEL) -> tuple[float, float, float]:
    """(median, low, high) of ``ratios`` [prompts, rounds], one paired ratio a unit, with the
    two-way percentile bootstrap interval of the module docstring; ``strata`` (one label a prompt)
    keeps each stratum's number of prompts in every resample.

    >>> bootstrap_median(np.array([[1.1, 1.2], [1.0, 1.3], [1.2, 1.1]]))[0]
    1.15
    """
    ratios = np.asarray(ratios, dtype=float)  # [P, R]
    if ratios.ndim != 2 or ratios.size == 0:
        raise ValueError(f"ratios must be a non-empty [prompts, rounds] array, not shape {ratios.shape}")
    n_prompts, n_rounds = ratios.shape
    strata = strata if strata is not None else ["all"] * n_prompts
    if len(strata) != n_prompts:
        raise ValueError(f"{len(strata)} strata for {n_prompts} prompts")
    rng = np.random.default_rng(seed)
    groups = [np.flatnonzero(np.asarray(strata) == s) for s in dict.fromkeys(strata)]
    prompt_draws = np.concatenate([g[rng.integers(0, len(g), size=(resamples, len(g)))] for g in groups], axis=1)
    round_draws = rng.integers(0, n_rounds, size=(resamples, n_rounds))  # [B, R]
    resampled = ratios[prompt_draws[:, :, None], round_draws[:, None, :]]  # [B, P, R]
    medians = np.median(resampled.reshape(resamples, -1), axis=1)  # [B]
    tail = (1 - level) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return float(np.median(ratios)), float(low), float(high)


def speeds(per_round: dict, config: str) -> np.ndarray:
    """tokens/s [prompts, rounds] of one config from bench's ``per_round`` block."""
    runs = per_round["configs"][config]
    return np.asarray(runs["new_tokens"], dtype=float) / np.asarray(runs["seconds"], dtype=float)


def aggregate_speed(per_round: dict, config: str, kind: str | None = None) -> float:
    """Total new tokens over total seconds, every round, the prompts of ``kind`` (None: all)."""
    runs = per_round["configs"][config]
    rows = _rows(per_round, kind)
    return float(np.sum(np.asarray(runs["new_tokens"], float)[rows]) / np.sum(np.asarray(runs["seconds"], float)[rows]))


def compare(per_round: dict, config: str, against: str, role: str, kind: str | None = None,
            resamples: int = RESAMPLES, seed: int = SEED) -> Comparison:
    """``config`` against ``against`` on the prompts of ``kind`` (None: all, stratified by kind)."""
    rows = _rows(per_round, kind)
    ratios = (speeds(per_round, config) / speeds(per_round, against))[rows]
    strata = [k for k, keep in zip(per_round["kinds"], rows) if keep]
    if ratios.size < 2:
        return Comparison(config, against, role, kind or "all", int(ratios.size), float(ratios.item()), None, None, TOO_FEW)
    median, low, high = bootstrap_median(ratios, strata, resamples, seed)
    return Comparison(config, against, role, kind or "all", int(ratios.size), median, low, high, verdict(low, high))


def best_other(per_round: dict, config: str, kind: str | None = None) -> str | None:
    """The fastest config other than ``config`` by aggregate tokens/s on those prompts. Picked on
    the same data it is then compared on, so the comparison leans against ``config`` (the winner
    of several is more likely to have had luck): a conservative choice."""
    others = [c for c in per_round["configs"] if c != config]
    return max(others, key=lambda c: aggregate_speed(per_round, c, kind)) if others else None


def paired_report(per_round: dict, resamples: int = RESAMPLES, seed: int = SEED) -> dict:
    """Every config against ``plain`` and against the best other config, per kind and over all
    prompts, and the noise floor (``plain`` against ``hf-plain``) when both ran."""
    comparisons: list[Comparison] = []
    columns = [None] + sorted(set(per_round["kinds"]))
    for config in per_round["configs"]:
        for kind in columns:
            if config != "plain":
                comparisons.append(compare(per_round, config, "plain", "plain", kind, resamples, seed))
            other = best_other(per_round, config, kind)
            if other is not None:
                comparisons.append(compare(per_round, config, other, "best other", kind, resamples, seed))
    if {"plain", "hf-plain"} <= set(per_round["configs"]):
        comparisons += [compare(per_round, "plain", "hf-plain", "noise floor", kind, resamples, seed) for kind in columns]
    return {"method": METHOD, "resamples": resamples, "seed": seed, "level": LEVEL,
            "comparisons": [c.to_dict() for c in comparisons]}


def position_counts(per_round: dict) -> dict[str, list[int]]:
    """How often each config ran at each position (0: first) of its prompt's sequence."""
    n = len(per_round["configs"])
    return {c: np.bincount(np.ravel(runs["position"]), minlength=n).tolist() for c, runs in per_round["configs"].items()}


def _rows(per_round: dict, kind: str | None) -> np.ndarray:
    kinds = np.asarray(per_round["kinds"])
    rows = np.ones(len(kinds), bool) if kind is None else kinds == kind
    if not rows.any():
        raise ValueError(f"no prompts of kind {kind!r}")
    return rows


def ratio_cell(comparison: dict) -> str:
    """A comparison as a table cell: ``1.21× [1.10, 1.30] faster``, or ``no difference detected``
    first when its interval spans 1.0, so that no reader takes a noisy 1.03× for a win.

    >>> ratio_cell({"median": 1.031, "low": 0.97, "high": 1.08, "verdict": NO_DIFFERENCE})
    'no difference detected (1.03× [0.97, 1.08])'
    """
    if comparison["low"] is None:
        return f"{TOO_FEW} ({comparison['median']:.2f}×)"
    figures = f"{comparison['median']:.2f}× [{comparison['low']:.2f}, {comparison['high']:.2f}]"
    if comparison["verdict"] == NO_DIFFERENCE:
        return f"{NO_DIFFERENCE} ({figures})"
    return f"{figures} {comparison['verdict']}"


def report_rows(report: dict) -> list[list[str]]:
    """The rows of the paired table: config, prompts, units, × plain, best other config, × it; then
    the noise floor's rows. Shared by ``bench``'s tables and ``benchmarks/make_results.py``."""
    cells: dict[tuple[str, str], dict[str, dict]] = {}
    for c in report["comparisons"]:
        cells.setdefault((c["config"], c["kind"]), {})[c["role"]] = c
    rows = []
    for (config, kind), by_role in cells.items():
        if "noise floor" in by_role:
            continue
        vs_plain, other = by_role.get("plain"), by_role.get("best other")
        units = (vs_plain or other)["units"]
        rows.append([f"`{config}`", kind, str(units), ratio_cell(vs_plain) if vs_plain else "-",
                     f"`{other['against']}`" if other else "-", ratio_cell(other) if other else "-"])
    for (config, kind), by_role in cells.items():
        if "noise floor" in by_role:
            floor = by_role["noise floor"]
            rows.append([f"noise floor: `{config}` / `{floor['against']}`", kind, str(floor["units"]), ratio_cell(floor),
                         "-", "-"])
    return rows


REPORT_HEADER = ["config", "prompts", "units", "× plain, 95% CI", "best other config", "× it, 95% CI"]
