"""What every section of benchmarks/RESULTS.md shares: where the files are, loading one, its date
(its last commit), markdown tables, ratios, and the provenance line under each table."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
RESULTS_DIR = BENCH_DIR / "results"
RESULTS_MD = BENCH_DIR / "RESULTS.md"
README = BENCH_DIR.parent / "README.md"
README_BEGIN = "<!-- results: written by benchmarks/make_results.py from benchmarks/results/*.json -->"
README_END = "<!-- /results -->"
UNKNOWN_DATE = "unknown date"

# which prompts file each `bench` result was run on (the JSON records the prompt ids, not the file)
PROMPTS = {"shift.json": "benchmarks/shift.jsonl", "workloads.json": "benchmarks/workloads.jsonl",
           "workloads_rounds3.json": "benchmarks/workloads.jsonl", "engine.json": "benchmarks/engine.jsonl"}
# files in benchmarks/results/ that are not reported, and why
NOT_REPORTED: dict[str, str] = {}


def load(results_dir: Path, name: str) -> dict:
    return json.loads((Path(results_dir) / name).read_text())


def git_date(path: Path) -> str:
    """The file's last commit date (YYYY-MM-DD), or UNKNOWN_DATE outside git or before its first commit."""
    try:
        out = subprocess.run(["git", "log", "-1", "--format=%cs", "--", path.name], cwd=path.parent,
                             capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return UNKNOWN_DATE
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else UNKNOWN_DATE


def dates_in(markdown: str) -> dict[str, str]:
    """The date written beside each file in a rendered RESULTS.md (lets a test re-render without git)."""
    return dict(re.findall(r"\[`([^`]+\.json)`\]\(results/[^)]+\) \(([^)]+)\)", markdown))


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def ratio(value: float, base: float) -> str:
    return f"{value / base:.2f}×"


def machine_line(data: dict) -> str:
    """What the file records of its machine; 'not recorded' for what it does not."""
    machine = data.get("machine")
    if isinstance(machine, dict):
        on = f"{machine['accelerator']} ({machine['dtype']}), " if machine.get("accelerator") else ""
        return (f"{on}{machine['cpus']} cores ({machine['torch_threads']} torch threads), torch {machine['torch']}, "
                f"transformers {machine['transformers']}, {machine['platform']}")
    if "python" in data:
        return f"not recorded (Python {data['python']})"
    return "not recorded"


def provenance(results_dir: Path, names: list[str], dates: dict[str, str] | None, command: str,
               machine: str) -> str:
    """The lines under every table: the files with their dates, the machine, the command."""
    files = ", ".join(f"[`{n}`](results/{n}) ({file_date(results_dir, n, dates)})" for n in names)
    return f"- Data: {files}\n- Machine: {machine}\n- Reproduce:\n\n```bash\n{command}\n```"


def file_date(results_dir: Path, name: str, dates: dict[str, str] | None) -> str:
    if dates is not None:
        return dates.get(name, UNKNOWN_DATE)
    return git_date(Path(results_dir) / name)
