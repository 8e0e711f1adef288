"""Ctrl-C during a stage reaches the notebook's kernel, not only the runner.

jupyter_client starts a kernel in a process group of its own, so a terminal's Ctrl-C reaches the runner
alone: left to itself, the runner raised KeyboardInterrupt while the kernel went on running the
cell -- sending every pending model call -- until papermill shut it down. While a stage runs, the
first SIGINT is forwarded to the kernel (as Jupyter's "interrupt kernel" does); the kernel's senders
then stop (`finlib.llm.interrupt`) and the cell fails with the count of calls in flight. A second
SIGINT stops the runner at once.
"""
from __future__ import annotations

import os
import shlex
import signal
import threading
import weakref

_KERNELS: weakref.WeakSet = weakref.WeakSet()  # kernel managers this process started


class StageInterrupted(KeyboardInterrupt):
    """A stage stopped at the user's request; the message is the one line to print."""


def track(manager) -> None:
    """Remember a kernel manager so that a Ctrl-C can be forwarded to its kernel."""
    _KERNELS.add(manager)


def kernel_pids() -> list[int]:
    """The process ids of the live kernels this process started (the runner watches their memory)."""
    pids = []
    for manager in list(_KERNELS):
        process = getattr(getattr(manager, "provisioner", None), "process", None)
        if process is not None and process.poll() is None:
            pids.append(process.pid)
    return pids


def interrupt_kernels() -> int:
    """Send SIGINT to every live kernel's process group; returns how many were signalled."""
    n = 0
    for pid in kernel_pids():
        try:
            os.killpg(os.getpgid(pid), signal.SIGINT)
        except OSError:
            continue
        n += 1
    return n


def is_interrupt(exc: BaseException) -> bool:
    """Whether a stage's error is the kernel's answer to an interrupt (KeyboardInterrupt or a subclass)."""
    return getattr(exc, "ename", None) in ("KeyboardInterrupt", "Interrupted") or isinstance(exc, KeyboardInterrupt)


class SigintForwarder:
    """While installed (main thread only): the first SIGINT goes to the kernels; a second one, or
    one with no kernel running yet, raises KeyboardInterrupt here."""

    def __init__(self) -> None:
        self.count = 0
        self._previous = None

    def _handle(self, signum, frame) -> None:
        self.count += 1
        if self.count > 1 or not interrupt_kernels():
            raise KeyboardInterrupt

    def install(self) -> SigintForwarder:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None


def interrupted_line(run: str, stage: str, exc: BaseException | None, params_file: str | None = None) -> str:
    """The one line a stopped run prints: what was in flight and how to resume. `params_file`: the
    params file the run was started with when it is not params/<run>.yaml -- the resume command
    must name it, or it would load another params file (and another store) and pay again."""
    detail = str(getattr(exc, "evalue", "") or "").strip().splitlines()
    if exc is None:
        what = "the stage had finished when the interrupt reached it (its results are kept)"
    elif detail:
        what = detail[-1]
    else:
        what = "stopped outside model calls (no call was being sent)"
    params = f" --params {shlex.quote(params_file)}" if params_file else ""
    return (f"[{run}] stage {stage} interrupted: {what} Resume with: python -m finlib.pipeline.runner --run {run}"
            f"{params} --from {stage} (stored answers are not sent again)")
