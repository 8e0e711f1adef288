"""One writer per run directory: a second invocation of a run that is running is refused at once,
naming the holder's pid and command, and writes nothing; a holder killed with SIGKILL leaves no
lock behind. The resume command after Ctrl-C names the params file the run was started with."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

from finlib.core.config import load_run
from finlib.core.kernel_interrupt import interrupted_line
from finlib.pipeline.run_lock import one_writer
from finlib.pipeline.runner import main, resume_params

ROOT = Path(__file__).resolve().parents[2]
HOLDER = (
    "import sys, time\nfrom pathlib import Path\nfrom finlib.pipeline.run_lock import one_writer\n"
    "with one_writer(Path(sys.argv[1])):\n    print('held', flush=True)\n    time.sleep(120)\n"
)


def _mini_repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "notebooks").mkdir(parents=True)
    shutil.copytree(ROOT / "params", root / "params")
    (root / "pyproject.toml").write_text("[project]\nname='mini'\n")
    return root


def _holder(run_dir: Path) -> subprocess.Popen:
    """Another process holding the run's writer lock (as a runner in the middle of a stage does)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run_dir), "--run", "smoke", "--stages", "03"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_invocation_of_a_running_run_is_refused_naming_the_holder(tmp_path, monkeypatch, capsys):
    """Drill: a stage rerun of a run while another invocation of the same run is running.

    The second invocation exits 1 at once with one line naming the holder's pid and command; the
    manifest is byte for byte what the running invocation last wrote (no lost update); after the
    holder is killed with SIGKILL the lock is free at once."""
    root = _mini_repo(tmp_path)
    run_dir = root / "runs" / "smoke"
    run_dir.mkdir(parents=True)
    manifest = run_dir / "manifest.json"
    manifest.write_text(json.dumps({"status": "running", "stages": {"03": {"status": "running"}}}))
    before = manifest.read_bytes()
    monkeypatch.chdir(root)
    holder = _holder(run_dir)
    try:
        rc = main(["--run", "smoke", "--stages", "00"])
        err = capsys.readouterr().err
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(30)
    assert rc == 1, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert f"is in use by pid {holder.pid} " in lines[0] and "--stages 03" in lines[0], lines[0]
    assert "One run directory has one writer at a time" in lines[0]
    assert manifest.read_bytes() == before
    with one_writer(run_dir):  # the killed holder's lock went with it
        pass


def test_the_lock_names_no_holder_once_released(tmp_path):
    """A released lock file says nothing about a holder (a refusal never names a finished run)."""
    run_dir = tmp_path / "runs" / "r"
    with one_writer(run_dir):
        held = json.loads((run_dir / ".writer.lock").read_text())
        assert held["pid"] == os.getpid()
    assert (run_dir / ".writer.lock").read_text() == ""


def test_the_resume_command_keeps_the_params_file(tmp_path):
    """Drill: Ctrl-C in a run started with --params FILE prints a resume command with --params FILE.

    Following it literally loads the same params (and store); a run on params/<run>.yaml gets none."""
    root = _mini_repo(tmp_path)
    shutil.copy(root / "params" / "smoke.yaml", root / "params" / "mine copy.yaml")
    own = load_run("smoke", root=root)
    other = load_run("smoke", params_file=root / "params" / "mine copy.yaml", root=root)
    assert resume_params(own) is None
    line = interrupted_line("smoke", "03", None, resume_params(other))
    assert "--run smoke --params 'params/mine copy.yaml' --from 03" in line, line
    assert "--params" not in interrupted_line("smoke", "03", None, resume_params(own))
