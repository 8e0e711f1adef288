"""`make lab` where researchers run it: as root, headless, on a chosen address and port, the URL last.

The live test starts the server with the very command `make lab` runs (read from `make -n lab`), as the
user the tests run as, waits for the URL line, lists the notebooks through the server's REST API, starts a
kernel and runs code in it over the websocket JupyterLab uses, then stops the launcher with SIGTERM and checks that the server went with it.
"""
from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from finlib.core.config import repo_root
from finlib.pipeline.lab_server import NOTEBOOKS_URL, plan_launch, ready_message, wants_browser

ROOT = repo_root(Path(__file__).parent)


def test_root_gets_allow_root_and_a_line_saying_so(tmp_path: Path):
    as_root = plan_launch(tmp_path, euid=0, env={}, open_choice="no")
    as_user = plan_launch(tmp_path, euid=1000, env={}, open_choice="no")
    assert "--ServerApp.allow_root=True" in as_root.argv
    assert "--ServerApp.allow_root=True" not in as_user.argv
    assert "Running as root" in ready_message(as_root, "default", "why")
    assert "root" not in ready_message(as_user, "default", "why").lower()


def test_the_url_with_its_token_is_the_last_line_and_the_token_is_not_on_the_command_line(tmp_path: Path):
    launch = plan_launch(tmp_path, ip="0.0.0.0", port=8890, env={}, open_choice="no")
    last = ready_message(launch, "mine", "the most recent run on disk").rstrip().splitlines()[-1].strip()
    assert last == f"http://127.0.0.1:8890{NOTEBOOKS_URL}?token={launch.token}"
    assert len(launch.token) >= 32
    assert not any(launch.token in a for a in launch.argv)  # other users of the node read the process list
    assert launch.env["JUPYTER_TOKEN"] == launch.token
    assert "--ServerApp.port_retries=0" in launch.argv  # a tunnel points at one port: never wander


def test_headless_prints_the_tunnel_line_and_names_the_run(tmp_path: Path):
    msg = ready_message(plan_launch(tmp_path, port=8891, env={}, open_choice="no"), "mine", "given")
    assert "ssh -N -L 8891:localhost:8891" in msg
    assert "run 'mine'" in msg


def test_a_browser_opens_only_where_one_can_show():
    assert wants_browser("auto", {}, platform="linux") is False
    assert wants_browser("auto", {"DISPLAY": ":0"}, platform="linux") is True
    assert wants_browser("auto", {}, platform="darwin") is True
    assert wants_browser("no", {"DISPLAY": ":0"}) is False
    assert wants_browser("yes", {}) is True
    with pytest.raises(ValueError, match="LAB_OPEN"):
        wants_browser("maybe", {})


def test_a_port_out_of_range_is_refused_by_name(tmp_path: Path):
    with pytest.raises(ValueError, match="LAB_PORT=70000"):
        plan_launch(tmp_path, port=70000, env={})


@pytest.mark.slow
def test_a_taken_port_stops_with_the_reason():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(_make_lab_command(port), cwd=ROOT, capture_output=True, text=True, timeout=180,
                              env=_env())
    assert proc.returncode == 1
    assert "port" in proc.stderr and "LAB_PORT" in proc.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "JUPYTER_TOKEN")}
    env["PYTHONPATH"] = str(ROOT)  # the checkout's finlib, whichever install the venv has
    return env


def _make_lab_command(port: int) -> list[str]:
    """The command `make lab` runs for this port, as make prints it (the launcher line of `make -n lab`)."""
    out = subprocess.run(["make", "-n", "--no-print-directory", "lab", f"LAB_PORT={port}", "LAB_OPEN=no"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
    line = next(ln for ln in out.splitlines() if "finlib.pipeline.lab_server" in ln)
    argv = shlex.split(line)
    assert argv[0].endswith("python") and f"--port {port}" in line
    argv[0] = sys.executable  # the interpreter running the tests (the venv make would use)
    return argv


def _api(port: int, token: str, path: str, method: str = "GET") -> dict | list:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", method=method,
                                 headers={"Authorization": f"token {token}"},
                                 data=b"{}" if method == "POST" else None)
    with urllib.request.urlopen(req, timeout=10) as resp:
        body = resp.read()
    return json.loads(body) if body else {}


def _read_url(proc: subprocess.Popen, timeout_s: float = 150.0) -> tuple[list[str], str]:
    seen: list[str] = []
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            if proc.poll() is not None:
                break
            continue
        seen.append(line.rstrip("\n"))
        if line.strip().startswith("http://") and "token=" in line:
            return seen, line.strip()
    raise AssertionError("no URL line from make lab; output:\n" + "\n".join(seen))


async def _execute(port: int, token: str, kernel_id: str, code: str, timeout_s: float = 120.0) -> str:
    """Run code in the server's kernel over its websocket (the channel JupyterLab itself uses); its stdout."""
    from tornado.websocket import websocket_connect

    url = f"ws://127.0.0.1:{port}/api/kernels/{kernel_id}/channels?token={token}"
    ws = await websocket_connect(url, connect_timeout=30)
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex, "msg_type": "execute_request",
              "version": "5.3", "date": ""}
    content = {"code": code, "silent": False, "store_history": False, "user_expressions": {},
               "allow_stdin": False, "stop_on_error": True}
    await ws.write_message(json.dumps({"header": header, "parent_header": {}, "metadata": {}, "content": content,
                                       "channel": "shell", "buffers": []}))
    out: list[str] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            raw = await asyncio.wait_for(ws.read_message(), timeout=max(1.0, deadline - time.monotonic()))
            if raw is None:
                break
            msg = json.loads(raw)
            if msg.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind = msg["header"]["msg_type"]
            if kind == "stream":
                out.append(msg["content"]["text"])
            elif kind == "error":
                raise AssertionError("kernel error: " + "\n".join(msg["content"]["traceback"]))
            elif kind == "status" and msg["content"]["execution_state"] == "idle":
                return "".join(out)
    finally:
        ws.close()
    raise AssertionError(f"the kernel did not finish within {timeout_s:.0f} s; printed: {''.join(out)!r}")


@pytest.mark.slow
def test_make_lab_serves_the_notebooks_and_starts_a_kernel():
    port = _free_port()
    proc = subprocess.Popen(_make_lab_command(port), cwd=ROOT, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
    try:
        seen, url = _read_url(proc)
        token = url.split("token=", 1)[1]
        assert url.startswith(f"http://127.0.0.1:{port}{NOTEBOOKS_URL}?")
        assert ("Running as root" in "\n".join(seen)) == (os.geteuid() == 0)
        listing = _api(port, token, "/api/contents/notebooks")
        served = {item["name"] for item in listing["content"] if item["type"] == "notebook"}
        assert served == {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
        kernel = _api(port, token, "/api/kernels", method="POST")
        printed = asyncio.run(_execute(port, token, kernel["id"], "import finlib; print(finlib.__file__)"))
        assert Path(printed.strip()).resolve() == (ROOT / "finlib" / "__init__.py").resolve()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    with pytest.raises(OSError):  # the server went with the launcher
        _api(port, token, "/api/status")
