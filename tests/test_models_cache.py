"""The model cache: private folders, and no conversion temporary outlives its process.

No real model is loaded: the conversion is a fake that writes a small file. The signal tests run
that fake in a child process, wait until it is converting, and stop it with SIGTERM or SIGKILL.
"""

import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from adaptive_spec import models

REPO = Path(__file__).resolve().parents[1]
CHILD = """
import sys, time
from pathlib import Path
from adaptive_spec import models

def convert(gguf, out_dir):
    (out_dir / "model.safetensors").write_bytes(bytes(1 << 20))
    print("converting", flush=True)
    for _ in range(1200):  # bounded: the parent stops it long before
        time.sleep(0.05)

models.convert_gguf = convert
gguf = Path(sys.argv[2])
models.ensure_converted(models.BuiltinModel("fake", "fake", "fake-v1", lambda root: gguf), Path(sys.argv[1]))
"""


def fake(tmp_path):
    gguf = tmp_path / "fake.gguf"
    gguf.write_bytes(b"GGUF")

    def convert(_, out_dir: Path):
        (out_dir / "model.safetensors").write_bytes(b"weights")
        (out_dir / "config.json").write_text("{}")

    return models.BuiltinModel("fake", "fake", "fake-v1", lambda root: gguf), convert


def hidden(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def start_converting(tmp_path) -> subprocess.Popen:
    (tmp_path / "fake.gguf").write_bytes(b"GGUF")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(tmp_path / "cache"), str(tmp_path / "fake.gguf")],
                             stdout=subprocess.PIPE, text=True, env=env)
    line = child.stdout.readline()  # returns at the marker, or at EOF if the child failed
    assert line.strip() == "converting", f"child did not start converting (exit code {child.poll()})"
    return child


@pytest.mark.parametrize("umask", [0o000, 0o022])
def test_cache_folders_are_created_private_whatever_the_umask(tmp_path, monkeypatch, umask):
    builtin, convert = fake(tmp_path)
    monkeypatch.setattr(models, "convert_gguf", convert)
    old = os.umask(umask)
    try:
        folder = models.ensure_converted(builtin, tmp_path / "home" / "cache")
    finally:
        os.umask(old)
    for path in (tmp_path / "home", tmp_path / "home" / "cache", tmp_path / "home" / "cache" / "models"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    assert models.check_manifest(folder) is None


def test_ctrl_c_during_conversion_removes_the_temporary(tmp_path, monkeypatch):
    builtin, _ = fake(tmp_path)

    def interrupted(_, out_dir: Path):
        (out_dir / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(models, "convert_gguf", interrupted)
    with pytest.raises(KeyboardInterrupt):
        models.ensure_converted(builtin, tmp_path / "cache")
    assert hidden(tmp_path / "cache" / "models") == []


def test_sigterm_during_conversion_removes_the_temporary_and_still_ends_the_process(tmp_path):
    child = start_converting(tmp_path)
    assert len(hidden(tmp_path / "cache" / "models")) == 1  # the temporary exists while converting
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == -signal.SIGTERM
    assert hidden(tmp_path / "cache" / "models") == []


def test_a_temporary_left_by_sigkill_is_removed_at_the_next_start(tmp_path, monkeypatch):
    child = start_converting(tmp_path)
    child.kill()
    child.wait(timeout=60)
    assert len(hidden(tmp_path / "cache" / "models")) == 1  # SIGKILL cannot be caught: it is left behind
    builtin, convert = fake(tmp_path)
    monkeypatch.setattr(models, "convert_gguf", convert)
    folder = models.ensure_converted(builtin, tmp_path / "cache")
    assert hidden(tmp_path / "cache" / "models") == [] and models.check_manifest(folder) is None


def test_temporaries_of_live_processes_are_kept_and_unowned_old_ones_removed(tmp_path):
    folder = tmp_path / "models"
    folder.mkdir()
    key = models.BUILTIN_MODELS["smollm2"].cache_key
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = folder / f".{key}.tmp.{sleeper.pid}@{models._host()}.abc123"  # a concurrent conversion
        other_host = folder / f".{key}.tmp.1@another-host.example.abc123"  # cannot ask: kept while recent
        old_style = folder / f".{key}.k2j4h5g6"  # named before owners were recorded
        old_style_recent = folder / f".{key}.z9y8x7w6"
        unrelated = folder / ".not-ours"
        for path in (live, other_host, old_style, old_style_recent, unrelated):
            path.mkdir()
        long_ago = time.time() - models.UNOWNED_STALE_S - 60
        os.utime(old_style, (long_ago, long_ago))
        os.utime(unrelated, (long_ago, long_ago))
        assert models.remove_stale_temporaries(folder) == [old_style]
        sleeper.kill()
        sleeper.wait(timeout=60)
        assert models.remove_stale_temporaries(folder) == [live]  # its process is gone now
    finally:
        sleeper.kill()
        sleeper.wait(timeout=60)
    assert hidden(folder) == sorted(p.name for p in (other_host, old_style_recent, unrelated))
