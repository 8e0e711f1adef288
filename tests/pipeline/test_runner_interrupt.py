"""Ctrl-C to the runner while a stage's kernel sends model calls: the runner forwards the signal to
the kernel (which jupyter_client starts in a process group of its own), no request starts after it, the
stage is marked `interrupted`, one line says what was in flight and how to resume, and the resume
completes exactly. A real runner process, a real kernel, the stub server in this process."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_runner import _notebook, mini_repo  # noqa: F401 -- the fixture

from finlib.rehearsal.stub_server import ThreadedStub

ROOT = Path(__file__).resolve().parents[2]
N = 40
FORWARD_WITHIN_S = 1.0  # runner -> kernel -> senders stopped, on a loaded machine
SENDER = f"""import os
from finlib.llm.loop import run_coroutine
from finlib.llm.openai_backend import run_openai
from finlib.llm.store import Request, ResponseStore, make_key
from finlib.rehearsal.stub_server import stub_spec
spec = stub_spec(os.environ["STUB_URL"], concurrency=4)
params = {{"temperature": 1.0, "top_p": 1.0, "max_new_tokens": 16}}
msgs = [[{{"role": "user", "content": f"text {{i}} [[sleepx1:0.3]]"}}] for i in range({N})]
reqs = [Request(make_key(spec.backend, spec.model_id, m, params, "t", "generate"), spec.name, spec.backend,
                "generate", m, dict(params)) for m in msgs]
with ResponseStore(os.environ["STORE"]) as store:
    done = store.answered([r.key for r in reqs])
    run_coroutine(run_openai(spec, [r for r in reqs if r.key not in done], store))
"""


def _sigint_default() -> None:
    """In the child before exec: SIGINT back to its default, as a terminal gives it (a test launched in
    the background or under nohup has it ignored, and a child would inherit that)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _runner(repo: Path, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "finlib.pipeline.runner", "--run", "smoke", "--stages", "00"],
                            cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_sigint_default)


@pytest.mark.slow  # two runner processes, each starting a kernel
def test_ctrl_c_to_the_runner_stops_the_kernels_sends_and_a_resume_completes(mini_repo, tmp_path):  # noqa: F811
    """Drill: Ctrl-C to the runner while a stage sends model calls (then the same command resumes).

    No request reaches the server later than 1 s after the signal; the stage reads `interrupted`;
    one line names the calls in flight and the resume command; the resume answers the rest, one
    answer per text in all."""
    _notebook(mini_repo / "notebooks" / "00_write.ipynb", SENDER)
    with ThreadedStub() as stub:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "STUB_URL": stub.base_url, "STUB_TEST_KEY": "k",
               "STORE": str(tmp_path / "r.sqlite")}
        proc = _runner(mini_repo, env)
        deadline = time.monotonic() + 180
        while stub.stub.n_requests < 8 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.01)
        t_signal = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=180)
        late = [t - t_signal for t, _, _ in stub.stub.log if t > t_signal + FORWARD_WITHIN_S]
        sent_first = len(stub.stub.log)
        manifest = json.loads((mini_repo / "runs" / "smoke" / "manifest.json").read_text())
        resumed = _runner(mini_repo, env)
        out2, err2 = resumed.communicate(timeout=180)
        answers = dict(stub.stub.answers)
    assert proc.returncode == 130, (out, err)
    assert late == [], f"{len(late)} request(s) started after the signal"
    assert sent_first < N
    lines = [ln for ln in err.splitlines() if "interrupted" in ln]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "stage 00 interrupted" in lines[0] and "call(s) were in flight" in lines[0]
    assert "--run smoke --from 00" in lines[0]
    assert manifest["stages"]["00"]["status"] == "interrupted" and manifest["status"] == "interrupted"
    assert resumed.returncode == 0, (out2, err2)
    assert len(answers) == N and set(answers.values()) == {1}  # the resume sent only what was not stored
