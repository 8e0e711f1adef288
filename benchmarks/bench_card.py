"""Benchmark: the herding card's wall time on the embedded default (`make card` without arguments).

Runs `finlib.pipeline.card.build_card` for the embedded model on the embedded synthetic reports under its own
run name (`bench-card-<n>`) and records the wall seconds, the seconds per stage, and how many of stage 03's
requests were answered by the model in this run (the rest came from the response store: a rerun times the resume
path, and the file says which). From stage 03's seconds per answered request it also writes what the paid stage
would take at the folder default (`DEFAULT_REPORTS`), marked as a projection, so the choice of the embedded size
can be read from one file. The machine's CPU flags and load go beside the figures: on a shared, loaded machine the
same run takes several times longer than on an idle one.

Usage: `python benchmarks/bench_card.py [--n N]` (default: the embedded default's size); writes
benchmarks/results/card.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import machine, write_result

from finlib.core.config import load_run
from finlib.llm.store import ResponseStore
from finlib.pipeline.card import DEFAULT_REPORTS, EMBEDDED_MODEL, CardRequest, build_card, default_reports


def stored_answers() -> int:
    """Rows in the response store the default params name (the card's params extend them)."""
    cfg = load_run("default", make_dirs=False)
    path = cfg.path(cfg.params["inference"]["store"])
    if not path.exists():
        return 0
    with ResponseStore(path) as store:
        return store.count()


def stage03_figures(n: int, requests: int, answered: int, stage_seconds: dict) -> dict:
    """Seconds per answered request and the paid stage projected to DEFAULT_REPORTS reports."""
    if answered == 0:
        return {"stage03_seconds_per_answered_request": None, "projected": None}
    per_request = stage_seconds["03"] / answered
    requests_per_report = requests / n
    projected = per_request * requests_per_report * DEFAULT_REPORTS
    return {
        "stage03_seconds_per_answered_request": round(per_request, 2),
        "projected": {
            "what": f"stage 03 alone at {DEFAULT_REPORTS} reports, from this run's seconds per answered request",
            "n_reports": DEFAULT_REPORTS,
            "stage03_minutes": round(projected / 60, 1),
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=default_reports(None), help="reports on the card")
    args = ap.parse_args()
    before = machine()
    stored_before = stored_answers()
    req = CardRequest(name=f"bench-card-{args.n}", n_reports=args.n)
    start = time.perf_counter()
    index = build_card(req, confirm=None)
    wall = time.perf_counter() - start
    answered = stored_answers() - stored_before
    card = json.loads(index.with_name("card.json").read_text(encoding="utf-8"))
    requests = int(card["usage"]["requests"])
    path = write_result(
        "card",
        {
            "model": EMBEDDED_MODEL,
            "n_reports": args.n,
            "embedded_default": args.n == default_reports(None),
            "requests": requests,
            "answered_in_this_run": answered,
            "wall_seconds": round(wall, 1),
            "wall_minutes": round(wall / 60, 2),
            "stage_seconds": card["seconds"],
            **stage03_figures(args.n, requests, answered, card["seconds"]),
        },
        before,
    )
    print(f"card of {args.n} reports in {wall / 60:.1f} min ({answered} of {requests} requests answered); {path}")


if __name__ == "__main__":
    main()
