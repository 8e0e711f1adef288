"""Content-addressed, crash-safe response store.

Why SQLite (stdlib, WAL, synchronous=FULL) rather than append-only JSONL + fsync:
- the key is the primary key, so "is this call already answered?" is an indexed lookup for
  670k keys instead of re-reading and de-duplicating a growing log on every start;
- an error row is *replaced* by the answer of a later retry (upsert) while an answer is never
  overwritten by an error, which a log can only express by replay rules;
- one transaction commits a whole group of results with one fsync of the WAL (group commit),
  so durability costs one fsync per group, not per call, and a crash leaves either the whole
  group or none of it (SQLite's atomic commit) -- never a torn line.
A result counts as done only after the transaction holding it has committed. Messages are not
stored (the key is their hash; the texts are in the stage-02 artifact), and nothing secret
ever is: rows hold model output, token counts, cost, latency and error text.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from finlib.core.sqlite_wal import connect_wal

SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    backend TEXT NOT NULL,
    mode TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'error')),
    raw_text TEXT,
    p_bullish REAL, p_neutral REAL, p_bearish REAL,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cost_usd REAL NOT NULL DEFAULT 0,
    latency_s REAL NOT NULL DEFAULT 0,
    truncated INTEGER NOT NULL DEFAULT 0,
    label_mass REAL,
    truncated_output INTEGER,
    reasoning_tokens INTEGER,
    error TEXT,
    attempts INTEGER NOT NULL DEFAULT 1,
    n_failures INTEGER NOT NULL DEFAULT 0,
    updated_at REAL NOT NULL
)
"""
# In-flight claims: a process takes a key here (atomically, with a lease) before it sends the call, so a
# second process on the same store waits for that answer instead of paying for it again. A lease runs
# out (the owner was killed) after about one request timeout; the owner renews it before each retry.
# `reserved_usd` is the call's worst-case cost while in flight: every process's budget counts it.
CLAIMS_SCHEMA = """
CREATE TABLE IF NOT EXISTS claims (
    key TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires REAL NOT NULL,
    reserved_usd REAL NOT NULL DEFAULT 0
)
"""
# What every stored call cost, in commit order: the budget shared by processes is summed from here
# incrementally (only rows newer than the last one counted), not over every stored answer per claim --
# that sum made each claim O(answers stored this run), ~30 answers/s after 30k answers.
SPEND_SCHEMA = """
CREATE TABLE IF NOT EXISTS spend (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    usd REAL NOT NULL
)
"""
_OWNERS: dict[int, str] = {}


def process_owner() -> str:
    """This process's name in claims: host, pid and a random token (computed per pid, so a forked
    child is a different owner from its parent)."""
    pid = os.getpid()
    if pid not in _OWNERS:
        _OWNERS[pid] = f"{socket.gethostname()}:{pid}:{uuid.uuid4().hex[:8]}"
    return _OWNERS[pid]


def run_owner() -> str:
    """One run's name in claims: this process's name and a token of the run's own, so that dropping
    the claims of a run that ended (`ResponseStore.release_owner`) leaves another run of this process
    alone, and two runs of one process wait for each other's keys like two processes do."""
    return f"{process_owner()}:{uuid.uuid4().hex[:8]}"


def owner_gone(owner: str) -> bool:
    """True when `owner` is a process of this host that no longer exists (killed): its claims are
    stale at once, so a rerun right after kill -9 need not wait out the lease. Other hosts' owners
    are trusted until their lease runs out."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:  # exists, owned by another user
        return False
    return False


COLUMNS = ("key", "model", "backend", "mode", "status", "raw_text", "p_bullish", "p_neutral", "p_bearish",
           "input_tokens", "output_tokens", "cost_usd", "latency_s", "truncated", "label_mass", "truncated_output",
           "reasoning_tokens", "error", "attempts")

# An answer is never replaced by an error; an error is replaced by anything newer.
UPSERT = f"""
INSERT INTO responses ({", ".join(COLUMNS)}, n_failures, updated_at)
VALUES ({", ".join("?" for _ in COLUMNS)}, ?, ?)
ON CONFLICT(key) DO UPDATE SET
    {", ".join(f"{c} = excluded.{c}" for c in COLUMNS[1:])},
    n_failures = responses.n_failures + excluded.n_failures,
    updated_at = excluded.updated_at
