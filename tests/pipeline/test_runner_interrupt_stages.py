"""Ctrl-C and kill -9 to the runner during stage 03 with the embedded local model (SmolLM2 label
scoring, torch in the kernel's main thread) and during stage 05 (DPO: the teacher's calls, training).

A real runner process and a real kernel run the stage's own code (`finlib.finbias.inference.stage.run`,
`finlib.finbias.dpo.stage.run`) on smoke-sized inputs; the test reads what the user sees (exit code,
the stderr line, the manifest) and what is stored (the response store's rows, counted before and after)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from test_runner import _notebook

from finlib.core.artifacts import write_frame
from finlib.core.config import load_run

ROOT = Path(__file__).resolve().parents[2]
N_REPORTS = 12  # x 2 conditions = 24 label-scoring calls of SmolLM2
EXIT_WITHIN_S = 20.0  # Ctrl-C -> runner exited, on a loaded 2-core machine (a forward pass, the kernel's shutdown)
INFERENCE = (
    "from finlib.core.config import load_run\nfrom finlib.finbias.inference.stage import run\n"
    "run(load_run(run_name, params_file))\n"
)


def _sigint_default() -> None:
    """In the child before exec: SIGINT back to its default, as a terminal gives it (a test launched in
    the background or under nohup has it ignored, and a child would inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def model_cache(tmp_path_factory) -> Path:
    """One safetensors cache of SmolLM2 for every drill here (the GGUF is converted once, by the first run)."""
    return tmp_path_factory.mktemp("models")


def _condition_row(report_id: str, cond: str, text: str) -> dict:
    """One stage-02 row of a bullish report in one condition (the drills' corpora rate every report Buy)."""
    return {"item_id": f"{report_id}:{cond}", "report_id": report_id, "condition": cond, "text": text,
            "analyst_rating": "bullish", "fake_rating": None, "reference_rating": "bullish", "status": "ok",
            "skip_reason": None}


def _conditions() -> pd.DataFrame:
    """Stage 02's conditions for N_REPORTS reports, two conditions each, texts as a broker writes them."""
    rows = []
    for i in range(N_REPORTS):
        for cond, text in (
            ("original", f"We rate Firm {i} a Buy. Revenue rose {i % 9 + 2}% on higher volumes."),
            ("no_rating", f"Revenue of Firm {i} rose {i % 9 + 2}% on higher volumes."),
        ):
            rows.append(_condition_row(f"R{i:03d}", cond, text))
    return pd.DataFrame(rows)


def _stage03_repo(tmp_path: Path, repo_root: Path, model_cache: Path) -> Path:
    """A repository whose notebook 03 runs stage 03 on written conditions with the local model only."""
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    (root / "params").mkdir()
    for f in (repo_root / "params").glob("*.yaml"):
        (root / "params" / f.name).write_text(f.read_text())
    (root / "pyproject.toml").write_text("[project]\nname='drill'\n")
    (root / "params" / "drill.yaml").write_text(
        "extends: smoke.yaml\n"
        f"inference: {{models: [smollm2-135m], extension_models: [smollm2-135m], samples_per_item: 1,\n"
        f"  generate_subset: 0, progress: false, dtype: float32, threads: 1, model_cache: '{model_cache}'}}\n"
    )
    write_frame(load_run("drill", root=root), "conditions", _conditions())
    nb = root / "notebooks" / "03_inference.ipynb"
    _notebook(nb, INFERENCE)
    return root


def _runner(repo: Path, stage: str, stub_url: str = "") -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DRILL_TEST_KEY": "k", "STUB_URL": stub_url}
    return subprocess.Popen(
        [sys.executable, "-m", "finlib.pipeline.runner", "--run", "drill", "--stages", stage],
        cwd=repo,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_default,
    )


def _rows(repo: Path) -> dict[str, tuple]:
    """Every stored call: key -> (status, probabilities, updated_at)."""
    db = repo / "data" / "interim" / "responses.sqlite"
    if not db.is_file():
        return {}
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            return {
                k: rest
                for k, *rest in conn.execute(
                    "SELECT key, status, p_bullish, p_neutral, p_bearish, updated_at FROM responses"
                )
            }
    except sqlite3.OperationalError:  # created, schema not written yet
        return {}


def _wait_for_rows(repo: Path, proc: subprocess.Popen, n: int, timeout_s: float = 240) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        got = len(_rows(repo))
        if got >= n:
            return got
        time.sleep(0.05)
    pytest.fail(
        f"stage 03 stored fewer than {n} answers before it ended or {timeout_s:.0f} s passed "
        f"(exit {proc.poll()}; stderr: {proc.stderr.read() if proc.poll() is not None else ''})"
    )


def _children(pid: int) -> list[int]:
    """Processes whose parent is `pid` (the kernel the runner started), read from /proc."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _manifest(repo: Path) -> dict:
    return json.loads((repo / "runs" / "drill" / "manifest.json").read_text())


def _stage_report(repo: Path) -> dict:
    report = json.loads((repo / "data" / "processed" / "drill" / "inference_report.json").read_text())
    return report["models"]["smollm2-135m"]


@pytest.mark.slow  # two runner processes, each starting a kernel that loads SmolLM2
def test_ctrl_c_during_local_scoring_exits_130_and_the_rerun_reuses_every_stored_answer(
    tmp_path, repo_root, model_cache
):
    """Drill: Ctrl-C to the runner while stage 03 scores with the local model (then the same command resumes).

    Exit 130 within 20 s of the signal; one stderr line naming stage 03 and the resume command, no
    traceback; the manifest reads `interrupted`; the rerun exits 0, computes only the calls not stored
    (counted in the store and in the stage report) and leaves every stored answer as it was."""
    repo = _stage03_repo(tmp_path, repo_root, model_cache)
    proc = _runner(repo, "03")
    _wait_for_rows(repo, proc, 4)
    t_signal = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    exit_s = time.monotonic() - t_signal
    before = _rows(repo)
    manifest = _manifest(repo)

    rerun = _runner(repo, "03")
    out2, err2 = rerun.communicate(timeout=300)
    after = _rows(repo)
    assert proc.returncode == 130, (out, err)
    assert exit_s < EXIT_WITHIN_S, f"the runner took {exit_s:.1f} s to exit after Ctrl-C"
    lines = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "stage 03 interrupted" in lines[0] and "--run drill --from 03" in lines[0], lines[0]
    assert manifest["stages"]["03"]["status"] == "interrupted" and manifest["status"] == "interrupted"
    assert len(before) >= 4, "the signal did not land mid-stage"

    assert rerun.returncode == 0, (out2, err2)
    assert _manifest(repo)["stages"]["03"]["status"] == "ok"
    report = _stage_report(repo)
    assert len(after) == report["unique_keys"] >= 2 * N_REPORTS and {v[0] for v in after.values()} == {"ok"}
    computed_again = [k for k in before if after[k] != before[k]]
    assert computed_again == [], f"{len(computed_again)} stored answer(s) computed again"
    assert report["sent"] == len(after) - len(before) and report["cached"] == len(before), report


@pytest.mark.slow  # two runner processes, each starting a kernel that loads SmolLM2
def test_kill_9_during_local_scoring_then_the_rerun_completes_and_keeps_every_stored_answer(
    tmp_path, repo_root, model_cache
):
    """Drill: kill -9 to the runner while stage 03 scores with the local model, then the same command.

    The orphaned kernel stops within 10 s (it stores nothing later); the rerun exits 0 with one answer
    per call; every answer stored before the kill is kept unchanged and not computed again."""
    repo = _stage03_repo(tmp_path, repo_root, model_cache)
    proc = _runner(repo, "03")
    _wait_for_rows(repo, proc, 4)
    kernels = _children(proc.pid)
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while any(_alive(k) for k in kernels) and time.monotonic() < deadline:
        time.sleep(0.1)
    orphans = [k for k in kernels if _alive(k)]
    for k in orphans:  # leave no process behind whatever the verdict
        os.kill(k, signal.SIGKILL)
    before = _rows(repo)

    rerun = _runner(repo, "03")
    out2, err2 = rerun.communicate(timeout=300)
    after = _rows(repo)
    assert proc.returncode == -signal.SIGKILL
    assert kernels, "the runner had started no kernel"
    assert orphans == [], "the kernel went on running after the runner was killed"
    assert len(before) >= 4, "the kill did not land mid-stage"
    assert rerun.returncode == 0, (out2, err2)
    report = _stage_report(repo)
    assert len(after) == report["unique_keys"] >= 2 * N_REPORTS and {v[0] for v in after.values()} == {"ok"}
    lost_or_redone = [k for k in before if after.get(k) != before[k]]
    assert lost_or_redone == [], f"{len(lost_or_redone)} stored answer(s) lost or computed again"
    assert report["cached"] == len(before) and report["sent"] == len(after) - len(before), report


# ---------------------------------------------------------------------------------------------
# Stage 05: the teacher's calls (an API teacher: the stub server in this process) and training
# ---------------------------------------------------------------------------------------------

DPO = "from finlib.core.config import load_run\nfrom finlib.finbias.dpo.stage import run\nrun(load_run(run_name, params_file))\n"
FIRMS, PER_FIRM = 6, 4
SECTORS = ["Technology", "Energy", "Utilities"]


def _corpus(cfg) -> None:
    """reports / labels / conditions of FIRMS firms x PER_FIRM reports (2019-2021), labels mixed."""
    reports, conditions = [], []
    for f in range(FIRMS):
        for k in range(PER_FIRM):
            rid = f"R{f:02d}{k}"
            change = (f * PER_FIRM + k) % 11 - 5
            facts = f"Revenue of Firm {f} changed {change}% to ${20 + f} mn; the margin was {10 + k}%."
            reports.append(
                {
                    "report_id": rid,
                    "ticker": f"T{f:02d}",
                    "company": f"Firm {f}",
                    "sector": SECTORS[f % 3],
                    "date": pd.Timestamp("2019-01-07") + pd.Timedelta(days=200 * k + 9 * f),
                    "text": f"We rate Firm {f} a Buy. {facts} We think the outlook is excellent.",
                    "analyst_rating": "bullish",
                }
            )
            for cond, text in (("original", reports[-1]["text"]), ("no_opinion", facts)):
                conditions.append(_condition_row(rid, cond, text))
    frame = pd.DataFrame(reports)
    write_frame(cfg, "reports", frame)
    write_frame(
        cfg,
        "labels",
        pd.DataFrame(
            {
                "report_id": frame["report_id"],
                "label": [("bearish", "neutral", "bullish")[i % 3] for i in range(len(frame))],
            }
        ),
    )
    write_frame(cfg, "conditions", pd.DataFrame(conditions))


def _stage05_repo(tmp_path: Path, repo_root: Path, model_cache: Path, dpo: str, registry: dict | None = None) -> Path:
    """A repository whose notebook 05 runs stage 05 on a written corpus (`dpo` = the drill's dpo: knobs)."""
    from llm_helpers import write_registry

    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    (root / "params").mkdir()
    for f in (repo_root / "params").glob("*.yaml"):
        (root / "params" / f.name).write_text(f.read_text())
    (root / "pyproject.toml").write_text("[project]\nname='drill'\n")
    reg = f"registry: {write_registry(root, registry)}, " if registry else ""
    (root / "params" / "drill.yaml").write_text(
        "extends: smoke.yaml\n"
        f"inference: {{{reg}progress: false, dtype: float32, threads: 1, budget_usd: 1.0, model_cache: '{model_cache}'}}\n"
        f"dpo: {{dtype: float32, device: cpu, {dpo}}}\n"
    )
    _corpus(load_run("drill", root=root))
    _notebook(root / "notebooks" / "05_dpo.ipynb", DPO)
    return root


def _wait_for(predicate, proc: subprocess.Popen, what: str, timeout_s: float = 240) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        if predicate():
            return
        time.sleep(0.05)
    pytest.fail(f"{what} did not happen before the stage ended or {timeout_s:.0f} s passed (exit {proc.poll()})")


def _training_steps_started(repo: Path) -> bool:
    """Stage 05's progress log shows the DPO step counter (the optimizer steps have begun)."""
    try:
        return "DPO training smollm2-135m: 0/" in (repo / "runs" / "drill" / "progress" / "05.log").read_text()
    except OSError:
        return False


def _into_training(repo: Path, proc: subprocess.Popen) -> None:
    """Wait until the progress log counts steps, then one second more: the first step takes longer
    (tens of seconds on 2 cores), so the signal lands in it."""
    _wait_for(lambda: _training_steps_started(repo), proc, "training steps")
    time.sleep(1.0)


ADAPTER = Path("runs") / "drill" / "dpo" / "smollm2-135m" / "adapter"
TRAINING = "split_cutoff: '2021-01-01', max_steps: 2, batch_size: 1, max_train_pairs: 4, eval_reports: 1"


@pytest.mark.slow  # two runner processes; SmolLM2 trained and evaluated by the rerun
def test_ctrl_c_during_dpo_training_exits_130_and_the_rerun_trains_and_evaluates(tmp_path, repo_root, model_cache):
    """Drill: Ctrl-C to the runner while stage 05 trains (then the same command reruns the stage).

    Exit 130 within 20 s of the signal; one stderr line naming stage 05 and the resume command, no
    traceback; the manifest reads `interrupted` and no adapter was saved; the rerun exits 0 with the
    adapter and Table 8 written."""
    repo = _stage05_repo(tmp_path, repo_root, model_cache, TRAINING)
    proc = _runner(repo, "05")
    _into_training(repo, proc)
    t_signal = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    exit_s = time.monotonic() - t_signal
    manifest = _manifest(repo)
    adapter_after_signal = (repo / ADAPTER).exists()

    rerun = _runner(repo, "05")
    out2, err2 = rerun.communicate(timeout=400)
    assert proc.returncode == 130, (out, err)
    assert exit_s < EXIT_WITHIN_S, f"the runner took {exit_s:.1f} s to exit after Ctrl-C"
    lines = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "stage 05 interrupted" in lines[0] and "--run drill --from 05" in lines[0], lines[0]
    assert manifest["stages"]["05"]["status"] == "interrupted" and manifest["status"] == "interrupted"
    assert not adapter_after_signal, "the signal landed after training"
    assert rerun.returncode == 0, (out2, err2)
    assert _manifest(repo)["stages"]["05"]["status"] == "ok"
    assert (repo / ADAPTER / "adapter_model.safetensors").is_file()
    assert (repo / "data" / "processed" / "drill" / "dpo_report.json").is_file()


@pytest.mark.slow  # two runner processes; SmolLM2 trained and evaluated by the rerun
def test_kill_9_during_dpo_training_then_the_rerun_trains_and_evaluates(tmp_path, repo_root, model_cache):
    """Drill: kill -9 to the runner while stage 05 trains, then the same command.

    The orphaned kernel stops within 10 s; no adapter is left half-written; the rerun exits 0 with
    the adapter and Table 8 written."""
    repo = _stage05_repo(tmp_path, repo_root, model_cache, TRAINING)
    proc = _runner(repo, "05")
    _into_training(repo, proc)
    kernels = _children(proc.pid)
    proc.kill()
    proc.communicate(timeout=60)
    deadline = time.monotonic() + 10
    while any(_alive(k) for k in kernels) and time.monotonic() < deadline:
        time.sleep(0.1)
    orphans = [k for k in kernels if _alive(k)]
    for k in orphans:
        os.kill(k, signal.SIGKILL)
    adapter_after_kill = (repo / ADAPTER).exists()

    rerun = _runner(repo, "05")
    out2, err2 = rerun.communicate(timeout=400)
    assert orphans == [], "the kernel went on running after the runner was killed"
    assert not adapter_after_kill, "the kill landed after training"
    assert rerun.returncode == 0, (out2, err2)
    assert _manifest(repo)["stages"]["05"]["status"] == "ok"
    assert (repo / ADAPTER / "adapter_model.safetensors").is_file()
    assert (repo / "data" / "processed" / "drill" / "dpo_report.json").is_file()


TEACHER_CALLS_BEFORE_SIGNAL = 6


@pytest.mark.slow  # two runner processes; SmolLM2 trained (one step) and evaluated by the rerun
def test_ctrl_c_during_the_teachers_calls_exits_130_and_the_rerun_sends_only_the_rest(tmp_path, repo_root, model_cache):
    """Drill: Ctrl-C to the runner while stage 05's teacher (an API model) answers (then the same command reruns).

    Exit 130 within 20 s; one stderr line naming stage 05, the calls in flight and the resume command;
    the manifest reads `interrupted`; no request reaches the server later than 1 s after the signal;
    the rerun exits 0 and the server answered each teacher prompt once in all (stored answers are not
    sent again)."""
    from llm_helpers import api_record

    from finlib.rehearsal.stub_server import FaultPlan, ThreadedStub

    with ThreadedStub(faults=FaultPlan(rate=1.0, weights={"slow": 1.0}, slow_s=0.3)) as stub:
        record = api_record("stub-teacher", stub.base_url, "DRILL_TEST_KEY", concurrency=2)
        repo = _stage05_repo(
            tmp_path,
            repo_root,
            model_cache,
            "teacher: stub-teacher, split_cutoff: '2021-01-01', max_train_pairs: null, max_steps: 1, batch_size: 1",
            registry=record,
        )
        proc = _runner(repo, "05", stub.base_url)
        _wait_for(lambda: stub.stub.n_requests >= TEACHER_CALLS_BEFORE_SIGNAL, proc, "teacher calls")
        t_signal = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        exit_s = time.monotonic() - t_signal
        late = [t for t, _, _ in stub.stub.log if t > t_signal + 1.0]
        sent_first = stub.stub.n_requests
        manifest = _manifest(repo)
        rerun = _runner(repo, "05", stub.base_url)
        out2, err2 = rerun.communicate(timeout=400)
        answers = dict(stub.stub.answers)
    assert proc.returncode == 130, (out, err)
    assert exit_s < EXIT_WITHIN_S, f"the runner took {exit_s:.1f} s to exit after Ctrl-C"
    assert late == [], f"{len(late)} request(s) started after the signal"
    lines = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "stage 05 interrupted" in lines[0] and "call(s) were in flight" in lines[0], lines[0]
    assert "--run drill --from 05" in lines[0]
    assert manifest["stages"]["05"]["status"] == "interrupted" and manifest["status"] == "interrupted"
    assert rerun.returncode == 0, (out2, err2)
    assert _manifest(repo)["stages"]["05"]["status"] == "ok"
    assert len(answers) > sent_first and set(answers.values()) == {1}  # the rerun sent only what was not stored
