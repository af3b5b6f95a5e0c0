"""Continuous batching: many requests decoded together, each with its own controller and draft length."""

from adaptive_spec.batching.engine import BatchedDecoder
from adaptive_spec.batching.slots import SlotCache

__all__ = ["BatchedDecoder", "SlotCache"]
