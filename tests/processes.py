"""Helpers for tests that start processes which must end: wait for a pid to go, clean up by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import time
from pathlib import Path

# What a timed-out call may take beyond its timeout: the kill grace of module_utils/bounded_run.py
# (5 s) plus time for starting interpreters on a loaded 2-core machine.
AFTER_TIMEOUT = 5 + 3


def gone(pid: int, within: float = 5.0) -> bool:
    """Whether ``pid`` has ended within ``within`` seconds: it no longer exists, or it is a zombie (dead,
    waiting for whoever adopted it to reap it, which a slow init does only every second or two)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if _state(pid) in ("Z", "X", None):
            return True
        time.sleep(0.05)
    return False


def _state(pid: int) -> str | None:
    """The one-letter state of ``pid`` from /proc (None once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[0]


def kill_pid_in(path: Path) -> None:
    """Kill the process whose pid a test helper wrote to ``path``, if it is still there."""
    if path.exists():
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(path.read_text()), signal.SIGKILL)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for a local server a test starts)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
