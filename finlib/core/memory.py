"""Peak resident memory of a process: one definition for every stage report and benchmark.

Why not `getrusage(RUSAGE_SELF).ru_maxrss`: Linux carries the high-water mark across `execve`, so a
process started by a large one (a notebook kernel started by the runner, which in the rehearsal also
holds the simulated servers) reports its parent's peak as its own. `VmHWM` in /proc/<pid>/status is
the high-water mark of the process's own address space, which `execve` replaces. Where /proc is
absent (macOS), `ru_maxrss` is the fallback for the calling process (bytes there, KiB on Linux).
"""
from __future__ import annotations

import resource
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path


def peak_rss_mb(pid: int | str = "self") -> float | None:
    """The largest resident memory (MB) of process `pid` (default: this one) since it started its
    program; None for another process that has exited or cannot be read."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        status = ""
    for line in status.splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    if pid != "self":
        return None
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(maxrss / (2**20 if sys.platform == "darwin" else 1024), 1)


class PeakWatch:
    """The largest `peak_rss_mb` of the processes `pids()` names, read every `interval_s` in a
    daemon thread until `stop()`: the runner's record of a notebook kernel's peak, which the kernel's
    own high-water mark holds until it exits (read up to `interval_s` before the end)."""

    def __init__(self, pids: Callable[[], Iterable[int]], interval_s: float = 0.25) -> None:
        self._pids, self._interval = pids, interval_s
        self._peaks: dict[int, float] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="finlib-peak-watch", daemon=True)

    def start(self) -> PeakWatch:
        self._thread.start()
        return self

    def _read(self) -> None:
        for pid in self._pids():
            peak = peak_rss_mb(pid)
            if peak is not None:
                self._peaks[pid] = max(self._peaks.get(pid, 0.0), peak)

    def _watch(self) -> None:
        while not self._done.wait(self._interval):
            self._read()

    def stop(self) -> float | None:
        """Stop watching; the largest peak of one watched process (None: none was read)."""
        self._read()  # the last reading, while the process may still be there
        self._done.set()
        self._thread.join(5)
        return max(self._peaks.values(), default=None)
