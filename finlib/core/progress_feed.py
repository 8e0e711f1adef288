"""Live progress of a long step, from the notebook's kernel to the terminal that runs the stage.

papermill runs each stage's notebook in a kernel whose output goes into the executed notebook, not
to the terminal: a bar drawn there leaves the person who typed `make reproduce` looking at one
line for many minutes. So the runner names a feed file in the environment (`FEED_ENV`) before the
kernel starts, and a `Meter` inside the kernel appends one plain line per update to it (at most
every `LINE_INTERVAL_S` seconds, plus the first and the last): what is being done, done/total,
rate and ETA. The runner follows the file (`FeedTail`) and prints each line as it comes. The same
lines go to the notebook's stderr, newline-terminated, so the executed notebook keeps them; the
runner asks nbclient to merge a cell's stream outputs, so they read as one block, not one
output per update.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO

from tqdm import tqdm

FEED_ENV = "FINLIB_PROGRESS_FEED"
LINE_INTERVAL_S = 10.0
LINE_FORMAT = "{desc}: {n_fmt}/{total_fmt} [{elapsed}<{remaining}, {rate_fmt}{postfix}]"


def feed_path() -> Path | None:
    """The feed file the runner follows, or None outside a runner (a notebook opened in JupyterLab)."""
    value = os.environ.get(FEED_ENV)
    return Path(value) if value else None


def publish(line: str) -> None:
    """Append one line to the feed; progress is never worth failing a stage over (a full disk,
    a removed run folder), so a write error drops the line."""
    path = feed_path()
    if path is None:
        return
    try:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(line.rstrip("\n") + "\n")
    except OSError:
        pass


class Meter:
    """done/total, rate and ETA of one long step as plain lines: to the feed (the runner's terminal)
    and to `file` (the notebook's stderr; None: the feed only). A line at the start, at most one
    every `interval` seconds, and the final one at `close()`: a short step leaves two lines."""

    def __init__(self, total: int, desc: str, unit: str = "item", file: IO[str] | None = None,
                 disable: bool = False, interval: float = LINE_INTERVAL_S,
                 clock: Callable[[], float] = time.monotonic):
        self.total, self.desc, self.unit, self.file = int(total), desc, unit, file
        self.disable, self.interval, self.clock = disable, interval, clock
        self.n, self.postfix, self.closed = 0, "", False
        self.t0 = clock()
        self.last_line_at: float | None = None
        self.last_n: int | None = None
        self._emit()

    def line(self) -> str:
        """The current line, in tqdm's own words for rate and ETA."""
        postfix = f", {self.postfix}" if self.postfix else ""
        return tqdm.format_meter(self.n, self.total or None, self.clock() - self.t0, prefix=self.desc,
                                 unit=self.unit, postfix=None, bar_format=LINE_FORMAT.replace("{postfix}", postfix))

    def update(self, n: int = 1, postfix: str | None = None) -> None:
        self.n += n
        if postfix is not None:
            self.postfix = postfix
        if self.last_line_at is None or self.clock() - self.last_line_at >= self.interval:
            self._emit()

    def close(self) -> None:
        """The final line (unless the last one already said it all)."""
        if not self.closed:
            self.closed = True
            self._emit(only_if_changed=True)

    def _emit(self, only_if_changed: bool = False) -> None:
        if self.disable:
            return
        if only_if_changed and self.n == self.last_n:
            return
        text = self.line()
        self.last_line_at, self.last_n = self.clock(), self.n
        publish(text)
        if self.file is not None:
            self.file.write(text + "\n")
            self.file.flush()


class FeedTail:
    """While a stage runs: name a fresh feed file in the environment (the kernel inherits it) and
    print every line appended to it, prefixed, to `stream`. On exit the rest is printed and the
    environment restored."""

    def __init__(self, path: Path, prefix: str = "", stream: IO[str] | None = None, poll_s: float = 0.5):
        self.path, self.prefix, self.poll_s = Path(path), prefix, poll_s
        self.stream = sys.stdout if stream is None else stream
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="progress-feed", daemon=True)
        self._previous: str | None = None
        self._offset = 0
        self._partial = ""

    def __enter__(self) -> FeedTail:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> FeedTail:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text("", encoding="utf-8")
        self._previous = os.environ.get(FEED_ENV)
        os.environ[FEED_ENV] = str(self.path)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Print what is left and restore the environment (idempotent)."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self._drain()
        if self._previous is None:
            os.environ.pop(FEED_ENV, None)
        else:
            os.environ[FEED_ENV] = self._previous

    def _follow(self) -> None:
        while not self._stop.wait(self.poll_s):
            self._drain()

    def _drain(self) -> None:
        """Print the complete lines appended since the last look (a half-written line waits)."""
        try:
            with self.path.open("r", encoding="utf-8") as fh:
                fh.seek(self._offset)
                chunk = fh.read()
                self._offset = fh.tell()
        except OSError:
            return
        *lines, self._partial = (self._partial + chunk).split("\n")
        for line in lines:
            if line.strip():
                self.stream.write(f"{self.prefix}{line}\n")
        self.stream.flush()
