"""Opening an SQLite file in WAL mode from several processes at once.

Switching a file to WAL needs an exclusive lock. When two connections race for it on a new file,
SQLite answers one of them "database is locked" at once, without calling the busy handler (waiting
could deadlock), so the connection's `timeout` does not help. The switch is therefore retried here
until the other process has made it; once a file is in WAL mode (a persistent property of the file)
the pragma returns at once.
"""
from __future__ import annotations

import random
import sqlite3
import time
from pathlib import Path


def connect_wal(path: str | Path, timeout: float = 60.0, **kwargs) -> sqlite3.Connection:
    """`sqlite3.connect(path, timeout, **kwargs)` with the file in WAL mode; raises after `timeout` s."""
    conn = sqlite3.connect(path, timeout=timeout, **kwargs)
    deadline = time.monotonic() + timeout
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                conn.close()
                raise
            time.sleep(random.uniform(0.005, 0.05))  # jittered: the racers do not retry in step
            continue
        if mode.lower() != "wal":
            conn.close()
            raise sqlite3.OperationalError(f"{path}: SQLite kept journal mode {mode!r} instead of WAL")
        return conn
