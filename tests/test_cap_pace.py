"""benchmarks/cap_pace.py: a server's forwards replayed through the batch cap, with its pace and
without, and how far each prices a wider forward against a plain one from the machine's ratio."""

import json
from pathlib import Path

import pytest

from benchmarks.cap_pace import main, packed, replay, timed_forwards


def cost(rows: int, width: float, slots: int = 100) -> float:
    return 0.05 + 0.01 * rows + 0.004 * rows * width + (0.006 * rows if width > 1 else 0.0) + 1e-5 * rows * slots


PROFILE = str(Path(__file__).resolve().parents[1] / "simulator/profiles/smollm2_cpu_batched.json")
SAMPLES = [(rows, width, cost(rows, width), 100) for rows in (2, 4, 8) for width in (1, 1.5, 2, 3, 5, 9)]


def spell(key: str, speed: float, shapes, steps: int) -> list[dict]:
    return [{"key": key, "rows": rows, "width": width, "seconds": speed * cost(rows, width), "slots": 100}
            for i in range(steps) for rows, width in [shapes[i % len(shapes)]]]


def test_the_ratio_a_cap_without_pace_takes_from_two_spells_at_two_speeds_is_reported_off():
    """Plain traffic on a fast spell, drafting on a slow one, then an adaptive run at the speed
    between: without the pace the cap priced the run's wider forwards too dear against its plain
    ones; with it, near the machine's ratio."""
    shapes = [(4, 1), (4, 5), (4, 5), (4, 3)]
    # a server that has run a while first: its fits hold many forwards, not a profile's few (a young
    # fit learns fast against the pace, so a spell leaves more of its speed in it)
    timed = (spell("warm", 1.0, shapes, 400) + spell("plain-c4", 0.8, [(4, 1)], 300)
             + spell("static-c4", 1.25, [(4, 5), (4, 3)], 300) + spell("adaptive-c4", 1.0, shapes, 120))
    paced, bare = replay(timed, SAMPLES, 0.5, 4, 5.0), replay(timed, SAMPLES, 1.0, 4, 5.0)
    assert set(paced["adaptive_runs"]) == {"adaptive-c4"}  # only the run where both kinds interleave
    assert bare["adaptive_runs"]["adaptive-c4"]["ratio_error"] < 0.85
    assert paced["adaptive_runs"]["adaptive-c4"]["ratio_error"] == pytest.approx(1.0, abs=0.05)
    # the ratio at each run's start: the shapes' for the paced cap; taken from the speeds without it
    true = cost(4, 5) / cost(4, 1)
    assert paced["start_ratio"]["high"] / paced["start_ratio"]["low"] < 1.05
    assert bare["start_ratio"]["high"] > 1.3 * true
    assert paced["median_abs_log_error"] < bare["median_abs_log_error"]


def test_the_records_replay_from_a_file_and_an_empty_one_is_refused_by_name(tmp_path, capsys):
    import shutil

    profile = tmp_path / "profile.json"
    shutil.copy(PROFILE, profile)
    # a forward's rows share its times; the first row drafts 4 tokens on two forwards of three
    rows = [{"time": t * 0.1, "request_id": r, "key": "serve-batching-adaptive-c4-r0", "proposed": p, "accepted": 0,
             "draft_s": 0.001, "verify_s": 0.06 + (0.04 if t % 3 else 0.0), "context_len": 80 + t} for t in range(40)
            for r, p in ((1, 4 if t % 3 else 0), (2, 0), (3, 0))]
    forwards = tmp_path / "forwards.json"
    forwards.write_text(json.dumps({"source": "test", **packed(timed_forwards(rows))}))
    out = tmp_path / "out.json"
    main([str(forwards), "--profile", str(profile), "--rows", "4", "--out", str(out)])
    result = json.loads(out.read_text())
    assert set(result["variants"]) == {"with pace", "without"}
    assert result["variants"]["with pace"]["forwards"] == 40
    assert set(result["variants"]["without"]["adaptive_runs"]) == {"serve-batching-adaptive-c4-r0"}
    forwards.write_text(json.dumps(packed([])))
    with pytest.raises(SystemExit):
        main([str(forwards), "--profile", str(profile), "--out", str(out)])
    assert f"forwards={str(forwards)!r}" in capsys.readouterr().err
    forwards.write_text(json.dumps({"forwards": [{"key": "k"}]}))  # not what --forwards-out writes
    with pytest.raises(SystemExit):
        main([str(forwards), "--profile", str(profile), "--out", str(out)])
    assert f"forwards={str(forwards)!r}" in capsys.readouterr().err


@pytest.mark.parametrize("args, named", [
    (["--rows", "1"], "rows=1"), (["--width", "1"], "width=1"), (["--max-batch", "1"], "max_batch=1"),
    (["--profile", "missing.json"], "profile='missing.json'"),
])
def test_bad_arguments_are_refused_by_name(args, named, tmp_path, capsys):
    forwards = tmp_path / "forwards.json"
    forwards.write_text(json.dumps(packed([{"key": "k", "time": 0.0, "rows": 2, "width": 3.0, "seconds": 0.05,
                                            "slots": 10}])))
    with pytest.raises(SystemExit):
        main([str(forwards), "--profile", PROFILE, "--out",
              str(tmp_path / "out.json"), *args])
    assert named in capsys.readouterr().err


def test_a_forwards_file_that_is_not_json_is_refused_by_name(tmp_path, capsys):
    forwards = tmp_path / "forwards.json"
    forwards.write_text("not json")
    with pytest.raises(SystemExit):
        main([str(forwards), "--profile", PROFILE, "--out", str(tmp_path / "o.json")])
    assert f"forwards={str(forwards)!r}" in capsys.readouterr().err
