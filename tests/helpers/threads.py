"""Calling something that might block forever (a write into a FIFO, a read of a pipe) from a
test without letting the test hang: the call runs in a daemon thread and the test fails when it
is still running after its bound."""

from __future__ import annotations

import threading
from typing import Any, Callable


def call_within(fn: Callable[[], Any], seconds: float = 5.0,
                hang: str = "the call waited without bound (a hang)") -> Any:
    """``fn()``'s value, or what it raised; an AssertionError saying ``hang`` when it has not
    returned after ``seconds``."""
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), hang
    if "error" in out:
        raise out["error"]
    return out.get("value")
