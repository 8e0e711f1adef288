"""Benchmark: the herding card's wall time on the embedded default (`make card` without arguments).

Runs `finlib.pipeline.card.build_card` for the embedded model on the embedded synthetic reports under
its own run name (`bench-card-<n>`) and records the wall seconds and the seconds per stage. Answers already in
the response store are not asked again, so a second run times the resume path; the machine's load goes beside
the figures. Usage: `python benchmarks/bench_card.py [--n 200]`; writes benchmarks/results/card_default.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import machine, write_result

from finlib.pipeline.card import DEFAULT_REPORTS, CardRequest, build_card


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=DEFAULT_REPORTS, help="reports on the card")
    args = ap.parse_args()
    before = machine()
    req = CardRequest(name=f"bench-card-{args.n}", n_reports=args.n)
    start = time.perf_counter()
    index = build_card(req, confirm=None)
    wall = time.perf_counter() - start
    card = json.loads(index.with_name("card.json").read_text(encoding="utf-8"))
    path = write_result(
        "card_default",
        {
            "n_reports": args.n,
            "wall_seconds": round(wall, 1),
            "wall_minutes": round(wall / 60, 2),
            "stage_seconds": card["seconds"],
        },
        before,
    )
    print(f"card of {args.n} reports in {wall / 60:.1f} min; written {path}")


if __name__ == "__main__":
    main()