WHERE responses.status != 'ok'
"""


def make_key(backend: str, model_id: str, messages: list[dict], params: dict, prompt_version: str,
             mode: str, engine: dict | None = None, sample: int = 0) -> str:
    """sha256 of everything that determines a response (canonical JSON, sorted keys).

    `engine` holds what else fixes the output of a model we run ourselves (local backend: the
    weight source and the dtype); a server's model id already names its weights, so API keys
    leave it out (and keep the keys of stores made before it existed).
    `sample`: the index of an independent draw of the same call (`inference.samples_per_item`).
    Draw 0 is the paper's single draw and keeps the key it always had; only draws 1, 2, ... name
    their index, so each is stored (and paid) once and a run with more draws reuses the first.
    """
    payload = {"backend": backend, "model_id": model_id, "messages": messages, "params": params,
               "prompt_version": prompt_version, "mode": mode}
    if engine is not None:
        payload["engine"] = engine
    if sample < 0:
        raise ValueError(f"sample index must be >= 0, got {sample}")
    if sample > 0:
        payload["sample"] = int(sample)
    blob = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass
class Result:
    """One finished call: an answer (status ok) or a terminal failure (status error)."""

    key: str
    model: str
    backend: str
    mode: str
    status: str
    raw_text: str | None = None
    probs: dict[str, float] | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    truncated: bool = False
    error: str | None = None
    attempts: int = 1
    extra: dict = field(default_factory=dict)
    # the answer hit the output-token limit (finish_reason "length"); None when unknown (errors)
    truncated_output: bool | None = None
    # output tokens the server says went to reasoning (usage.completion_tokens_details); None when not reported
    reasoning_tokens: int | None = None

    @classmethod
    def for_request(cls, req: Request, **fields) -> Result:
        """The Result of `req`: its key, model, backend, mode and input truncation, plus `fields`
        (which may override any of them)."""
        return cls(**{"key": req.key, "model": req.model, "backend": req.backend, "mode": req.mode,
                      "truncated": req.truncated, **fields})

    def row(self) -> tuple:
        p = self.probs or {}
        return (self.key, self.model, self.backend, self.mode, self.status, self.raw_text,
                p.get("bullish"), p.get("neutral"), p.get("bearish"), int(self.input_tokens),
                int(self.output_tokens), float(self.cost_usd), float(self.latency_s), int(bool(self.truncated)),
                self.extra.get("label_mass"), None if self.truncated_output is None else int(self.truncated_output),
                None if self.reasoning_tokens is None else int(self.reasoning_tokens), self.error, int(self.attempts), int(self.status == "error"), time.time())


class StoreError(sqlite3.OperationalError):
    """The response store could not be opened or written (a full disk, no permission); the message
    names the store's file, which SQLite's own errors do not."""


_COST = COLUMNS.index("cost_usd")  # position of the cost in `Result.row()`
ANSWERED_CHUNK = 900  # keys per resume-check query (under SQLite's oldest bound-parameter limit, 999)


class ResponseStore:
    """SQLite response store; one connection, used from one thread (the writer)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        new = not self.path.exists()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._open()
        except (sqlite3.Error, OSError) as exc:  # e.g. a full disk: say which store, leave no empty file
            if new:
                for leftover in (self.path, *(self.path.with_name(self.path.name + s) for s in ("-wal", "-shm"))):
                    leftover.unlink(missing_ok=True)
            raise StoreError(f"cannot open the response store {self.path}: {exc}"
                             + (" (the new, empty store file was removed)" if new else "")) from exc
        self._claims_conn: sqlite3.Connection | None = None  # claims: own connection, any thread, one at a time
        self._claims_lock = threading.Lock()
        self._spend_seen: dict[float, tuple[int, float]] = {}  # since -> (last spend id counted, USD up to it)

    def _open(self) -> None:
        """Connect and create the tables (an existing store: add the columns it lacks)."""
        self.conn = connect_wal(self.path, timeout=60, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(SCHEMA)
        have = {row[1] for row in self.conn.execute("PRAGMA table_info(responses)")}
        for column, kind in (("label_mass", "REAL"), ("truncated_output", "INTEGER"), ("reasoning_tokens", "INTEGER")):
            if column not in have:  # stores made before the column existed (old rows: NULL = unknown)
                self.conn.execute(f"ALTER TABLE responses ADD COLUMN {column} {kind}")
        self.conn.execute(CLAIMS_SCHEMA)
        self.conn.execute(SPEND_SCHEMA)
        self.conn.execute("CREATE INDEX IF NOT EXISTS responses_updated ON responses (updated_at)")

    def _claims(self) -> sqlite3.Connection:
        """The claims connection (synchronous=NORMAL: a claim lost in a power cut only means a lease
        that never existed; answers keep the FULL durability of `conn`)."""
        if self._claims_conn is None:
            self._claims_conn = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=False)
            self._claims_conn.execute("PRAGMA synchronous=NORMAL")
        return self._claims_conn

    def claim(self, key: str, owner: str, lease_s: float, reserved_usd: float = 0.0,
              budget: tuple[float, float] | None = None) -> str:
        """Take `key` for `owner` before sending it: "mine" (taken or renewed), "answered" (an
        answer is stored: do not send), "busy" (another owner's lease is live: wait or skip) or
        "over_budget". One IMMEDIATE transaction, so two processes can never both get "mine".

        `budget` = (limit_usd, since): the budget counted from the store -- answers stored since
        `since` by any process plus every live reservation plus this one must stay within the
        limit (checked in the same transaction, so processes sharing a store share the cap)."""
        now = time.time()
        with self._claims_lock, self._naming("claim a call before sending it"):
            conn = self._claims()
            conn.execute("BEGIN IMMEDIATE")
            try:
                got = self._claim_in(conn, key, owner, now + lease_s, reserved_usd, budget, now)
            except BaseException:
                if conn.in_transaction:  # SQLite may have rolled back already (a full disk)
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            return got

    def _claim_in(self, conn: sqlite3.Connection, key: str, owner: str, expires: float, reserved_usd: float,
                  budget: tuple[float, float] | None, now: float) -> str:
        """`claim`'s decision and write, inside its transaction."""
        if conn.execute("SELECT 1 FROM responses WHERE key = ? AND status = 'ok'", (key,)).fetchone():
            return "answered"
        row = conn.execute("SELECT owner, expires FROM claims WHERE key = ?", (key,)).fetchone()
        if row is not None and row[0] != owner and row[1] > now and not owner_gone(row[0]):
            return "busy"
        if budget is not None and reserved_usd > 0 and self._spent(conn, budget[1], now) + reserved_usd > budget[0]:
            return "over_budget"
        conn.execute("INSERT OR REPLACE INTO claims (key, owner, expires, reserved_usd) VALUES (?, ?, ?, ?)",
                     (key, owner, expires, float(reserved_usd)))
        return "mine"

    def renew(self, key: str, owner: str, lease_s: float) -> None:
        """Extend `owner`'s lease on `key` (before a retry: the call is still being asked)."""
        with self._claims_lock, self._naming("renew a claim's lease"):
            self._claims().execute("UPDATE claims SET expires = ? WHERE key = ? AND owner = ?",
                                   (time.time() + lease_s, key, owner))

    def release(self, keys: Iterable[str], owner: str) -> None:
        """Drop `owner`'s claims on `keys` -- after their results are committed (answer first, then
        release: no moment where neither the answer nor the claim is visible)."""
        keys = list(keys)
        with self._claims_lock, self._naming("release the claims of stored results"):
            conn = self._claims()
            for i in range(0, len(keys), 500):
                chunk = keys[i:i + 500]
                conn.execute(f"DELETE FROM claims WHERE owner = ? AND key IN ({', '.join('?' for _ in chunk)})",
                             (owner, *chunk))

    def release_owner(self, owner: str) -> None:
        """Drop every claim of `owner` (its run ended, normally or by an error; `run_openai` calls it
        last): a claim whose release was missed, e.g. taken while its worker was cancelled, goes too."""
        with self._claims_lock, self._naming("release the claims of a run that ended"):
            conn = self._claims()
            conn.execute("DELETE FROM claims WHERE owner = ?", (owner,))
            self._drop_stale_claims(conn)

    @staticmethod
    def _drop_stale_claims(conn: sqlite3.Connection) -> None:
        """Drop claims nobody needs: on keys already answered (an owner killed between storing the
        answer and releasing its claim), of owners that are gone (killed on this host) and of expired
        leases. No rerun would ever send those keys again, so nothing else would drop them."""
        conn.execute("DELETE FROM claims WHERE expires < ? OR key IN (SELECT key FROM responses WHERE status = 'ok')",
                     (time.time(),))
        gone = [o for (o,) in conn.execute("SELECT DISTINCT owner FROM claims") if owner_gone(o)]
        for owner in gone:
            conn.execute("DELETE FROM claims WHERE owner = ?", (owner,))

    @contextmanager
    def _naming(self, operation: str) -> Iterator[None]:
        """SQLite's errors ("database or disk is full") name neither the file nor the step: say both."""
        try:
            yield
        except StoreError:
            raise
        except sqlite3.OperationalError as exc:
            raise StoreError(f"cannot {operation} in the response store {self.path} (claims table): {exc}") from exc

    def _spent(self, conn: sqlite3.Connection, since: float, now: float) -> float:
        """USD of calls stored since `since` plus live reservations (calls in flight, any process).
        The stored part reads only the spend rows added since the last call (ids grow in commit
        order and the caller holds the write lock, so no earlier id can still appear)."""
        last_id, total = self._spend_seen.get(since, (0, 0.0))
        new, top = conn.execute("SELECT COALESCE(SUM(CASE WHEN at >= ? THEN usd END), 0), MAX(id) FROM spend "
                                "WHERE id > ?", (since, last_id)).fetchone()
        total += float(new)
        self._spend_seen[since] = (last_id if top is None else int(top), total)
        held = conn.execute("SELECT COALESCE(SUM(reserved_usd), 0) FROM claims WHERE expires > ?", (now,)).fetchone()[0]
        return total + float(held)

    def spent_since(self, since: float) -> float:
        """What the budget check of `claim` counts: stored costs since `since` and live reservations."""
        with self._claims_lock:
            conn = self._claims()
            conn.execute("BEGIN IMMEDIATE")  # the same view as a claim: every committed spend row
            try:
                return self._spent(conn, since, time.time())
            finally:
                conn.execute("COMMIT")

    def put_many(self, results: Iterable[Result]) -> int:
        """Commit a group of results in one transaction; returns how many rows were written.
        When this returns, the group is on disk (WAL fsynced)."""
        rows = [r.row() for r in results]
        if not rows:
            return 0
        try:
            with self.conn:  # BEGIN ... COMMIT
                self.conn.execute("BEGIN IMMEDIATE")
                self.conn.executemany(UPSERT, rows)
                self.conn.executemany("INSERT INTO spend (at, usd) VALUES (?, ?)",
                                      [(row[-1], row[_COST]) for row in rows if row[_COST] > 0])  # updated_at last
        except sqlite3.OperationalError as exc:  # "database or disk is full" names no file: this one does
            raise StoreError(f"cannot write to the response store {self.path}: {exc} ({len(rows)} result(s) of "
                             "this group not stored; the store holds every earlier group)") from exc
        return len(rows)

    def _select(self, keys: list[str], where: str = "") -> dict[str, dict]:
        out: dict[str, dict] = {}
        cols = (*COLUMNS, "n_failures")
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            q = (f"SELECT {', '.join(cols)} FROM responses WHERE key IN ({', '.join('?' for _ in chunk)}) {where}")
            for row in self.conn.execute(q, chunk):
                out[row[0]] = dict(zip(cols, row))
        return out

    def get(self, keys: list[str]) -> dict[str, dict]:
        """Stored rows (answers and errors) for these keys."""
        return self._select(list(keys))

    def answered(self, keys: list[str]) -> set[str]:
        """Keys with a stored answer: these are never sent again.

        The resume check of every run: it asks for keys only, never whole rows (reading every
        stored answer into dicts took 8-16 s and ~2 GB at 674k keys)."""
        keys = list(keys)
        out: set[str] = set()
        for i in range(0, len(keys), ANSWERED_CHUNK):
            chunk = keys[i:i + ANSWERED_CHUNK]
            q = f"SELECT key FROM responses WHERE status = 'ok' AND key IN ({', '.join('?' for _ in chunk)})"
            out.update(k for (k,) in self.conn.execute(q, chunk))
        return out

    def count(self, status: str | None = None) -> int:
        if status is None:
            return self.conn.execute("SELECT COUNT(*) FROM responses").fetchone()[0]
        return self.conn.execute("SELECT COUNT(*) FROM responses WHERE status = ?", (status,)).fetchone()[0]

    def close(self) -> None:
        if self._claims_conn is not None:
            self._claims_conn.close()
        self.conn.close()

    def __enter__(self) -> ResponseStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class Request:
    """One call to make: its store key, the exact messages and parameters, and where it came
    from (`meta`: item_id, report_id, condition -- not part of the key). `messages` is None for
    a request planned without them (stage 03 at scale keys every call first and builds the
    messages again only for the calls it sends, so a plan never holds a copy of every report)."""

    key: str
    model: str
    backend: str
    mode: str
    messages: list[dict] | None
    params: dict
    truncated: bool = False
    input_tokens_est: int = 0
    meta: dict = field(default_factory=dict)
