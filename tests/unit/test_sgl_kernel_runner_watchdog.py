"""The watchdog of module_utils/sgl_kernel_runner.py counts and kills the build's processes: its session
and the processes that left it but carry the build's marker (sccache's server and its compilers)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from ansible.module_utils import sgl_kernel_runner as runner

HOLD = ["sleep", "30"]

# Markers are looked up over every process on the host: a fixed one would also find the processes of
# this test running at the same time elsewhere (another worktree, a mutmut run), so each run has its own.
RUN = f"test-{os.getpid()}"


@pytest.fixture
def spawn():
    started = []

    def start(argv, **env):
        process = subprocess.Popen(argv, env=dict(os.environ, **env), start_new_session=True)
        started.append(process)
        return process

    yield start
    for process in started:
        process.kill()
        process.wait()


def _state_and_rss(pid):
    """(state letter, resident pages) of a process, from /proc/<pid>/stat and statm."""
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        state = handle.read().rsplit(")", 1)[1].split()[0]
    with open(f"/proc/{pid}/statm", encoding="ascii") as handle:
        return state, int(handle.read().split()[1])


def settle(process):
    """Wait until the child runs its own program and sleeps in it: its environ and RSS are then the
    program's. A child whose cmdline already says `sleep` may still be in the dynamic loader, with a
    fraction of its final RSS (128 KiB against 1.6 MiB seen under load), so it must also be asleep
    (state S) with the same RSS on two reads."""
    deadline = time.monotonic() + 10
    last = None
    while time.monotonic() < deadline:
        with open(f"/proc/{process.pid}/cmdline", "rb") as handle:
            started = handle.read().startswith(b"sleep")
        now = _state_and_rss(process.pid) if started else None
        if now is not None and now[0] == "S" and now == last:
            return
        last = now
        time.sleep(0.02)
    raise AssertionError("the child never started")


def test_marked_processes_of_other_sessions_are_the_builds(spawn):
    marked = spawn(HOLD, **{runner.BUILD_MARKER: f"{RUN}-build-1"})
    other_build = spawn(HOLD, **{runner.BUILD_MARKER: f"{RUN}-build-10"})
    unmarked = spawn(HOLD)
    for process in (marked, other_build, unmarked):
        settle(process)
    found = runner.build_processes(session_id=999999999, marker=f"{RUN}-build-1")
    assert list(found) == [marked.pid]
    assert found[marked.pid] > 0
    assert runner.build_processes(session_id=999999999) == {}
    assert runner.build_processes(session_id=999999999, marker="") == {}
    assert abs(runner.session_rss(999999999, f"{RUN}-build-1") - found[marked.pid]) <= found[marked.pid] // 10


def test_the_session_is_the_builds(spawn):
    leader = spawn(HOLD)
    settle(leader)
    found = runner.build_processes(leader.pid)
    assert list(found) == [leader.pid]
    assert found[leader.pid] > 0
    assert abs(runner.session_rss(leader.pid) - found[leader.pid]) <= found[leader.pid] // 10


def test_kill_stops_the_session_and_the_marked_processes(spawn):
    leader = spawn(HOLD)
    marked = spawn(HOLD, **{runner.BUILD_MARKER: f"{RUN}-build-2"})
    bystander = spawn(HOLD, **{runner.BUILD_MARKER: f"{RUN}-build-3"})
    for process in (leader, marked, bystander):
        settle(process)
    runner._kill_session(leader.pid, f"{RUN}-build-2")
    assert leader.wait(timeout=5) == -9
    assert marked.wait(timeout=5) == -9
    assert bystander.poll() is None


def test_watchdog_stops_memory_that_left_the_session(tmp_path):
    # like sccache's server: the memory is used by a process that made a session of its own
    escaped = ("import os, time\n"
               "child = os.fork()\n"
               "if child:\n    os.waitpid(child, 0)\n"
               "else:\n    os.setsid(); open(os.environ['PIDFILE'], 'w').write(str(os.getpid()))\n"
               "    x = bytearray(200 << 20); time.sleep(20)\n")
    pidfile = tmp_path / "pid"
    start = time.monotonic()
    status = runner.run_limited([sys.executable, "-c", escaped], log_path=str(tmp_path / "log"),
                                status_path=str(tmp_path / "status.json"), limit_bytes=64 << 20, timeout=15,
                                env=dict(os.environ, PIDFILE=str(pidfile)), mechanisms=("watchdog",))
    assert status["mechanism"] == "watchdog"
    assert status["killed_by"].startswith("watchdog: the build's processes used"), status
    assert status["rc"] == -9
    assert time.monotonic() - start < 10
    # killed past the limit: how far past depends on when the watchdog looked while the child was
    # still filling its 200 MiB (115 MB seen under load)
    assert status["peak_bytes"] > 64 << 20
    assert not alive(int(pidfile.read_text()))


def alive(pid):
    """Running, not gone or a zombie waiting for its (re)parent."""
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as handle:
                if handle.read().rsplit(")", 1)[-1].split()[0] == "Z":
                    return False
        except FileNotFoundError:
            return False
        time.sleep(0.1)
    return True
