"""The ``>>>`` examples in ``policies/`` and ``simulator/`` docstrings run, and print what they claim.

Every module of the two packages whose source holds a ``>>>`` is found by walking the packages,
so an example added later is tested without touching this file.
"""

import doctest
import importlib
import pkgutil
from pathlib import Path

import pytest

import policies
import simulator

# module -> why its examples are skipped; each entry names an example to fix, not a permanent excuse
KNOWN_BROKEN: dict[str, str] = {}


def modules_with_examples():
    found = []
    for package in (policies, simulator):
        for info in pkgutil.walk_packages(package.__path__, prefix=package.__name__ + "."):
            spec = importlib.util.find_spec(info.name)
            if spec is not None and spec.origin and spec.origin.endswith(".py"):
                if ">>>" in Path(spec.origin).read_text(encoding="utf-8"):
                    found.append(info.name)
    return sorted(found)


MODULES = modules_with_examples()


def test_the_walk_finds_the_examples():
    assert "policies.acceptance" in MODULES and "simulator.workload" in MODULES, MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    if name in KNOWN_BROKEN:
        pytest.skip(f"known broken: {KNOWN_BROKEN[name]}")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples in {name} failed (see the output above)"
    assert result.attempted > 0, f"{name} has '>>>' in its source but doctest found no example to run"
