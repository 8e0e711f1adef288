"""Crash safety of stage 03: SIGKILL at seeded random moments while it sends, then resume.

The stub server lives in the test process, so its books survive every kill: after each trial no
stored answer is lost, no call whose answer was stored before the trial is sent again (counted at
the server), and the resumed run's predictions equal an uninterrupted run's (all columns but
`latency_s`, the wall-clock time of each call, which no two runs share)."""
from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import sqlite3
import time
from pathlib import Path

import pandas as pd
import pytest
from llm_helpers import api_record, write_registry

from finlib.core.artifacts import read_frame, write_frame
from finlib.core.config import load_run
from finlib.rehearsal.stub_server import FaultPlan, ThreadedStub

TRIALS = 10
N_REPORTS = 60  # x 2 conditions = 120 calls


def _child(root: Path) -> None:
    """Stage 03 in a forked process (everything already imported: a kill test, not an import test)."""
    from finlib.finbias.inference.stage import run as run_inference

    os.environ["CRASH_TEST_KEY"] = "k"
    run_inference(load_run("crash", root=root))


def _conditions() -> pd.DataFrame:
    rows = []
    for i in range(N_REPORTS):
        for cond in ("original", "no_rating"):
            rows.append({"item_id": f"R{i:03d}:{cond}", "report_id": f"R{i:03d}", "condition": cond,
                         "text": (f"We rate Firm {i} a Buy. Orig item {i:03d}x." if cond == "original"
                                  else f"Sales rose. Nr item {i:03d}x."),
                         "analyst_rating": "bullish", "fake_rating": None, "reference_rating": "bullish",
                         "status": "ok", "skip_reason": None})
    return pd.DataFrame(rows)


def _root(tmp: Path, name: str, repo_root: Path, base_url: str) -> Path:
    root = tmp / name
    (root / "params").mkdir(parents=True)
    for f in (repo_root / "params").glob("*.yaml"):
        shutil.copy(f, root / "params" / f.name)
    (root / "pyproject.toml").write_text("[project]\nname='crash'\n")
    registry = write_registry(root, api_record("stub-api", base_url, "CRASH_TEST_KEY", concurrency=4))
    (root / "params" / "crash.yaml").write_text(
        "extends: smoke.yaml\n"
        f"inference: {{registry: {registry}, models: [stub-api], budget_usd: 1.0, progress: false}}\n")
    write_frame(load_run("crash", root=root), "conditions", _conditions())
    return root


def _answered(root: Path) -> set[str]:
    db = root / "data" / "interim" / "responses.sqlite"
    if not db.is_file():
        return set()
    with sqlite3.connect(db) as conn:
        return {k for (k,) in conn.execute("SELECT key FROM responses WHERE status = 'ok'")}


def _item_of(content: str) -> str:
    """The condition a request's last message came from (the texts carry a unique tag)."""
    kind, i = re.search(r"(Orig|Nr) item (\d{3})x", content).groups()
    return f"R{i}:{'original' if kind == 'Orig' else 'no_rating'}"


def _start(root: Path) -> mp.Process:
    proc = mp.get_context("fork").Process(target=_child, args=(root,), daemon=True)
    proc.start()
    return proc


def _canonical(root: Path) -> tuple[str, str]:
    cfg = load_run("crash", root=root)
    pred = read_frame(cfg, "predictions").drop(columns="latency_s")
    report = json.loads((cfg.processed_dir / "inference_report.json").read_text())
    return pred.to_csv(index=False), json.dumps([report["usage"], report["counts"], report["generate_parse"]])


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume(tmp_path: Path, repo_root: Path):
    """Drill: kill -9 during stage 03, then resume (ten seeded moments)."""
    rng = random.Random(15)
    # answers take 20 ms each (4 at a time): the stage spends >= 0.6 s sending, long enough to be hit
    with ThreadedStub(faults=FaultPlan(rate=1.0, weights={"slow": 1.0}, slow_s=0.02)) as stub:
        ref = _root(tmp_path, "reference", repo_root, stub.base_url)
        proc = _start(ref)
        proc.join()
        assert proc.exitcode == 0
        send_s = stub.stub.log[-1][0] - stub.stub.log[0][0]  # first to last request at the server
        n_calls = stub.stub.n_requests
        assert n_calls == 2 * N_REPORTS
        key_of = dict(zip(*read_frame(load_run("crash", root=ref), "predictions")[["item_id", "cache_key"]]
                          .to_numpy().T))

        root = _root(tmp_path, "crashed", repo_root, stub.base_url)
        outcomes = []
        while sum(rc == -signal.SIGKILL for rc, _ in outcomes) < TRIALS and len(outcomes) < 3 * TRIALS:
            before = _answered(root)
            sent_before = dict(stub.stub.attempts)
            base = stub.stub.n_requests
            proc = _start(root)
            while stub.stub.n_requests == base and proc.is_alive():
                time.sleep(0.002)
            # a seeded moment inside what is left of the sending phase
            time.sleep(rng.uniform(0.0, 0.6) * send_s * (n_calls - len(before)) / n_calls)
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)
            proc.join()
            after = _answered(root)
            assert before <= after, "a stored answer was lost"
            sent_now = {key_of[_item_of(t)] for t, n in stub.stub.attempts.items() if n > sent_before.get(t, 0)}
            assert not sent_now & before, "a call whose answer was stored was sent again"
            # re-sent later: only calls in flight or answered-but-not-yet-committed when killed
            # (concurrency 4 in flight + the writer's queue of 4 x concurrency)
            assert len(sent_now) - (len(after) - len(before)) <= 5 * 4
            outcomes.append((proc.exitcode, len(after) - len(before)))
            if len(after) == n_calls:
                break
        kills = [gained for rc, gained in outcomes if rc == -signal.SIGKILL]
        assert len(kills) >= TRIALS, outcomes
        assert sum(1 for gained in kills if gained > 0) >= 3  # kills really landed mid-run

        left = n_calls - len(_answered(root))
        base = stub.stub.n_requests
        proc = _start(root)
        proc.join()
        assert proc.exitcode == 0
        assert stub.stub.n_requests - base == left  # the resume sent only what was not stored
        lost = stub.stub.n_requests - n_calls - n_calls  # sends beyond one per call in the crashed root
        assert 0 <= lost <= 5 * 4 * len(outcomes)
        assert _answered(root) == set(key_of.values())
    assert _canonical(root) == _canonical(ref)
    print(f"\n(exit code, answers stored) per trial: {outcomes}; sending phase {send_s:.2f} s; "
          f"{n_calls} calls; {lost} re-sent after kills (in flight or not yet committed)")

