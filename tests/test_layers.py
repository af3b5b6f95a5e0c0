"""Layers load only what they need: the simulator and the telemetry commands, and the packages
themselves, run without torch or transformers; the simulator's modules import in one direction."""

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# runs `adaptive-spec ARGS...` in a fresh interpreter, then reports its exit status and what it imported
RUN_CLI = """
import json, sys
from adaptive_spec.cli import main
sys.argv = ["adaptive-spec", *sys.argv[1:]]
try:
    main()
    code = 0
except SystemExit as exc:
    code = exc.code or 0
print("LAYERS " + json.dumps({"code": code, "torch": "torch" in sys.modules,
                              "transformers": "transformers" in sys.modules}))
"""


def run_in_fresh_interpreter(code: str, *args: str, tmp_path: Path) -> tuple[dict, str]:
    env = {**os.environ, "ADAPTIVE_SPEC_TELEMETRY_DB": str(tmp_path / "default.sqlite"), "COLUMNS": "200"}
    proc = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = [line for line in proc.stdout.splitlines() if line.startswith("LAYERS ")]
    assert report, proc.stdout + proc.stderr
    return json.loads(report[-1][len("LAYERS "):]), proc.stdout + proc.stderr


@pytest.fixture
def store(tmp_path) -> Path:
    """A telemetry store with one finished request and its interval counters, written a minute ago."""
    from adaptive_spec.telemetry.store import connect, write_batch

    path = tmp_path / "telemetry.sqlite"
    end = time.time() - 60
    conn = connect(path)
    write_batch(conn, [
        ("requests", ("run", 1, "tiny", "default", "adaptive", end - 2, end, 10, 32, 32, 0.0, "length", None,
                      0.05, 1.9, 0.06, 12, 10, 40, 24, "ngram", "ngram")),
        ("intervals", ("run", "tiny", "default", "ngram", end - 2, end, 12, 10, 40, 24, 32, 40, 0.01, 1.9,
                       "[10, 10, 10, 10]", "[8, 6, 6, 4]")),
    ])
    conn.close()
    return path


@pytest.mark.parametrize("args, shows", [
    (["simulate", "run", "simulator/scenarios/smollm2_cpu_shift.yaml", "--no-timeseries"],
     "requests completed / arrived"),
    (["telemetry", "summary", "--db", "{store}", "--window", "1h"], "ngram"),
    (["alerts", "--db", "{store}"], "no alerts firing"),
    (["--help"], "simulate"),
], ids=["simulate-run", "telemetry-summary", "alerts", "help"])
def test_command_runs_without_torch_or_transformers(args, shows, store, tmp_path):
    args = [a.format(store=store) for a in args]
    report, output = run_in_fresh_interpreter(RUN_CLI, *args, tmp_path=tmp_path)
    assert report == {"code": 0, "torch": False, "transformers": False}, output
    assert shows in output


IMPORTS = """
import json, sys
import adaptive_spec, adaptive_spec.errors, adaptive_spec.telemetry, adaptive_spec.telemetry.cli, adaptive_spec.cli
import adaptive_spec.telemetry.recorder, adaptive_spec.telemetry.otel  # the observers, batched forwards included
import benchmarks, benchmarks.sim_validation, policies, simulator, simulator.cli
assert adaptive_spec.InvalidParameterError is adaptive_spec.errors.InvalidParameterError
print("LAYERS " + json.dumps({"code": 0, "torch": "torch" in sys.modules,
                              "transformers": "transformers" in sys.modules}))
"""


def test_packages_import_without_torch_or_transformers(tmp_path):
    report, output = run_in_fresh_interpreter(IMPORTS, tmp_path=tmp_path)
    assert report == {"code": 0, "torch": False, "transformers": False}, output


def test_package_names_load_on_first_access():
    import adaptive_spec

    assert set(adaptive_spec.__all__) <= set(dir(adaptive_spec))
    assert adaptive_spec.GenerationConfig().max_new_tokens > 0
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        adaptive_spec.nope  # noqa: B018


def _intra_package_imports(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports, at the top or inside functions alike."""
    graph = {}
    for path in (REPO / package).glob("*.py"):
        if path.stem == "__init__":
            continue
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names)
        graph[f"{package}.{path.stem}"] = {d for d in deps if d.startswith(package + ".")}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}  # "open" while on the current path, "done" after

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                return [*path[path.index(dep):], dep] if dep in path else [*path, dep]
            if dep not in state and (found := visit(dep, [*path, dep])):
                return found
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_cycle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("package", ["simulator", "policies"])
def test_modules_import_in_one_direction(package):
    assert _cycle(_intra_package_imports(package)) is None


def test_with_traffic_belongs_with_the_scenario():
    import simulator
    from simulator.scenario import with_traffic

    assert simulator.with_traffic is with_traffic
    assert "simulator.capacity" not in _intra_package_imports("simulator")["simulator.sweep"]
