"""WAL mode for files that several processes open at once (the response store, the POS-tag cache):
SQLite refuses a racing switch to WAL at once, without waiting, so `connect_wal` retries it."""
from __future__ import annotations

import multiprocessing as mp
import sqlite3
import time

import pytest

from finlib.core.sqlite_wal import connect_wal


def _refusing(refusals: int, message: str = "database is locked"):
    """A connection class whose first `refusals` WAL switches fail as a racing one does."""
    class Refusing(sqlite3.Connection):
        attempts = 0

        def execute(self, sql, *args):
            if sql.startswith("PRAGMA journal_mode"):
                type(self).attempts += 1
                if type(self).attempts <= refusals:
                    raise sqlite3.OperationalError(message)
            return super().execute(sql, *args)

    return Refusing


def test_a_refused_switch_is_retried_until_it_is_made(tmp_path):
    factory = _refusing(3)
    conn = connect_wal(tmp_path / "s.sqlite", timeout=10, factory=factory)
    assert factory.attempts == 4
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_another_error_is_raised_at_once(tmp_path):
    factory = _refusing(1, "disk I/O error")
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        connect_wal(tmp_path / "s.sqlite", timeout=10, factory=factory)
    assert factory.attempts == 1


def test_a_switch_refused_past_the_timeout_raises(tmp_path):
    t0 = time.monotonic()
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        connect_wal(tmp_path / "s.sqlite", timeout=0.3, factory=_refusing(10**9))
    assert 0.3 <= time.monotonic() - t0 < 5


def _open_at(path: str, start: float, results) -> None:
    while time.time() < start:
        pass
    try:
        conn = connect_wal(path, timeout=30, isolation_level=None)
        conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
        results.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the parent, which asserts on it
        results.put(repr(exc))


def test_processes_opening_a_new_file_together_all_get_wal(tmp_path):
    """Four processes released at the same instant on each of 12 new files (without the retry, some of
    them fail with "database is locked")."""
    ctx = mp.get_context("fork")
    outcomes = []
    for trial in range(12):
        path = str(tmp_path / f"s{trial}.sqlite")
        results, start = ctx.Queue(), time.time() + 0.3
        procs = [ctx.Process(target=_open_at, args=(path, start, results)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        outcomes += [results.get(timeout=5) for _ in procs]
        assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert outcomes == ["ok"] * 48
