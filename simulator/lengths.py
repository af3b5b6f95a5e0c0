"""Token-length distributions for prompts and outputs.

A request class says how long its prompts and its outputs are with a *length distribution*:
a rule that, given a random generator, returns positive integer token counts. Lengths are drawn
in bulk when the workload is generated (one numpy call per class and phase), never inside the
per-step loop, so the choice of distribution costs nothing at simulation time.

Kinds (the ``dist`` field of a scenario):

- ``fixed``      every request has ``value`` tokens.
- ``uniform``    integers in ``[low, high]``, both inclusive.
- ``lognormal``  median-free parametrisation by ``mean`` (in tokens) and ``sigma`` (log-space spread):
                 prompt and output lengths in chat logs are roughly log-normal.
- ``geometric``  mean ``mean`` tokens; memoryless, the discrete analogue of an exponential.
- ``empirical``  draw with replacement from ``values`` (e.g. lengths measured from a trace).

Every draw is clipped to ``[min_tokens, max_tokens]`` (defaults 1 and 1,000,000) so a heavy tail
cannot produce a zero-length or absurd request.

>>> import numpy as np
>>> LengthDist("uniform", low=4, high=4).sample(np.random.default_rng(0), 3).tolist()
[4, 4, 4]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

KINDS = ("fixed", "uniform", "lognormal", "geometric", "empirical")


@dataclass(frozen=True)
class LengthDist:
    """A distribution over positive token counts."""

    dist: str  # one of KINDS
    value: int = 0  # fixed: the length
    low: int = 0  # uniform: smallest length (inclusive)
    high: int = 0  # uniform: largest length (inclusive)
    mean: float = 0.0  # lognormal / geometric: mean length in tokens
    sigma: float = 0.5  # lognormal: std-dev of log(length); 0.5 is a typical chat spread
    values: tuple[int, ...] = field(default=())  # empirical: observed lengths
    min_tokens: int = 1  # clip floor: a request has at least one token
    max_tokens: int = 1_000_000  # clip ceiling: guards heavy tails

    def __post_init__(self) -> None:
        ok = {
            "fixed": self.value >= 1,
            "uniform": 1 <= self.low <= self.high,
            "lognormal": self.mean > 0 and self.sigma >= 0,
            "geometric": self.mean >= 1,
            "empirical": len(self.values) > 0 and min(self.values) >= 1,
        }
        if self.dist not in ok:
            raise ValueError(f"dist must be one of {KINDS}, got dist={self.dist!r}")
        if not ok[self.dist]:
            raise ValueError(f"invalid parameters for a {self.dist} length distribution: {self.describe()}")
        if not 1 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"need 1 <= min_tokens <= max_tokens, got {self.min_tokens}, {self.max_tokens}")

    def describe(self) -> str:
        if self.dist == "fixed":
            return f"fixed(value={self.value})"
        if self.dist == "uniform":
            return f"uniform(low={self.low}, high={self.high})"
        if self.dist == "lognormal":
            return f"lognormal(mean={self.mean}, sigma={self.sigma})"
        if self.dist == "geometric":
            return f"geometric(mean={self.mean})"
        return f"empirical({len(self.values)} values)"

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """Draw ``n`` lengths as an int64 array."""
        if self.dist == "fixed":
            out = np.full(n, self.value)
        elif self.dist == "uniform":
            out = rng.integers(self.low, self.high + 1, size=n)
        elif self.dist == "lognormal":
            # choose mu so that E[length] = mean: E[exp(N(mu, s^2))] = exp(mu + s^2 / 2)
            mu = np.log(self.mean) - self.sigma**2 / 2
            out = np.rint(rng.lognormal(mu, self.sigma, size=n))
        elif self.dist == "geometric":
            out = rng.geometric(1.0 / self.mean, size=n)
        else:
            out = rng.choice(np.asarray(self.values), size=n, replace=True)
        return np.clip(out, self.min_tokens, self.max_tokens).astype(np.int64)

    def expected(self) -> float:
        """Mean length before clipping (used for quick capacity estimates and reports)."""
        if self.dist == "fixed":
            return float(self.value)
        if self.dist == "uniform":
            return (self.low + self.high) / 2
        if self.dist in ("lognormal", "geometric"):
            return float(self.mean)
        return float(np.mean(self.values))


def length_dist_from_dict(raw: object, path: str) -> LengthDist:
    """Build a LengthDist from scenario input, naming ``path`` in any error.

    A bare integer means ``fixed``: ``output_tokens: 64``.
    """
    if isinstance(raw, bool) or not isinstance(raw, (int, dict)):
        raise ValueError(f"{path} must be an integer or a mapping with 'dist', got {raw!r}")
    if isinstance(raw, int):
        raw = {"dist": "fixed", "value": raw}
    if "dist" not in raw:
        raise ValueError(f"{path}.dist is required (one of {', '.join(KINDS)})")
    known = set(LengthDist.__dataclass_fields__)
    for key in raw:
        if key not in known:
            raise ValueError(f"{path}.{key} is not a known field (known: {', '.join(sorted(known))})")
    kwargs = dict(raw)
    if "values" in kwargs:
        kwargs["values"] = tuple(int(v) for v in kwargs["values"])
    try:
        return LengthDist(**kwargs)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{path}: {err}") from None
