"""A tqdm bar that shows what a long inference run needs: done/total, ETA, tokens/s, cost.

On a terminal it redraws twice a second. Anywhere else (an executed notebook under papermill or
nbval, a CI log) every redraw becomes a separate stream output, so there it redraws at most
every `QUIET_INTERVAL_S` seconds: a short run leaves its first and final lines only, a long one a
line every half minute.
"""
from __future__ import annotations

import sys
import time

from tqdm import tqdm

TTY_INTERVAL_S = 0.5
QUIET_INTERVAL_S = 30.0


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
        interval = redraw_interval(file)
        self.bar = tqdm(total=total, desc=desc, unit="call", disable=disable, file=file, mininterval=interval,
                        maxinterval=max(interval, 10.0), miniters=1 if interval == TTY_INTERVAL_S else None)
        self.t0 = time.perf_counter()
        self.tokens = 0
        self.cost = 0.0
        self.errors = 0

    def update(self, n: int, tokens: int, cost: float, errors: int = 0) -> None:
        self.tokens += tokens
        self.cost += cost
        self.errors += errors
        rate = self.tokens / max(time.perf_counter() - self.t0, 1e-9)
        self.bar.set_postfix_str(f"{rate:,.0f} tok/s, ${self.cost:.4f}, {self.errors} err", refresh=False)
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()
