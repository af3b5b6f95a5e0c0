"""Stores the commands cannot use as they are - not SQLite, read-only storage, locked, cut short by
a full disk - are one error line naming --db, never a traceback; a disk-full write is logged
with its real cause."""

import json
import logging
import os
import sqlite3
import subprocess
import sys
import time

import pytest
import typer
from typer.testing import CliRunner

from adaptive_spec import InvalidParameterError
from adaptive_spec.telemetry import store
from adaptive_spec.telemetry.cli import alerts_command, telemetry_app
from adaptive_spec.telemetry.writer import BackgroundWriter

runner = CliRunner()
_alerts_app = typer.Typer()
_alerts_app.command()(alerts_command)


def summary(path, *args):
    return runner.invoke(telemetry_app, ["summary", "--db", str(path), "--json", *args])


def alerts(path, *args):
    return runner.invoke(_alerts_app, ["--db", str(path), "--json", *args])


def assert_one_error(result, path, words):
    assert result.exit_code != 0
    error = result.exception
    assert isinstance(error, InvalidParameterError), repr(error)
    assert error.name == "db" and str(path) in str(error) and words in str(error) and "\n" not in str(error)


def decision(t):
    return ("decisions", ("r", t, "m", "k", "speculation", "ngram", "on", None, ""))


def request(t):
    cols = store.COLUMNS["requests"]
    row = dict.fromkeys(cols) | dict(run_id="r", request_id=1, model="m", key="k", policy="static", start_time=t - 1,
                                     end_time=t, prompt_tokens=4, new_tokens=8, ttft_s=0.1, decode_s=0.7, tpot_s=0.1,
                                     main_drafter="none")
    return ("requests", tuple(row[c] for c in cols))


@pytest.fixture
def store_path(tmp_path):
    """A store with one request, closed the way a run leaves it (WAL checkpointed, no -wal)."""
    path = tmp_path / "t.sqlite"
    conn = store.connect(path)
    store.write_batch(conn, [request(time.time()), decision(time.time())])
    conn.close()
    return path


@pytest.fixture
def short_lock_timeout(monkeypatch):
    """Commands wait out a lock for LOCK_TIMEOUT_S before they say so; short here, for speed."""
    monkeypatch.setattr("adaptive_spec.telemetry.access.LOCK_TIMEOUT_S", 0.3)


# -- not SQLite ------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", [summary, alerts])
def test_a_file_that_is_not_sqlite_is_one_error(tmp_path, command):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are not the rows you are looking for\n" * 200)
    assert_one_error(command(path), path, "not an SQLite database")


