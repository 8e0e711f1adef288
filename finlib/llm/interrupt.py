"""Ctrl-C while model calls are being sent: stop spending, keep what is stored.

A Jupyter kernel runs the senders' event loop in a worker thread (`loop.run_coroutine`), so the
KeyboardInterrupt a kernel interrupt raises lands in the main thread, not in the loop: without a
signal the loop would go on sending every pending call. `STOP` is that signal, process-wide and
thread-safe: once set, no worker takes a new request or starts a new attempt, backoff waits end at
once, and the calls in flight are stored as they finish; the sender then raises `Interrupted`
saying how many calls were in flight. A new `loop.run_coroutine` clears it (the user ran a cell again).
"""
from __future__ import annotations

import asyncio
import threading
import weakref


class Interrupted(KeyboardInterrupt):
    """Sending stopped at the user's request (Ctrl-C, a kernel interrupt); the message says how many
    calls were in flight and that a rerun resumes (stored answers are not sent again)."""


class ThreadsafeEvent:
    """A threading.Event that each event loop can also await (`event()`), set from any thread (the
    interrupt below; an open circuit breaker, `openai_backend.Breaker`)."""

    def __init__(self) -> None:
        self._set = threading.Event()
        self._lock = threading.Lock()
        self._events: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # loop -> asyncio.Event

    def is_set(self) -> bool:
        return self._set.is_set()

    def event(self) -> asyncio.Event:
        """This event loop's event, set when (or if already) the signal is."""
        loop = asyncio.get_running_loop()
        with self._lock:
            ev = self._events.get(loop)
            if ev is None:
                ev = self._events[loop] = asyncio.Event()
                if self._set.is_set():
                    ev.set()
        return ev

    def set(self) -> None:
        with self._lock:
            self._set.set()
            items = list(self._events.items())
        for loop, ev in items:
            if not loop.is_closed():
                loop.call_soon_threadsafe(ev.set)

    def clear(self) -> None:
        with self._lock:
            self._set.clear()
            for ev in self._events.values():
                ev.clear()


STOP = ThreadsafeEvent()


def resume_hint(in_flight: int, answered: int) -> str:
    """The one line a stopped sender raises with."""
    return (f"interrupted: no call was started after the signal; {in_flight} call(s) were in flight "
            f"({answered} answered and stored, {in_flight - answered} not answered). Rerun the same command "
            "to resume: stored answers are not sent again.")
