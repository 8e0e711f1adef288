"""One writer per run directory: two invocations of one run (a stage 07 rerun while stage 03 of the
same run is running) would both rewrite `runs/<run>/manifest.json` from what each read at its start,
so one of them loses the other's update (a failed stage shown `running`). The runner holds an
exclusive lock on `runs/<run>/.writer.lock` for the whole invocation; a second one is refused at
once, naming the holder's pid and command.

The lock is `flock` on an open file: the kernel drops it when the holder exits, however it exits
(kill -9 included), so a dead holder never blocks a rerun. The holder's pid, command, host and start
time are written into the file only to say who holds it.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

LOCK_NAME = ".writer.lock"


class RunLocked(RuntimeError):
    """Another process is running this run (it holds the run directory's writer lock)."""


def holder_info() -> dict[str, object]:
    """Who holds the lock: what the refusal of a second invocation names."""
    return {
        "pid": os.getpid(),
        "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        "host": socket.gethostname(),
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def describe_holder(path: Path) -> str:
    """The holder as its lock file says (pid, command, start), or that it has not written it yet."""
    try:
        info = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        info = {}
    if not info.get("pid"):
        return "another process (it has not yet written its pid)"
    return (
        f"pid {info['pid']} on {info.get('host', '?')} ({info.get('command', '?')}), started {info.get('started', '?')}"
    )


def refusal(run_dir: Path, path: Path) -> str:
    """The one line a second invocation stops with."""
    return (
        f"{run_dir} is in use by {describe_holder(path)}. One run directory has one writer at a time: wait for "
        f"that run to finish (or stop it), then rerun; nothing was run or written by this invocation (lock: {path})"
    )


@contextmanager
def one_writer(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s writer lock for the block, or raise RunLocked at once naming the holder."""
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunLocked(refusal(run_dir, path)) from None
        _write_holder(fd)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # released: no stale holder named later
    finally:
        os.close(fd)


def _write_holder(fd: int) -> None:
    """Record the holder in the lock file; a full disk only costs the refusal its details."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(holder_info()).encode(), 0)
    except OSError:
        pass
