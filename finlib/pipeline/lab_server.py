"""`make lab`: JupyterLab on the notebooks wherever researchers run it.

Researchers run Lab on a laptop, in a container where they are root (most research Docker images), and
on a remote machine or cluster node opened through an SSH tunnel. Plain `jupyter lab` refuses root and,
headless, buries the URL with its token in the middle of its log. This launcher:

- allows root when the process runs as root, and says so in one line;
- opens a browser only where there is a display (or when asked), else runs headless;
- binds the address and port asked for (`make lab LAB_IP=0.0.0.0 LAB_PORT=8890`), and never wanders to
  another port when that one is taken (an SSH tunnel points at one port): it stops with the reason;
- sends the server's own log to `runs/lab/jupyter-<port>.log` and prints, last and alone, the URL with its
  token, after the SSH tunnel line for remote use;
- opens on `notebooks/`, whose notebooks open the run the user made (`finlib.core.lab`), and names it.

The token travels in the environment (`JUPYTER_TOKEN`), not on the command line, so other users of a shared
node cannot read it from the process list. Ctrl-C stops the server (it runs in a process group of its own, so the
terminal's Ctrl-C reaches only this launcher, which shuts the server down without Jupyter's y/n prompt).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from finlib.core.config import repo_root
from finlib.core.lab import resolve_run

DEFAULT_IP = "127.0.0.1"
DEFAULT_PORT = 8888
OPEN_CHOICES = ("auto", "yes", "no")
READY_TIMEOUT_S = 120.0
NOTEBOOKS_URL = "/lab/tree/notebooks"
LOG_DIR = Path("runs") / "lab"


@dataclass(frozen=True)
class LabLaunch:
    """Everything needed to start the server and to tell the user how to reach it."""

    argv: list[str]
    env: dict[str, str]
    ip: str
    port: int
    token: str
    as_root: bool
    open_browser: bool
    log_path: Path

    @property
    def local_host(self) -> str:
        """The address this machine reaches the server at (a wildcard bind answers on loopback too)."""
        if self.ip in ("", "0.0.0.0", "*"):
            return "127.0.0.1"
        if self.ip == "::":
            return "[::1]"
        return f"[{self.ip}]" if ":" in self.ip else self.ip

    def url(self, path: str = NOTEBOOKS_URL) -> str:
        return f"http://{self.local_host}:{self.port}{path}?token={self.token}"


def wants_browser(choice: str, env: Mapping[str, str], platform: str = sys.platform) -> bool:
    """`auto` opens a browser only where one can show: a desktop (DISPLAY / WAYLAND_DISPLAY) or macOS."""
    if choice not in OPEN_CHOICES:
        raise ValueError(f"LAB_OPEN={choice!r}: choose one of {', '.join(OPEN_CHOICES)}")
    if choice != "auto":
        return choice == "yes"
    return bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY")) or platform == "darwin"


def plan_launch(
    root: Path,
    ip: str = DEFAULT_IP,
    port: int = DEFAULT_PORT,
    open_choice: str = "auto",
    token: str | None = None,
    env: Mapping[str, str] | None = None,
    euid: int | None = None,
    python: str = sys.executable,
) -> LabLaunch:
    """The server's command line and environment (nothing is started)."""
    env = dict(os.environ if env is None else env)
    if not 0 < port < 65536:
        raise ValueError(f"LAB_PORT={port}: a port is a number from 1 to 65535")
    token = token or env.get("JUPYTER_TOKEN") or secrets.token_hex(24)
    as_root = (os.geteuid() if euid is None else euid) == 0
    browser = wants_browser(open_choice, env)
    argv = [
        python,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={root}",
        f"--ServerApp.ip={ip}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        f"--ServerApp.open_browser={browser}",
        f"--LabApp.default_url={NOTEBOOKS_URL}",
    ]
    if as_root:
        argv.append("--ServerApp.allow_root=True")
    env["JUPYTER_TOKEN"] = token
    env.setdefault("JUPYTER_PREFER_ENV_PATH", "1")
    return LabLaunch(
        argv=argv,
        env=env,
        ip=ip,
        port=port,
        token=token,
        as_root=as_root,
        open_browser=browser,
        log_path=root / LOG_DIR / f"jupyter-{port}.log",
    )


