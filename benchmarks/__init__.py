"""Experiments and benchmark tools that use both the engine and the simulator."""
