"""Live progress: a long step's lines (done/total, rate, ETA) reach the terminal that runs the stage
while the notebook's kernel is still working, and the executed notebook keeps the same lines in one
block. The kernel is a separate process, so the feed is checked across a real process boundary."""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time

import nbformat
import pytest

from finlib.core.progress_feed import FEED_ENV, FeedTail, Meter


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_meter_lines_say_done_total_rate_and_eta_and_are_rationed():
    clock, out = Clock(), io.StringIO()
    meter = Meter(100, "model generate", unit="call", file=out, interval=10.0, clock=clock)
    for _ in range(100):
        clock.t += 1.0  # one call a second: a line every 10 calls
        meter.update(1, postfix="25 tok/s")
    meter.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 11  # the start line, then one every 10 s (the last one is the final state)
    assert lines[0].startswith("model generate: 0/100")
    assert lines[5].startswith("model generate: 50/100") and "00:50<00:50" in lines[5]
    assert "1.00call/s" in lines[5] and "25 tok/s" in lines[5]
    assert lines[-1].startswith("model generate: 100/100")


def test_meter_close_adds_the_final_line_once():
    clock, out = Clock(), io.StringIO()
    meter = Meter(3, "x", file=out, interval=10.0, clock=clock)
    meter.update(3)  # within the interval: no line
    meter.close()
    meter.close()
    assert [ln.split(" [")[0] for ln in out.getvalue().splitlines()] == ["x: 0/3", "x: 3/3"]


def test_disabled_meter_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv(FEED_ENV, str(tmp_path / "feed.log"))
    out = io.StringIO()
    meter = Meter(3, "x", file=out, disable=True)
    meter.update(3)
    meter.close()
    assert out.getvalue() == "" and not (tmp_path / "feed.log").exists()


def test_lines_written_by_another_process_reach_the_terminal_while_it_runs(tmp_path):
    """The kernel inherits the feed's name from the environment; the tail prints each line, prefixed,
    before the writer has finished (not only at the end)."""
    out = io.StringIO()
    script = ("import sys, time\nfrom finlib.core.progress_feed import Meter\n"
              "m = Meter(2, 'child step', file=None, interval=0.0)\n"
              "m.update(1); time.sleep(30)\n")
    env_before = os.environ.get(FEED_ENV)
    with FeedTail(tmp_path / "feed.log", prefix="[run] stage 03: ", stream=out, poll_s=0.05):
        child = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        try:
            deadline = time.monotonic() + 60
            while "child step: 1/2" not in out.getvalue() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert child.poll() is None, "the line must arrive while the writer is still running"
        finally:
            child.kill()
            child.wait()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("[run] stage 03: child step: 0/2")
    assert lines[1].startswith("[run] stage 03: child step: 1/2")
    assert os.environ.get(FEED_ENV) == env_before


def test_a_half_written_line_waits_for_its_end(tmp_path):
    out = io.StringIO()
    tail = FeedTail(tmp_path / "feed.log", stream=out).start()
    with open(tmp_path / "feed.log", "a") as fh:
        fh.write("step: 1/2")
        fh.flush()
        tail._drain()
        assert out.getvalue() == ""
        fh.write(" [00:01<00:01]\n")
    tail.stop()
    assert out.getvalue() == "step: 1/2 [00:01<00:01]\n"


@pytest.mark.slow  # starts a kernel
def test_runner_prints_the_kernels_progress_and_the_notebook_keeps_it_in_one_block(tmp_path, repo_root,
                                                                                   monkeypatch, capsys):
    from finlib.pipeline.runner import run_pipeline

    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    shutil.copytree(repo_root / "params", root / "params")
    (root / "pyproject.toml").write_text("[project]\nname='mini'\n")
    nb = nbformat.v4.new_notebook()
    params = nbformat.v4.new_code_cell('run_name = "smoke"\nparams_file = None\n')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(
        "import sys\nfrom finlib.core.progress_feed import Meter\n"
        "m = Meter(4, 'scoring', unit='call', file=sys.stderr, interval=0.0)\n"
        "for _ in range(4):\n    m.update(1)\nm.close()\n")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, root / "notebooks" / "03_progress.ipynb")
    monkeypatch.chdir(root)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(repo_root), os.environ.get("PYTHONPATH", "")]))
    run_pipeline("smoke", ["03"])
    terminal = [ln for ln in capsys.readouterr().out.splitlines() if "scoring:" in ln]
    assert [ln.split(" [")[0] for ln in terminal] == [f"[smoke] stage 03: scoring: {i}/4" for i in range(5)]
    executed = nbformat.read(root / "runs" / "smoke" / "notebooks" / "03_progress.ipynb", as_version=4)
    streams = [o for o in executed.cells[-1].outputs if o.output_type == "stream"]
    assert len(streams) == 1 and streams[0].name == "stderr"
    assert [ln.split(" [")[0] for ln in streams[0].text.splitlines()] == [f"scoring: {i}/4" for i in range(5)]


def test_dpo_training_reports_its_steps_as_progress_lines(capsys):
    """Stage 05's trainer draws no bar (disable_tqdm): its callback is what the terminal shows."""
    pytest.importorskip("transformers")
    from types import SimpleNamespace

    from finlib.finbias.dpo.train import step_progress

    callback = step_progress("DPO training m")
    state = SimpleNamespace(is_world_process_zero=True, max_steps=3, log_history=[])
    callback.on_train_begin(None, state, None)
    for step in range(3):
        callback.on_step_end(None, state, None)
        state.log_history.append({"loss": 0.69 - step / 100})
    callback.on_train_end(None, state, None)
    lines = capsys.readouterr().err.splitlines()
    assert [ln.split(" [")[0] for ln in lines] == ["DPO training m: 0/3", "DPO training m: 3/3"]
    assert "step/s" in lines[-1] and "loss 0.6800" in lines[-1]
