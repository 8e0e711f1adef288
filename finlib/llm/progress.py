"""What a long inference run needs to show: done/total, ETA, tokens/s, cost.

On a terminal it is a tqdm bar redrawn twice a second. Anywhere else (an executed notebook under
papermill or nbval, a CI log) a redraw would become a separate stream output, so there it writes
plain lines instead (`finlib.core.progress_feed.Meter`): the first, at most one every
`QUIET_INTERVAL_S` seconds, and the final one. Under the runner the same lines also reach the
terminal that runs the stage (the runner follows the feed file they are appended to).
"""
from __future__ import annotations

import sys
import time

from tqdm import tqdm

from finlib.core.progress_feed import LINE_INTERVAL_S, Meter

TTY_INTERVAL_S = 0.5
QUIET_INTERVAL_S = LINE_INTERVAL_S


def redraw_interval(stream=None) -> float:
    """Seconds between redraws: frequent on a terminal, rare when output is captured."""
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        tty = bool(isatty()) if callable(isatty) else False
    except (ValueError, OSError):  # a closed or detached stream
        tty = False
    return TTY_INTERVAL_S if tty else QUIET_INTERVAL_S


class Progress:
    """Counts only committed results (the caller updates after the store commit)."""

    def __init__(self, total: int, desc: str, disable: bool = False, file=None):
        stream = sys.stderr if file is None else file
        self.tty = redraw_interval(stream) == TTY_INTERVAL_S
        # a terminal gets the live bar; captured output gets plain lines. Both feed the runner.
        self.bar = tqdm(total=total, desc=desc, unit="call", disable=disable or not self.tty, file=stream,
                        mininterval=TTY_INTERVAL_S, miniters=1) if self.tty else None
        self.meter = Meter(total, desc, unit="call", file=None if self.tty else stream, disable=disable,
                           interval=QUIET_INTERVAL_S)
        self.t0 = time.perf_counter()
        self.tokens = 0
        self.cost = 0.0
        self.errors = 0

    def update(self, n: int, tokens: int, cost: float, errors: int = 0) -> None:
        self.tokens += tokens
        self.cost += cost
        self.errors += errors
        rate = self.tokens / max(time.perf_counter() - self.t0, 1e-9)
        postfix = f"{rate:,.0f} tok/s, ${self.cost:.4f}, {self.errors} err"
        if self.bar is not None:
            self.bar.set_postfix_str(postfix, refresh=False)
            self.bar.update(n)
        self.meter.update(n, postfix)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        self.meter.close()