def test_the_real_cli_prints_one_line_and_no_traceback(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"not a database\n" * 200)
    out = subprocess.run([sys.executable, "-c", "from adaptive_spec.cli import main; main()", "telemetry", "summary",
                          "--db", str(path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: invalid db=") and str(path) in line and "not an SQLite database" in line


# -- read-only storage -----------------------------------------------------------------------------

def block_wal_index(path):
    """What read-only storage does to SQLite: the WAL index PATH-shm cannot be created. The tests
    run as root, for whom chmod blocks nothing, so the -shm path is made a dangling symlink into a
    directory that does not exist: every open of it fails, for any user."""
    shm = path.parent / f"{path.name}-shm"
    shm.unlink(missing_ok=True)  # an index left by an earlier read-only reader (no writer running)
    os.symlink(path.parent / "no-such-dir" / "x", shm)


def test_summary_reads_a_wal_store_on_read_only_storage(store_path):
    block_wal_index(store_path)
    out = summary(store_path)
    assert out.exit_code == 0, out.output
    (row,) = json.loads(out.stdout)
    assert (row["model"], row["requests"]) == ("m", 1)


def test_alerts_on_read_only_storage_lists_without_evaluating(store_path):
    block_wal_index(store_path)
    out = alerts(store_path)
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout) == [] and "cannot be written here" in out.stderr


def test_reader_falls_back_to_immutable_only_when_read_only_cannot_open(store_path, monkeypatch):
    from adaptive_spec.telemetry import access

    seen = []
    real = sqlite3.connect

    def connect(database, *args, **kwargs):
        seen.append(str(database).rsplit("?", 1)[-1])
        return real(database, *args, **kwargs)

    monkeypatch.setattr(access.sqlite3, "connect", connect)
    assert len(store.read_requests(store_path)) == 1
    assert seen == ["mode=ro"]
    block_wal_index(store_path)
    seen.clear()
    assert len(store.read_requests(store_path)) == 1
    assert seen == ["mode=ro", "immutable=1"]


# -- locks -----------------------------------------------------------------------------------------

def test_readers_do_not_need_the_write_lock_and_evaluating_waits_then_says_so(store_path, short_lock_timeout):
    holder = sqlite3.connect(str(store_path), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # a writer in another process, holding the write lock
    holder.execute("INSERT INTO decisions (run_id, time, model, key, kind) VALUES ('x', 0, 'm', 'k', 'speculation')")
    try:
        assert summary(store_path).exit_code == 0
        assert alerts(store_path, "--no-evaluate").exit_code == 0
        out = alerts(store_path)  # evaluating writes the alerts table: it needs the lock
        assert_one_error(out, store_path, "locked by another process")
        assert "--no-evaluate" in str(out.exception)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert alerts(store_path).exit_code == 0


@pytest.mark.parametrize("command", [summary, alerts])
def test_a_store_locked_against_readers_is_retried_then_one_error(store_path, short_lock_timeout, command):
    holder = sqlite3.connect(str(store_path), isolation_level=None)
    holder.execute("PRAGMA locking_mode=EXCLUSIVE")  # another process keeping the file to itself
    holder.execute("BEGIN EXCLUSIVE")
    holder.execute("INSERT INTO decisions (run_id, time, model, key, kind) VALUES ('x', 0, 'm', 'k', 'speculation')")
    try:
        assert_one_error(command(store_path), store_path, "locked by another process")
    finally:
        holder.execute("ROLLBACK")
        holder.close()


# -- cut short by a full disk ----------------------------------------------------------------------

def test_a_partial_schema_is_one_error_naming_the_missing_tables(tmp_path):
    path = tmp_path / "t.sqlite"
    conn = sqlite3.connect(str(path), isolation_level=None)
    # what the store's creation, statement by statement, left when the disk filled up
    conn.executescript("CREATE TABLE schema_info (name TEXT PRIMARY KEY, value TEXT NOT NULL);"
                       "CREATE TABLE requests (id INTEGER PRIMARY KEY, end_time REAL);")
    conn.close()
    assert_one_error(summary(path), path, "missing table(s) intervals")
    assert_one_error(alerts(path), path, "missing table(s) alerts, intervals, decisions")


def test_an_empty_or_foreign_sqlite_file_is_not_a_telemetry_store(tmp_path):
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    assert_one_error(summary(empty), empty, "not a telemetry store (it has no tables)")
    foreign = tmp_path / "app.sqlite"
    sqlite3.connect(str(foreign)).execute("CREATE TABLE users (id INTEGER)").connection.close()
    assert_one_error(alerts(foreign), foreign, "not a telemetry store (its tables are users)")


def fill_disk_at(conn):
    """A disk with no room left beyond the pages in use, as SQLite sees one: ``max_page_count``."""
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages}")


def test_creating_a_store_on_a_full_disk_leaves_no_partial_schema(tmp_path, monkeypatch):
    path = tmp_path / "t.sqlite"
    real = sqlite3.connect

    def on_a_full_disk(database, *args, **kwargs):
        conn = real(database, *args, **kwargs)
        if str(database) == str(path):
            conn.execute("PRAGMA max_page_count = 4")  # room for the first few tables only
        return conn

    monkeypatch.setattr(sqlite3, "connect", on_a_full_disk)
    with pytest.raises(sqlite3.OperationalError, match="full"):
        store.connect(path)
    monkeypatch.undo()
    tables = [r[0] for r in sqlite3.connect(str(path)).execute("SELECT name FROM sqlite_master WHERE type='table'")]
    assert tables == []  # all or nothing: the next run creates it whole


def test_a_disk_full_write_is_logged_with_its_real_cause(tmp_path, caplog):
    writer = BackgroundWriter(tmp_path / "t.sqlite")
    writer.put(*decision(time.time()))
    assert writer.flush() and writer.stats.written == 1
    fill_disk_at(writer._conn)
    with caplog.at_level(logging.WARNING, logger="adaptive_spec"):
        for _ in range(500):
            writer.put(*decision(time.time()))
        assert writer.flush()
    writer.close()
    assert writer.stats.write_errors >= 1 and writer.stats.written == 1
    (line,) = [m for m in caplog.messages if "write failed" in m]
    assert "database or disk is full" in line and "SQLITE_FULL" in line
    assert "cannot rollback" not in line


def test_a_row_sqlite_cannot_bind_drops_its_batch_and_the_writer_goes_on(tmp_path, caplog):
    # a traffic key from a request's JSON ("user": "\ud800") holds a lone surrogate, which SQLite
    # cannot encode: the UnicodeEncodeError used to end the writer thread, and every later row was lost
    writer = BackgroundWriter(tmp_path / "t.sqlite")
    table, row = decision(time.time())
    with caplog.at_level(logging.WARNING, logger="adaptive_spec"):
        writer.put(table, (*row[:3], "\ud800", *row[4:]))
        assert writer.flush()
    writer.put(*decision(time.time()))
    assert writer.flush()
    writer.close()
    assert writer.stats.write_errors == 1 and writer.stats.dropped_errors == 1 and writer.stats.written == 1
    assert any("write failed" in m and "UnicodeEncodeError" in m for m in caplog.messages)
