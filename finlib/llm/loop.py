"""The senders' event loop: `asyncio.run`, also from inside Jupyter, with Ctrl-C handled.

A Jupyter kernel already runs an event loop, so the senders' coroutine runs on its own loop in a
worker thread there; a KeyboardInterrupt in the calling thread sets `interrupt.STOP` and the
senders store what is in flight before they stop (`finlib.llm.interrupt`).
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any


def run_coroutine(coro):
    """asyncio.run, also from inside Jupyter (whose kernel already runs an event loop): then the
    coroutine gets its own loop in a worker thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        from finlib.llm.interrupt import STOP

        STOP.clear()
        return asyncio.run(coro)
    return run_in_thread(coro)


class _LoopThread:
    """`asyncio.run(coro)` in a daemon thread: a process whose senders were interrupted exits
    without waiting for calls still held by a stalled server (a pool thread is joined at exit)."""

    def __init__(self, coro) -> None:
        self._done = threading.Event()
        self._outcome: dict[str, Any] = {}
        threading.Thread(target=self._run, args=(coro,), name="finlib-senders", daemon=True).start()

    def _run(self, coro) -> None:
        try:
            self._outcome["value"] = asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 -- handed to the waiting thread as is
            self._outcome["error"] = exc
        finally:
            self._done.set()

    def result(self):
        """Wait for the loop (interruptible: a Ctrl-C lands between short waits) and return its value."""
        while not self._done.wait(0.1):
            pass
        if "error" in self._outcome:
            raise self._outcome["error"]
        return self._outcome["value"]


def run_in_thread(coro):
    """Run `coro` on its own event loop in a worker thread. A KeyboardInterrupt in this thread
    (Ctrl-C, a kernel interrupt) sets `interrupt.STOP`: the senders start nothing new, store what is
    in flight as it finishes (within `openai_backend.STOP_GRACE_S`) and raise `Interrupted` with the
    count; a second one stops waiting at once."""
    from finlib.llm.interrupt import STOP, Interrupted

    STOP.clear()  # a new call: an earlier interrupt is over
    loop_thread = _LoopThread(coro)
    try:
        return loop_thread.result()
    except Interrupted:
        raise
    except KeyboardInterrupt:
        STOP.set()
    try:
        result = loop_thread.result()  # the calls in flight finish and are stored; nothing new starts
    except KeyboardInterrupt as exc:  # Interrupted from the senders, or a second Ctrl-C: stop waiting
        if not isinstance(exc, Interrupted):
            raise Interrupted(
                "interrupted twice: stopped waiting for the calls in flight (answers that "
                "arrive are still stored). Rerun the same command to resume."
            ) from None
        raise
    del result
    raise Interrupted(
        "interrupted after the calls had finished (all stored). Rerun the same command to go on from the next step."
    )
