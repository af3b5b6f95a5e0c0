"""Opening the telemetry store, and one clear error for each way that can go wrong.

Two ways in:

- ``open_writer`` (the background writer, the webhook outbox, ``alerts`` evaluating its rules):
  read-write, creating the file and any missing directories. Directories are created 0700 and a
  new store file 0600 whatever the umask: the store names the deployment's models and traffic
  keys, which other users of the machine have no reason to read.
- ``open_reader`` (``telemetry summary``, ``alerts``, the dashboard, the simulator): read-only,
  so a reader never needs the write lock, nor write access to the storage. It tries, in order::

      file:PATH?mode=ro        a read-only connection; reads a WAL store while a writer runs
      file:PATH?immutable=1    when even that cannot open: read-only storage on which SQLite
                               cannot create the WAL index (PATH-shm) it needs to read WAL

  ``immutable=1`` takes no locks and ignores the WAL file, which is safe only because nothing
  can write to read-only storage; rows still in an un-checkpointed PATH-wal are then not seen,
  and the reader logs one line saying so.

Every failure is a ``StoreError`` naming the path, with a ``kind`` a caller can act on
(``alerts`` lists without evaluating when the store is ``readonly``):

=============  =========================================================================
``missing``    no file there
``not_sqlite`` a directory, or a file that is not an SQLite database
``corrupt``    an SQLite file whose pages are damaged
``incomplete`` tables missing: a store whose creation was cut short (a full disk), or
               another application's database
``locked``     another connection held the lock past ``LOCK_TIMEOUT_S``
``readonly``   writing is impossible (read-only file or storage)
``full``       the disk is full
``unreadable`` any other SQLite or OS error
=============  =========================================================================
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from adaptive_spec.errors import AdaptiveSpecError

log = logging.getLogger("adaptive_spec.telemetry")

# how long a command waits for another process's lock before it says so; a writer holds the
# store's lock for one batch (well under a second), so 5 s means something else holds it
LOCK_TIMEOUT_S = 5.0

_BUSY = {"SQLITE_BUSY", "SQLITE_LOCKED"}
_READONLY = {"SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH"}


class StoreError(AdaptiveSpecError, sqlite3.DatabaseError):
    """The store at ``path`` cannot be used; ``reason`` says why in one line, ``kind`` for code.

    An ``sqlite3.DatabaseError`` too, so callers that caught SQLite's errors still catch these.
    """

    def __init__(self, path: str | Path, kind: str, reason: str) -> None:
        self.path, self.kind, self.reason = Path(path), kind, reason
        super().__init__(f"telemetry store {path}: {reason}")


def _name(exc: BaseException) -> str:
    return getattr(exc, "sqlite_errorname", "") or ""


def classify(path: str | Path, exc: BaseException) -> StoreError:
    """The ``StoreError`` for an SQLite or OS error met on the store at ``path``."""
    if isinstance(exc, StoreError):
        return exc
    name, text = _name(exc), str(exc)
    primary = "_".join(name.split("_")[:2])  # SQLITE_BUSY_RECOVERY -> SQLITE_BUSY
    if primary == "SQLITE_NOTADB" or "file is not a database" in text:
        return StoreError(path, "not_sqlite", "not an SQLite database (is --db pointing at the right file?)")
    if primary == "SQLITE_CORRUPT" or "malformed" in text:
        return StoreError(path, "corrupt", f"the database is damaged ({text}); move it aside and start a new store")
    if primary in _BUSY or "locked" in text:
        return StoreError(path, "locked", f"locked by another process for more than {LOCK_TIMEOUT_S:g} s; "
                                          "try again when it has finished writing")
    # SQLITE_IOERR_SHMOPEN & co: the WAL index (PATH-shm) cannot be created, as on read-only storage
    if primary in _READONLY or name.startswith("SQLITE_IOERR_SHM") or isinstance(exc, PermissionError) \
            or "readonly" in text or "unable to open" in text:
        return StoreError(path, "readonly", f"cannot be written here ({text})")
    if primary == "SQLITE_FULL" or "disk is full" in text:
        return StoreError(path, "full", f"the disk is full ({text})")
    return StoreError(path, "unreadable", f"{type(exc).__name__}: {text}")


# -- writing ---------------------------------------------------------------------------------------

def make_private_dirs(directory: Path) -> None:
    """Create ``directory`` and its missing parents as 0700; existing ones are left as they are.

    ``Path.mkdir(mode=...)`` is filtered by the umask and applies only to the last component,
    hence the explicit chmod of each directory created here.
    """
    missing = []
    d = Path(directory)
    while not d.exists():
        missing.append(d)
        if d.parent == d:
            break
        d = d.parent
    for d in reversed(missing):
        try:
            os.mkdir(d, 0o700)
        except FileExistsError:
            continue  # another process made it first: theirs to set
        os.chmod(d, 0o700)


def _create_private_file(path: Path) -> None:
    if path.exists():
        return  # not even an open(O_CREAT): on read-only storage that fails before SQLite can read
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    os.fchmod(fd, 0o600)  # SQLite creates its -wal and -shm files with the database's mode
    os.close(fd)


def open_writer(path: str | Path, timeout_s: float = 0.5) -> sqlite3.Connection:
    """A read-write connection, creating the file (0600) and its directories (0700) if missing.

    Raises the OS or SQLite error as it is (the writer counts it); ``classify`` names it.
    ``check_same_thread=False``: the writer opens it once and keeps it in its own thread.
    """
    path = Path(path)
    make_private_dirs(path.parent)
    _create_private_file(path)
    conn = sqlite3.connect(str(path), timeout=timeout_s, check_same_thread=False, isolation_level=None)
    conn.row_factory = sqlite3.Row
    return conn


# -- reading ---------------------------------------------------------------------------------------

def _uri(path: Path, option: str) -> str:
    return f"file:{quote(str(path.resolve()))}?{option}"


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def _check_tables(path: Path, present: set[str], needed: tuple[str, ...]) -> None:
    missing = [t for t in needed if t not in present]
    if not missing:
        return
    if "schema_info" not in present:
        what = "it has no tables" if not present else f"its tables are {', '.join(sorted(present))}"
        raise StoreError(path, "incomplete", f"not a telemetry store ({what})")
    raise StoreError(path, "incomplete", f"incomplete telemetry store, missing table(s) {', '.join(missing)} "
                                         "(its creation was cut short, e.g. by a full disk); the next run "
                                         "writing telemetry there completes it")


def open_reader(path: str | Path, tables: tuple[str, ...] = ()) -> sqlite3.Connection:
    """A read-only connection to an existing store holding ``tables``; ``StoreError`` otherwise.

    Locks are waited for up to ``LOCK_TIMEOUT_S`` (SQLite's busy handler, then this loop for the
    cases the handler does not cover) before one ``locked`` error.
    """
    path = Path(path)
    if not path.exists():
        raise StoreError(path, "missing", "no telemetry store there yet (generate with --telemetry sqlite:PATH first)")
    if path.is_dir():
        raise StoreError(path, "not_sqlite", "a directory, not an SQLite database file")
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    cause = ""
    for option in ("mode=ro", "immutable=1"):
        while True:
            conn = None
            try:
                conn = sqlite3.connect(_uri(path, option), uri=True, isolation_level=None, check_same_thread=False,
                                       timeout=max(deadline - time.monotonic(), 0.0))
                conn.row_factory = sqlite3.Row
                present = _tables(conn)  # the first read: a non-SQLite file or a lock shows here
                _check_tables(path, present, ("schema_info",) + tuple(tables))
                if option == "immutable=1":
                    _warn_unseen_wal(path)
                return conn
            except (sqlite3.Error, OSError) as exc:
                if conn is not None:
                    conn.close()
                error = classify(path, exc)
                if error.kind == "locked" and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                if error.kind != "readonly":
                    raise error from None
                cause = f"{type(exc).__name__}: {exc}"
                break
    raise StoreError(path, "unreadable", f"cannot be opened for reading, even as immutable ({cause})")


def _warn_unseen_wal(path: Path) -> None:
    wal = Path(f"{path}-wal")
    if wal.exists() and wal.stat().st_size > 0:
        log.warning("telemetry store %s is on read-only storage: read without its write-ahead log %s, "
                    "so the rows written last may be missing", path, wal)


def read_query(path: str | Path, sql: str, args: tuple | list = (), tables: tuple[str, ...] = ()) -> list[dict]:
    """Rows of one query as dicts, read-only, with lock waits and errors as ``open_reader``."""
    deadline = time.monotonic() + LOCK_TIMEOUT_S
    conn = open_reader(path, tables)
    try:
        while True:
            try:
                return [dict(row) for row in conn.execute(sql, args)]
            except sqlite3.Error as exc:
                error = classify(path, exc)
                if error.kind == "locked" and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                raise error from None
    finally:
        conn.close()
