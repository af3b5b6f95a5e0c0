"""benchmarks/RESULTS.md and the README's results block are what make_results.py computes from the JSON files.

The dates written in RESULTS.md are the files' last commit dates; these tests read them back from the
page instead of asking git, so they hold in a shallow clone too (``make_results.py --check`` checks the
dates as well).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load_make_results():
    spec = importlib.util.spec_from_file_location("make_results", REPO / "benchmarks" / "make_results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make_results = _load_make_results()
from benchmarks import bench_sections, results_kit  # noqa: E402 (after the script is loaded as a file)
COMMITTED = (REPO / "benchmarks" / "RESULTS.md").read_text()


def test_results_md_is_rendered_from_the_json_files():
    dates = results_kit.dates_in(COMMITTED)
    assert dates, "RESULTS.md names no result file with a date"
    assert make_results.render(make_results.RESULTS_DIR, dates) == COMMITTED


def test_readme_results_block_is_rendered_from_the_json_files():
    readme = (REPO / "README.md").read_text()
    assert make_results.with_readme_block(readme, make_results.headline()) == readme


def test_every_reported_file_exists_and_every_file_is_reported_or_explained():
    reported = set(results_kit.dates_in(COMMITTED))
    on_disk = {p.name for p in make_results.RESULTS_DIR.glob("*.json")}
    assert reported <= on_disk
    assert on_disk - reported <= set(make_results.NOT_REPORTED)


@pytest.fixture
def results_copy(tmp_path):
    """A copy of benchmarks/results/ outside git."""
    target = tmp_path / "results"
    shutil.copytree(make_results.RESULTS_DIR, target)
    return target


def test_a_changed_json_value_changes_the_rendered_figure(results_copy):
    path = results_copy / "workloads.json"
    data = json.loads(path.read_text())
    data["configs"]["adaptive"]["tokens_per_s"] = 99.25
    path.write_text(json.dumps(data))
    dates = results_kit.dates_in(COMMITTED)

    rendered = make_results.render(results_copy, dates)

    assert rendered != COMMITTED
    plain = data["configs"]["plain"]["tokens_per_s"]
    row = f"| `adaptive` | 99.2 ({99.25 / plain:.2f}×) |"  # the figure in its table's cell
    assert row in rendered
    assert row not in COMMITTED


def test_a_changed_headline_value_changes_the_readme_block(results_copy):
    path = results_copy / "telemetry_overhead_real.json"
    data = json.loads(path.read_text())
    data["overhead"] = 0.0421
    path.write_text(json.dumps(data))

    assert "| 4.21% slower |" in make_results.headline(results_copy)


def test_outside_git_the_date_is_unknown_not_invented(results_copy):
    rendered = make_results.render(results_copy)

    assert f"[`shift.json`](results/shift.json) ({results_kit.UNKNOWN_DATE})" in rendered


def test_a_file_that_records_no_machine_says_so():
    assert results_kit.machine_line({"tokens_per_s": {}}) == "not recorded"
    assert results_kit.machine_line({"python": "3.11.7"}) == "not recorded (Python 3.11.7)"


def test_readme_stays_a_short_users_document():
    size = len((Path(__file__).resolve().parents[1] / "README.md").read_bytes())
    assert size < 12_000, f"README.md is {size} bytes; details belong in benchmarks/RESULTS.md or the module docs"


def test_bench_files_with_rounds_show_paired_intervals_and_single_rounds_do_not(results_copy):
    rendered = make_results.render(results_copy, results_kit.dates_in(COMMITTED))
    rounds_section = rendered.split("## Per workload, median of rounds")[1].split("\n## ")[0]
    single_section = rendered.split("## Per workload\n")[1].split("\n## ")[0]
    assert "noise floor: `plain` / `hf-plain`" in rounds_section and "95% CI" in rounds_section
    assert "predates the rotated order" in rounds_section  # computed from the old file's round_seconds
    assert "Paired ratios" not in single_section  # one round: no interval over rounds to show


def test_a_file_with_every_round_s_figures_renders_them_without_the_old_file_caveat(results_copy):
    path = results_copy / "workloads_rounds3.json"
    data = json.loads(path.read_text())
    data["per_round"] = bench_sections.per_round_of(data)  # the block bench now writes
    data["per_round"]["configs"]["adaptive"]["seconds"] = [[s / 10 for s in row]
                                                           for row in data["per_round"]["configs"]["adaptive"]["seconds"]]
    path.write_text(json.dumps(data))

    rendered = make_results.render(results_copy, results_kit.dates_in(COMMITTED))

    section = rendered.split("## Per workload, median of rounds")[1].split("\n## ")[0]
    assert "predates the rotated order" not in section
    adaptive = next(line for line in section.splitlines() if line.startswith("| `adaptive` |") and "[" in line)
    assert "faster" in adaptive and "no difference detected" not in adaptive  # ten times faster in every round


def test_the_corpus_test_run_renders_with_its_targets_once_its_file_exists(results_copy):
    assert "Public corpus" not in COMMITTED or (results_copy / "corpus_test.json").exists()
    data = json.loads((results_copy / "workloads_rounds3.json").read_text())
    data["per_round"] = bench_sections.per_round_of(data)
    data["split"] = "test"
    (results_copy / "corpus_test.json").write_text(json.dumps(data))

    rendered = make_results.render(results_copy, results_kit.dates_in(COMMITTED))

    section = rendered.split("## Public corpus, test split")[1].split("\n## ")[0]
    assert "[`benchmarks/corpus/corpus.jsonl`](corpus/corpus.jsonl)" in section
    assert "--prompts benchmarks/corpus/corpus.jsonl --split test --max-new-tokens 96" in section
    targets = section.split("Targets:")[1]
    assert targets.split("\n\nWhy ")[0].count("`adaptive` / `plain`") == 3  # one per kind
    assert "best transformers config (`hf-plain`)" in targets and "noise floor" in targets
    assert "| met |" in targets and "| **missed** |" in targets  # the open kind's interval reaches below 0.97
    missed = [line.split(", ")[1].split(":")[0] for line in targets.splitlines()
              if "`adaptive` / `plain`" in line and "**missed**" in line]
    explained = [line.split(" misses on ")[1].split(":")[0] for line in targets.splitlines() if line.startswith("Why ")]
    assert explained == missed  # every missed kind, and only those, is explained from its figures


def test_served_batching_rounds_render_round_by_round_comparisons_and_timeline_errors(results_copy):
    path = results_copy / "serve_batching.json"
    data = json.loads(path.read_text())
    second = []
    for run in data["runs"]:  # a second round: adaptive twice as fast, and a timeline replay of every run
        run.update(round=0, simulator_error_timeline={"p50": 0.03, "p95": -0.07}, simulated_drafting_timeline=0.27,
                   simulator_error_timeline_without_overhead={"p50": -0.01, "p95": -0.12},
                   serving_overhead={"step_s": 0.003, "request_s": 0.0075, "gaps": 90, "left": 14})
        faster = 2.0 if run["config"] == "adaptive" else 1.0
        second.append({**run, "round": 1, "output_tokens_per_s": run["output_tokens_per_s"] * faster,
                       "serving_overhead": {"step_s": 0.0042, "request_s": 0.0091, "gaps": 80, "left": 15}})
    data["runs"] += second
    data["rounds"] = 2
    data["cap_warmed"] = True
    from benchmarks.rounds import compare_rounds

    data["comparisons"] = [compare_rounds(data["runs"], c, level) for level in data["concurrency"]
                           for c in data["configs"] if c != "adaptive"]
    path.write_text(json.dumps(data))

    section = make_results.render(results_copy, results_kit.dates_in(COMMITTED)).split(
        "## Batched serving by concurrency")[1].split("\n## ")[0]
    assert "| round | concurrency |" in section and "timeline p50" in section and "| +3% | -7% | 27% |" in section
    assert "--rounds 2" in section
    # the replay's time between forwards, as the runs' steps recorded it
    assert "(3.0 to 4.2 ms over the runs)" in section and "(7.5 to 9.1 ms: the answer's wrap-up)" in section
    n = 2 * len(data["runs"])  # p50 and p95 of every run: each run's p95 off by 12% without the overhead
    assert (f"Without that time the same replays are within 10% in {n // 2} of {n} cases, mean error -6.5%; "
            f"with it, within 10% in {n} of {n} cases, mean error -2.0%.") in section
    objective = (f" --batch-objective {data['batch_objective']} --batch-cut {data.get('batch_cut', 'common')}"
                 if "batch_objective" in data else "")  # a run from before the cut was row by row: one length
    assert f"--plain-slowdown 0.05{objective} --profile {Path(data['profile']).name}`" in section  # the server's cap warm-started
    rows = [line for line in section.splitlines() if line.startswith("| ") and "×" in line]
    best = [row for row in rows if "the round's best fixed" in row]
    rows = [row for row in rows if row not in best]
    assert len(rows) == len(data["comparisons"])
    for row, comparison in zip(rows, data["comparisons"]):
        low, high = sorted(comparison["throughput"]["ratios"])
        assert f"[{low:.2f}, {high:.2f}]" in row  # the rounds' own ratios, the second twice the first
        assert high == pytest.approx(2 * low)
        throughput_verdict = [cell.strip() for cell in row.strip("|").split("|")][3]
        assert (throughput_verdict == "ahead in every round") == (low > 1)
    # each concurrency also against its round's fastest fixed config, which the rounds share here
    assert [row.split("|")[1].strip() for row in best] == [str(level) for level in data["concurrency"]]
    for row in best:
        low, high = (float(v) for v in row.split("×")[1].split("]")[0].strip(" [").split(","))
        assert high == pytest.approx(2 * low, abs=0.02)  # shown to 2 places: the same fastest config, adaptive twice as fast
    assert "Requests that arrived while the slowest quarter" in section


def test_served_batching_runs_priced_at_the_profile_render_beside_the_wall_clock(results_copy):
    from benchmarks.rounds import compare_rounds

    heading = "## Batched serving by concurrency, held-out prompts, again, at the profile's prices"
    (results_copy / "serve_batching_test_priced.json").unlink()
    assert heading not in make_results.render(results_copy, results_kit.dates_in(COMMITTED))  # no file, no section
    data = json.loads((results_copy / "serve_batching_test_c4.json").read_text())
    for run in data["runs"]:  # adaptive's forwards cost a little more per token than static's, every round
        run["priced_tokens_per_s"] = {"adaptive": 24.0 + run["round"] / 10, "static:ngram:8": 25.0, "plain": 18.0}[run["config"]]
    data["comparisons"] = [compare_rounds(data["runs"], c, 4) for c in data["configs"] if c != "adaptive"]
    (results_copy / "serve_batching_test_priced.json").write_text(json.dumps(data))

    section = make_results.render(results_copy, results_kit.dates_in(COMMITTED)).split(heading)[1].split("\n## ")[0]
    assert "| output tok/s | priced tok/s | E2EL p50 s |" in section and "*Priced tok/s*" in section
    first = next(line for line in section.splitlines() if line.startswith("| 1 | 4 | `adaptive` |"))
    assert "| 24.0 |" in first
    static = next(line for line in section.splitlines() if line.startswith("| 4 | `static:ngram:8` |") and "×" in line)
    assert static.rstrip().endswith("| 0.97× [0.96, 0.98] | behind in every round |")  # 24.0 .. 24.4 over 25
    plain = next(line for line in section.splitlines() if line.startswith("| 4 | `plain` |") and "×" in line)
    assert "| 1.34× [1.33, 1.36] | ahead in every round |" in plain


def test_a_served_shift_with_speed_timelines_leads_with_the_timeline_predictions(results_copy):
    path = results_copy / "serve_shift.json"
    data = json.loads(path.read_text())
    data["timeline_window_s"] = 30.0
    for i, run in enumerate(data["runs"]):
        run["speed_timeline"] = [[0.0, 0.8], [30.0, 1.25]]
        run["serving_overhead"] = {"request_s": 0.004, "step_s": 0.0007, "client_s": 0.031, "requests": 6, "steps": 280}
        if i == 0:  # served before the overhead was measured: borrowed
            run["serving_overhead"]["from"] = "the median of 3 runs' in x.json"
        for suffix in ("", "_per_prompt"):
            run["simulated_e2e_s" + suffix + "_timeline"] = {"p50": 1.11, "p95": 2.22}
            run["simulator_error" + suffix + "_timeline"] = {"p50": 0.04, "p95": -0.09}
            run.pop("simulated_e2e_s" + suffix + "_timeline_seeds", None)  # one replay: no spread shown
    path.write_text(json.dumps(data))

    section = make_results.render(results_copy, results_kit.dates_in(COMMITTED)).split(
        "## Served traffic through a shift")[1].split("\n## ")[0]
    first = section.split("At the window's mean speed")[0]
    # the timeline replay leads, with the serving overhead it priced
    assert first.count("| ×0.80-1.25 over 2 | 4 + 0.7/step + 31 ms | 1.11 (+4.0%) | 2.22 (-9.0%) |") == len(data["runs"]) - 1
    assert first.count("| 4 + 0.7/step + 31 ms † |") == 1 and "`--overhead-from`" in first
    assert "With the profile as calibrated:" in section and "30 s windows" in section


def test_a_served_shift_predicted_over_several_seeds_shows_the_replays_spread(results_copy):
    path = results_copy / "serve_shift.json"
    data = json.loads(path.read_text())
    data["sim_seeds"] = 3
    for run in data["runs"]:
        measured = run["e2el_s"]
        run["simulated_e2e_s_timeline_seeds"] = [{q: measured[q] * f for q in ("p50", "p95")} for f in (0.7, 1.0, 1.2)]
        run["simulated_e2e_s_timeline"] = {q: measured[q] for q in ("p50", "p95")}
        run["simulator_error_timeline"] = {"p50": 0.0, "p95": 0.0}
    path.write_text(json.dumps(data))

    section = make_results.render(results_copy, results_kit.dates_in(COMMITTED)).split(
        "## Served traffic through a shift")[1].split("\n## ")[0]
    assert "median of 3 replays" in section and "--sim-seeds 3" in section
    first = section.split("At the window's mean speed")[0]
    assert first.count("(+0.0%; -30.0% to +20.0%)") == 2 * len(data["runs"])  # p50 and p95 of every run, by kind


def test_the_packed_forward_section_follows_its_file_and_flags_a_disagreeing_argmax(results_copy):
    path = results_copy / "packed_forward.json"
    data = json.loads(path.read_text())
    section = lambda: make_results.render(results_copy, results_kit.dates_in(COMMITTED)).split(
        "## Padded against packed batch forwards")[1].split("\n## ")[0]
    assert "**differs**" not in section()
    data["results"][0]["checks"]["engine"]["argmax_agrees"] = False
    data["results"][0]["cases"][1]["median_ms"] = 999.25
    path.write_text(json.dumps(data))
    assert "**differs**" in section() and "| 999.2 |" in section()


def test_the_goodput_only_batched_run_renders_medians_of_its_rounds_and_its_command(results_copy):
    path = results_copy / "serve_batching_goodput.json"
    data = json.loads(path.read_text())
    section = lambda: make_results.render(results_copy, results_kit.dates_in(COMMITTED)).split(
        "## Batched serving without the bound on plain requests' slowdown")[1].split("\n## ")[0]
    assert "--plain-slowdown off" in section()
    runs = [r for r in data["runs"] if r["concurrency"] == 4 and r["config"] == "plain"]
    for run, value in zip(runs, (30.0, 40.0, 99.0)):
        run["output_tokens_per_s"] = value
    path.write_text(json.dumps(data))
    assert "| 4 | `plain` | 40.0 [30.0, 99.0] |" in section()


def test_the_tradeoff_run_renders_each_bound_and_its_comparisons_from_its_rounds(results_copy):
    path = results_copy / "serve_tradeoff.json"
    data = json.loads(path.read_text())
    section = lambda: make_results.render(results_copy, results_kit.dates_in(COMMITTED)).split(
        "## Throughput against tail latency, by the bound on plain requests' slowdown")[1].split("\n## ")[0]
    bounds = ",".join("off" if b is None else f"{b:g}" for b in data["bounds"])
    assert "`adaptive@0.15`" in section() and f"--concurrency {data['concurrency']} --bounds {bounds} " in section()
    runs = [r for r in data["runs"] if r["config"] == "adaptive@0.15"]
    assert len(runs) % 2 == 1  # an odd number of rounds: the median is the middle one
    for run, value in zip(runs, [30.0, 10.0, 99.0] + [30.0] * (len(runs) - 3)):
        run["output_tokens_per_s"] = value
    data["comparisons"][0]["throughput"].update(median=2.5, low=2.25, high=2.75)
    path.write_text(json.dumps(data))
    assert "| `adaptive@0.15` | 30.0 [10.0, 99.0] |" in section()
    assert "2.50× [2.25, 2.75]" in section()


def test_the_ceiling_section_follows_its_file_and_the_measured_run_beside_it(results_copy):
    path = results_copy / "suffix_ceiling.json"
    data = json.loads(path.read_text())
    section = lambda: make_results.render(results_copy, results_kit.dates_in(COMMITTED)).split(
        "### The most any controller could gain: repetitive JSON extraction")[1].split("\n### ")[0]
    n = len(data["collected"])
    assert f"{n} of {n} equal its `plain` outputs" in section()
    data["total_s"]["adaptive-suffix"] = data["total_s"]["adaptive"] / 1.61  # a ceiling 1.61x above adaptive's
    data["collected"][0]["output"] = data["collected"][0]["output"][:-1]  # no longer the run's output
    path.write_text(json.dumps(data))
    assert "over `adaptive`: **1.61×**" in section()
    assert f"{n - 1} of {n} equal its `plain` outputs" in section()


def test_the_goodput_alone_run_names_its_warm_profile_and_the_replicas_accuracy(results_copy):
    path = results_copy / "serve_batching_goodput.json"
    data = json.loads(path.read_text())
    data.update(profile="simulator/profiles/p.json", cap_warmed=True)
    for run in data["runs"]:  # p50 within 10%, p95 not, but for the first run: one case in two within
        run["simulator_error_timeline"] = {"p50": 0.03, "p95": -0.2}
    data["runs"][0]["simulator_error_timeline"] = {"p50": 0.12, "p95": -0.07}
    path.write_text(json.dumps(data))
    section = make_results.render(results_copy, results_kit.dates_in(COMMITTED)).split(
        "## Batched serving without the bound")[1].split("\n## ")[0]
    assert "starts from [`p.json`](../simulator/profiles/p.json)" in section
    assert "--plain-slowdown off" in section and "--profile simulator/profiles/p.json --calibrate" in section
    runs = len(data["runs"])
    assert f"within 10% in {runs} of {2 * runs} cases (-20.0% to +12.0%)" in section
