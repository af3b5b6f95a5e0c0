"""The notebooks in ``notebooks/`` run top to bottom, and are committed without outputs.

Each notebook runs in a fresh kernel, from ``notebooks/`` as a reader's would, on the small budget
(``ADAPTIVE_SPEC_NOTEBOOK_BUDGET=small``: the same code, fewer prompts and shorter simulations), with
a deadline for the whole notebook: every cell may use what is left of it. The kernel is ipykernel's
``python3``, which jupyter_client starts with this interpreter (``sys.executable``), so the notebooks
see this environment's packages; ``test_kernel_is_this_environment`` checks that.
"""

import json
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "notebooks"
BUDGET_VARIABLE = "ADAPTIVE_SPEC_NOTEBOOK_BUDGET"
# notebook -> (seconds for the whole notebook on the small budget, loads the real model). The four
# take ~4-5 minutes together on a quiet 2-core machine; each deadline is about three times its share
# (these machines' speed swings), a guard against a hang, not a benchmark.
NOTEBOOKS = {
    "01_quickstart.ipynb": (450, True),
    "02_controller_under_shift.ipynb": (540, True),
    "03_capacity_planning.ipynb": (360, False),
    "04_continuous_batching.ipynb": (360, True),
}


def execute(nb, timeout_s: float, env: dict[str, str]):
    """Run ``nb`` in a fresh ``python3`` kernel from ``notebooks/``; each cell gets what is left of ``timeout_s``."""
    nbclient = pytest.importorskip("nbclient", reason="the notebooks extra: pip install -e '.[notebooks]'")
    deadline = time.monotonic() + timeout_s
    client = nbclient.NotebookClient(
        nb, kernel_name="python3", resources={"metadata": {"path": str(FOLDER)}},
        timeout_func=lambda cell: max(1, int(deadline - time.monotonic())),
    )
    return client.execute(env=env)


def test_the_notebooks_are_all_here():
    assert sorted(p.name for p in FOLDER.glob("*.ipynb")) == sorted(NOTEBOOKS)


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_committed_notebook_has_no_outputs(name):
    """Outputs and execution counts stay out of the repository: diffs show code and text only."""
    nb = json.loads((FOLDER / name).read_text(encoding="utf-8"))
    dirty = [i for i, cell in enumerate(nb["cells"])
             if cell["cell_type"] == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)]
    assert not dirty, f"{name}: code cells {dirty} have outputs or execution counts; clear them before committing"


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_opens_with_its_question_and_ends_with_takeaways(name):
    cells = json.loads((FOLDER / name).read_text(encoding="utf-8"))["cells"]
    first, last = "".join(cells[0]["source"]), "".join(cells[-1]["source"])
    assert cells[0]["cell_type"] == "markdown" and "question" in first.lower()
    assert cells[-1]["cell_type"] == "markdown" and last.startswith("## Takeaways")
    first_code = next("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    assert BUDGET_VARIABLE in first_code, f"{name}: the budget switch belongs in the first code cell"


def test_kernel_is_this_environment():
    nbformat = pytest.importorskip("nbformat", reason="the notebooks extra: pip install -e '.[notebooks]'")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import sys; print(sys.prefix)")])
    out = execute(nb, 120, dict(os.environ))
    assert out.cells[0].outputs[0]["text"].strip() == sys.prefix


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.real_model] if real else [])
                                  for n, (_, real) in sorted(NOTEBOOKS.items())])
def test_notebook_runs_on_the_small_budget(name):
    nbformat = pytest.importorskip("nbformat", reason="the notebooks extra: pip install -e '.[notebooks]'")
    timeout_s, _ = NOTEBOOKS[name]
    nb = nbformat.read(FOLDER / name, as_version=4)
    started = time.monotonic()
    execute(nb, timeout_s, {**os.environ, BUDGET_VARIABLE: "small"})  # raises CellExecutionError with the traceback
    print(f"{name}: {time.monotonic() - started:.0f} s")
