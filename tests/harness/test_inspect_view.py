"""`inspect view` opens the task's logs offline: the viewer's own server, started on a log folder the
inspect task wrote against a local stub, serves its page, lists the log and reads its header (status,
task, sample count), with the hub switched off."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai", reason="the harness extra is not installed (pip install -e '.[harness]')")

from llm_helpers import api_record, write_registry

from finlib.harness.stub_run import VariedStub, inspect_results, write_run
from finlib.rehearsal.stub_server import ThreadedStub

pytestmark = pytest.mark.slow  # one inspect eval and the viewer's server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as r:  # noqa: S310 -- a local server started by the test
        return r.read()


def _wait_for(url: str, seconds: float = 60.0) -> bytes:
    """The viewer takes a few seconds to import and bind: poll until it answers."""
    end = time.monotonic() + seconds
    while True:
        try:
            return _get(url)
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.5)


@pytest.fixture()
def log_dir(tmp_path: Path, monkeypatch) -> Path:
    """One finbias_herding log, written by the inspect task against the stub server."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("INSPECT_CACHE_DIR", str(tmp_path / "inspect-cache"))
    monkeypatch.setenv("STUB_TEST_KEY", "stub-key")
    data_dir = write_run(tmp_path / "processed", False)
    (tmp_path / "params").mkdir()
    logs = tmp_path / "logs"
    with ThreadedStub() as server:
        server.stub.__class__ = VariedStub
        record = api_record("stub", server.base_url, "STUB_TEST_KEY", concurrency=4, max_attempts=2, timeout_s=5)
        registry = tmp_path / write_registry(tmp_path, record)
        *_, status = inspect_results(data_dir, registry, server.base_url, logs)
    assert status == "success"
    return logs


def test_inspect_view_lists_and_reads_the_tasks_log_offline(log_dir: Path):
    (log_file,) = sorted(log_dir.glob("*.eval"))
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "NO_PROXY": "127.0.0.1"}
    cmd = [sys.executable, "-m", "inspect_ai", "view", "start", "--log-dir", str(log_dir), "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        page = _wait_for(base + "/").decode("utf-8", "replace")
        assert "<title>Inspect View</title>" in page
        listing = json.loads(_get(base + "/api/logs"))
        assert [Path(urllib.parse.urlparse(f["name"]).path).name for f in listing["files"]] == [log_file.name]
        query = urllib.parse.urlencode({"file": str(log_file)})
        (header,) = json.loads(_get(f"{base}/api/log-headers?{query}"))
        assert header["status"] == "success"
        assert header["eval"]["task"] == "finbias_herding"
        assert header["results"]["total_samples"] == 6  # six reports, each one sample with its four conditions
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
