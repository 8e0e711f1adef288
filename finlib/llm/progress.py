"""A tqdm bar that shows what a long inference run needs: done/total, ETA, tokens/s, cost."""
from __future__ import annotations

import time

from tqdm import tqdm


class Progress:
    """Counts only committed results (the caller updates after the store commit)."""

    def __init__(self, total: int, desc: str, disable: bool = False):
        self.bar = tqdm(total=total, desc=desc, unit="call", disable=disable, mininterval=0.5)
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
