"""One-line checks for configuration values, each raising one ValueError that names the parameter.

Configs in ``policies/`` come from outside (CLI flags, ``make_policy`` keyword arguments, service
configuration), so a bad value must say which parameter it was and what it got, e.g.
``ValueError: half_life_steps must be > 0, got half_life_steps=0``.
"""

from __future__ import annotations

import math


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> None:
    """``value`` must be an int in ``[minimum, maximum]`` (``maximum=None``: unbounded)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= minimum
    ok = ok and (maximum is None or value <= maximum)
    if not ok:
        bound = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
        raise ValueError(f"{name} must be an integer {bound}, got {name}={value!r}")


def check_positive(name: str, value: object) -> None:
    """``value`` must be a finite number > 0."""
    if not (_is_number(value) and value > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {name}={value!r}")


def check_range(name: str, value: object, low: float, high: float, *, low_open: bool = False,
                high_open: bool = False) -> None:
    """``value`` must be a finite number in the interval ``low..high`` (ends open or closed)."""
    ok = _is_number(value)
    if ok:
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"{name} must be a number in {interval}, got {name}={value!r}")
