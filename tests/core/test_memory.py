"""Peak resident memory: a process's own, not its parent's (the stage reports and the runner read it)."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time

import pytest

from finlib.core.memory import PeakWatch, peak_rss_mb

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc (Linux)")

PARENT_MB = 400

# A parent that holds PARENT_MB, then starts a child that reports its peak both ways.
PARENT = textwrap.dedent(f"""
    import subprocess, sys
    held = bytearray({PARENT_MB} * 2**20)
    for i in range(0, len(held), 4096):
        held[i] = 1
    child = ("import json, resource; from finlib.core.memory import peak_rss_mb; "
             "print(json.dumps({{'ours': peak_rss_mb(), "
             "'ru_maxrss_mb': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}}))")
    print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, check=True).stdout)
""")

# A child that holds `mb` for a second, frees it and lives one more second.
HOLDER = textwrap.dedent("""
    import sys, time
    held = bytearray(int(sys.argv[1]) * 2**20)
    for i in range(0, len(held), 4096):
        held[i] = 1
    time.sleep(1.0)
    del held
    time.sleep(1.0)
""")


@linux_only
def test_a_process_started_by_a_large_one_reports_its_own_peak():
    got = json.loads(subprocess.run([sys.executable, "-c", PARENT], capture_output=True, text=True,
                                    check=True).stdout)
    assert got["ours"] < PARENT_MB / 4, got  # an interpreter and one small module
    # the reading it replaces carries the parent's peak across exec: the same check fails on it
    assert got["ru_maxrss_mb"] >= PARENT_MB, got


def test_this_process_has_a_peak():
    held = bytearray(64 * 2**20)
    for i in range(0, len(held), 4096):
        held[i] = 1
    assert peak_rss_mb() >= 64


@linux_only
def test_the_watch_keeps_a_process_peak_after_it_freed_the_memory_and_exited():
    child = subprocess.Popen([sys.executable, "-c", HOLDER, "200"])
    watch = PeakWatch(lambda: [child.pid] if child.poll() is None else [], interval_s=0.05).start()
    child.wait(30)
    time.sleep(0.1)
    peak = watch.stop()
    assert peak is not None and 200 <= peak < 200 + 100, peak


def test_a_process_that_is_gone_has_no_reading():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait(30)
    assert peak_rss_mb(child.pid) is None
    assert PeakWatch(lambda: [child.pid]).start().stop() is None