def server_answers(launch: LabLaunch, timeout_s: float = 2.0) -> bool:
    """True once the server's REST API answers with the token (GET /api/status)."""
    req = urllib.request.Request(
        f"http://{launch.local_host}:{launch.port}/api/status", headers={"Authorization": f"token {launch.token}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            json.loads(resp.read().decode("utf-8"))
            return resp.status == 200
    except (OSError, ValueError, urllib.error.URLError):
        return False


def wait_until_ready(launch: LabLaunch, proc: subprocess.Popen, timeout_s: float = READY_TIMEOUT_S) -> None:
    """Return when the server answers; raise with the end of its log when it exits or never answers."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"JupyterLab exited with code {proc.returncode} before it answered "
                f"(port {launch.port} taken? choose another: make lab LAB_PORT=...).\n"
                f"End of its log ({launch.log_path}):\n{log_tail(launch.log_path)}"
            )
        if server_answers(launch):
            return
        time.sleep(0.5)
    raise RuntimeError(
        f"JupyterLab did not answer on {launch.local_host}:{launch.port} within {timeout_s:.0f} s; "
        f"its log: {launch.log_path}\n{log_tail(launch.log_path)}"
    )


def log_tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log written)"


def start(launch: LabLaunch, cwd: Path) -> subprocess.Popen:
    """Start the server in a process group of its own, its output to the log file."""
    launch.log_path.parent.mkdir(parents=True, exist_ok=True)
    log = launch.log_path.open("w", encoding="utf-8")
    try:
        return subprocess.Popen(
            launch.argv,
            cwd=cwd,
            env=launch.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        log.close()


def stop(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """SIGTERM (Jupyter shuts its kernels down), then SIGKILL after the grace period."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def ready_message(launch: LabLaunch, run: str, why: str) -> str:
    """What the user reads once the server answers; the URL with its token comes last, on a line of its own."""
    lines = []
    if launch.as_root:
        lines.append("Running as root (as in most research containers): JupyterLab started with --allow-root.")
    lines.append(f"Notebooks open run '{run}' ({why}); set run_name in a notebook's parameters cell to choose another.")
    lines.append(f"Server log: {LOG_DIR / launch.log_path.name}. Ctrl-C stops the server.")
    if not launch.open_browser:
        lines.append(
            f"On a remote machine, tunnel from your own computer first: "
            f"ssh -N -L {launch.port}:localhost:{launch.port} <user>@<this host>"
        )
    lines += ["", "JupyterLab is ready. Open this URL (it holds the access token):", "", f"    {launch.url()}", ""]
    return "\n".join(lines)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def stop_on_termination() -> None:
    """SIGTERM (a `timeout`, a scheduler) and SIGHUP (the SSH connection closed) stop the server as Ctrl-C does,
    instead of ending this launcher and leaving the server, in its own process group, running. A signal already
    ignored (SIGHUP under nohup) stays ignored."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _interrupt)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="JupyterLab on the notebooks (make lab)")
    ap.add_argument("--ip", default=DEFAULT_IP, help="address to bind (0.0.0.0: every interface)")
    ap.add_argument("--port", type=int, default=DEFAULT_PORT, help="port to bind; never another one")
    ap.add_argument(
        "--open",
        dest="open_choice",
        default="auto",
        choices=OPEN_CHOICES,
        help="open a browser: auto (only where there is a display), yes, no",
    )
    args = ap.parse_args(argv)
    root = repo_root()
    try:
        launch = plan_launch(root, args.ip, args.port, args.open_choice)
    except ValueError as exc:
        print(f"make lab: {exc}", file=sys.stderr)
        return 2
    run, why = resolve_run(None, root)
    stop_on_termination()
    proc = start(launch, root)
    try:
        wait_until_ready(launch, proc)
        print(ready_message(launch, run, why), flush=True)
        return proc.wait()
    except RuntimeError as exc:
        print(f"make lab: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\nStopping JupyterLab ...", flush=True)
        return 0
    finally:
        stop(proc)


if __name__ == "__main__":
    sys.exit(main())
