"""The ``>>>`` examples in the project's docstrings run, and print what they claim.

Every module of ``policies``, ``simulator``, ``adaptive_spec`` and ``benchmarks`` whose source holds a
``>>>`` is found by walking the packages, so an example added later is tested without touching this
file. An example that only shows a call (a real model to load, a batch to run) says so with
``# doctest: +SKIP``.
"""

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import adaptive_spec
import benchmarks
import policies
import simulator

# module -> why its examples are skipped; each entry names an example to fix, not a permanent excuse
KNOWN_BROKEN: dict[str, str] = {}


def modules_with_examples():
    found = []
    for package in (policies, simulator, adaptive_spec, benchmarks):
        for info in pkgutil.walk_packages(package.__path__, prefix=package.__name__ + "."):
            spec = importlib.util.find_spec(info.name)
            if spec is not None and spec.origin and spec.origin.endswith(".py"):
                examples = [line for line in Path(spec.origin).read_text(encoding="utf-8").splitlines() if ">>>" in line]
                if any("doctest: +SKIP" not in line for line in examples):  # one that only shows a call says so
                    found.append(info.name)
    return sorted(found)


MODULES = modules_with_examples()


def test_the_walk_finds_the_examples():
    for name in ("policies.acceptance", "simulator.workload", "adaptive_spec.server.protocol", "benchmarks.serve_batching",
                 "benchmarks.corpus.repetitive"):
        assert name in MODULES, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    if name in KNOWN_BROKEN:
        pytest.skip(f"known broken: {KNOWN_BROKEN[name]}")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (see the output above)"
    assert result.attempted > 0, f"{name} has '>>>' in its source but doctest found no example to run"
