"""Result files: checked before a long run, written atomically after it.

A benchmark or a calibration can run for many minutes; its output path is checked first
(``check_writable``), so a typo or a read-only folder fails in a second instead of after the
run. The file is then written to a temporary file in the same folder and renamed over the
target (``os.replace``, atomic on one filesystem): a reader never sees half a file, and a
failed write leaves any previous result in place. If the write still fails (the disk filled up
during the run), the results go to a file in the system's temporary folder, named in the error,
so the run is not lost.

Creating the probe and the temporary file is the test of writability: permission bits say
nothing for root, read-only mounts or a full disk.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import tempfile
from pathlib import Path

from adaptive_spec.errors import InvalidParameterError


def check_writable(path: str | Path, param: str) -> Path:
    """``path`` as a Path, once a file can be written there: it is not a folder, and its nearest
    existing ancestor is a folder where a file can be created (the folders in between are created
    at write time). Raises ``InvalidParameterError`` naming ``param`` otherwise. Creates nothing
    that outlives the call."""
    path = Path(path).expanduser()
    if path.is_dir():
        raise InvalidParameterError(param, str(path), "is a folder; give a file path")
    ancestor = path.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise InvalidParameterError(param, str(path), f"{ancestor} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=ancestor):
            pass
    except OSError as exc:
        raise InvalidParameterError(param, str(path), f"cannot create files in {ancestor} ({exc.strerror or exc})") from exc
    return path


def output_path(value: str) -> Path:
    """An ``argparse`` type for a script's ``--out``: checked when the arguments are parsed, so a
    bad path ends the script with a usage error before its run."""
    try:
        return check_writable(value, "out")
    except InvalidParameterError as exc:
        raise argparse.ArgumentTypeError(f"{value}: {exc.reason}") from exc


def write_text_atomic(path: str | Path, text: str, param: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``.

    On failure raise ``InvalidParameterError`` naming ``param``; the text is then saved in the
    system's temporary folder when possible, and the error says where."""
    path = Path(path).expanduser()
    try:
        _replace_with(path, text)
    except OSError as exc:
        saved = _save_elsewhere(path.name, text)
        where = f"; the results were saved to {saved}" if saved else "; the results could not be saved elsewhere either"
        raise InvalidParameterError(param, str(path), f"could not write it ({exc.strerror or exc}){where}") from exc
    return path


def write_json_atomic(path: str | Path, obj: object, param: str, indent: int | None = 1) -> Path:
    """``obj`` as JSON at ``path``, written as ``write_text_atomic`` does."""
    return write_text_atomic(path, json.dumps(obj, indent=indent) + "\n", param)


def _replace_with(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    # os.open applies the umask, so the result gets the permissions a plain write would give it
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _save_elsewhere(name: str, text: str) -> Path | None:
    try:
        fd, saved = tempfile.mkstemp(prefix="adaptive-spec-", suffix=f"-{name}")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return Path(saved)
    except OSError:
        return None
