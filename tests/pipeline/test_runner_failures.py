"""The runner when a stage fails or runs out of disk: the run stops at the failed stage (non-zero exit,
the manifest says which stage and why), a stage with calls not answered says how many in its final
line, and a full disk names the file and never points at a manifest that was not written.
Notebooks are stood in for by Python functions (papermill is tested in test_runner.py)."""
from __future__ import annotations

import errno
import json
from pathlib import Path

import papermill
import pytest
from test_runner import _notebook, mini_repo  # noqa: F401 -- the fixture

from finlib.core import artifacts
from finlib.core.config import load_run
from finlib.pipeline import runner


def _stand_in(monkeypatch, behaviour: dict) -> list[str]:
    """papermill.execute_notebook replaced: stage id -> function(cfg); returns the stages that ran."""
    ran: list[str] = []

    def execute(input_path, output_path, **kwargs):
        stage = Path(input_path).name[:2]
        ran.append(stage)
        behaviour.get(stage, lambda cfg: None)(load_run("smoke"))

    monkeypatch.setattr(papermill, "execute_notebook", execute)
    return ran


def _three_stages(root: Path) -> None:
    for name in ("00_write", "01_read", "02_calls", "03_scoring"):
        _notebook(root / "notebooks" / f"{name}.ipynb", "pass")


def _calls_fail(cfg) -> None:
    raise RuntimeError("stage 02: too many failed calls: HTTP 401")


def test_failed_stage_stops_the_run_and_the_manifest_says_which_and_why(mini_repo, monkeypatch, capsys):  # noqa: F811
    """Drill: a failed stage stops the run (later stages not run, exit 1, manifest names it)."""
    _three_stages(mini_repo)
    ran = _stand_in(monkeypatch, {"02": _calls_fail})
    assert runner.main(["--run", "smoke"]) == 1
    assert ran == ["00", "01", "02"]  # stage 03 would score what stage 02 did not make
    manifest = json.loads((mini_repo / "runs" / "smoke" / "manifest.json").read_text())
    assert manifest["status"] == "failed" and manifest["failed"]["stage"] == "02"
    assert manifest["failed"]["error"] == "RuntimeError: stage 02: too many failed calls: HTTP 401"
    assert manifest["failed"]["not_run"] == ["03"] and "03" not in manifest["stages"]
    err = capsys.readouterr().err
    assert "FAILED: RuntimeError: stage 02: too many failed calls: HTTP 401" in err
    assert "stage 02 failed; see runs/smoke/manifest.json" in err and "not run: 03" in err
    _stand_in(monkeypatch, {})  # fixed: the rerun succeeds and the manifest no longer says failed
    assert runner.main(["--run", "smoke"]) == 0
    manifest = json.loads((mini_repo / "runs" / "smoke" / "manifest.json").read_text())
    assert manifest["status"] == "ok" and "failed" not in manifest


def test_a_stage_with_calls_not_answered_says_how_many(mini_repo, monkeypatch, capsys):  # noqa: F811
    """Drill: a stage that finished with calls not answered says "finished with N not answered (x %)" and the run exits with the partial code.

    The partial code is distinct from success (0) and failure (1)."""
    _three_stages(mini_repo)

    def some_not_answered(cfg) -> None:
        artifacts.write_json(cfg, "inference_report", {"answer_status": {"answered": 33, "not_answered": 3}})

    _stand_in(monkeypatch, {"02": some_not_answered})
    assert runner.main(["--run", "smoke"]) == runner.PARTIAL_EXIT != 0
    captured = capsys.readouterr()
    out = captured.out
    assert "stage 02: finished with 3 not answered (8.3 %) of 36 calls" in out
    assert "finished with 3 not answered (stage(s) 02: 3)" in captured.err
    assert "stage 01: done in" in out and "stage 03: done in" in out  # no calls: the plain line
    manifest = json.loads((mini_repo / "runs" / "smoke" / "manifest.json").read_text())
    assert manifest["stages"]["02"]["not_answered"] == {"n": 3, "calls": 36}


def _disk_full_for(monkeypatch, name_part: str) -> None:
    """Writes of files whose name contains `name_part` fail half-way with ENOSPC."""
    real = Path.write_text

    def write_text(self, data, *args, **kwargs):
        if name_part in self.name:
            real(self, data[: len(data) // 2], *args, **kwargs)  # a partial temporary file
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)


def test_runs_full_names_the_file_and_points_at_no_missing_manifest(mini_repo, monkeypatch, capsys):  # noqa: F811
    """Drill: disk full under runs/ (manifest cannot be written)."""
    _three_stages(mini_repo)
    _stand_in(monkeypatch, {})
    _disk_full_for(monkeypatch, "manifest.json")
    assert runner.main(["--run", "smoke"]) == 1
    err = capsys.readouterr().err
    run_dir = mini_repo / "runs" / "smoke"
    assert "cannot write" in err and "manifest.json: No space left on device" in err
    assert "no manifest records this failure: runs/smoke/manifest.json was not written" in err
    assert "see runs/smoke/manifest.json" not in err
    assert not (run_dir / "manifest.json").exists()
    assert [p.name for p in run_dir.rglob("*") if "tmp" in p.name] == []


def test_disk_full_while_writing_an_artifact_names_it_and_leaves_no_tmp(tmp_run, monkeypatch):
    """Drill: disk full while a stage writes its report."""
    _disk_full_for(monkeypatch, "inference_report.json")
    with pytest.raises(OSError, match=r"cannot write .*inference_report\.json: No space left on device") as err:
        artifacts.write_json(tmp_run, "inference_report", {"n": 1})
    assert err.value.errno == errno.ENOSPC
    assert list(tmp_run.processed_dir.iterdir()) == []  # no partial file, no .tmp


def _circuit_open_in_notebook(cfg) -> None:
    """A notebook's exception as papermill raises it: a long traceback, the cause in its last line."""
    cause = ("model 'gpt' stopped: 10 consecutive rejected requests; last: HTTP 401: invalid key. "
             "90 call(s) not sent")
    frames = [f"File /site-packages/lib{i}.py:{i}, in frame_{i}(...)\n    {'x' * 150}" for i in range(40)]
    raise papermill.PapermillExecutionError(4, 4, "send()", "CircuitOpen", cause,
                                            ["\x1b[0;31mCircuitOpen\x1b[0m Traceback", *frames, f"CircuitOpen: {cause}"])


def test_the_manifest_keeps_the_cause_of_a_failure_after_a_long_traceback(mini_repo, monkeypatch):  # noqa: F811
    """Drill: a failure whose cause comes after 2,000+ characters of traceback (a breaker's message).

    The manifest keeps the exception's own message and the traceback's first and last lines."""
    _three_stages(mini_repo)
    _stand_in(monkeypatch, {"02": _circuit_open_in_notebook})
    assert runner.main(["--run", "smoke"]) == 1
    manifest = json.loads((mini_repo / "runs" / "smoke" / "manifest.json").read_text())
    error = manifest["failed"]["error"]
    assert error.startswith("CircuitOpen: model 'gpt' stopped: 10 consecutive rejected requests")
    assert error.endswith("CircuitOpen: model 'gpt' stopped: 10 consecutive rejected requests; last: HTTP 401: "
                          "invalid key. 90 call(s) not sent")  # the traceback's last line
    assert "\x1b" not in error and "frame_0(" in error and "traceback lines ...]" in error
    assert manifest["stages"]["02"]["error"] == error
