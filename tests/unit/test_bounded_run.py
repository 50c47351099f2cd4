"""module_utils/bounded_run.py: the caller's wait is bounded whatever the command leaves behind."""

import subprocess
import sys
import time

import pytest
from ansible.module_utils import bounded_run
from ansible.module_utils.bounded_run import RunTimeout, run_bounded
from processes import gone, kill_pid_in


def test_answer_input_and_streams():
    script = "import sys; data = sys.stdin.read(); print(data.upper()); sys.stderr.write('err'); sys.exit(3)"
    assert run_bounded([sys.executable, "-c", script], 30, input=b"abc") == (3, b"ABC\n", b"err")
    merged = run_bounded([sys.executable, "-c", script], 30, input=b"x", merge_stderr=True)
    assert merged == (3, b"X\nerr", b"")


def test_cannot_start(tmp_path):
    with pytest.raises(FileNotFoundError, match="No such file or directory"):
        run_bounded([str(tmp_path / "missing")], 5)


# Fast versions of the timeout tests in tests/integration/test_bounded_waits.py: the same paths with a
# short timeout and kill grace, and shell helpers (they start in milliseconds, a Python one does not).

@pytest.fixture
def short_grace(monkeypatch):
    monkeypatch.setattr(bounded_run, "KILL_GRACE", 0.3)


def test_timeout_kills_the_session_quickly(tmp_path, short_grace):
    pid_file = tmp_path / "helper.pid"
    script = f"sleep 600 & echo $! > {pid_file}; printf loading >&2; printf partial; wait"
    with pytest.raises(RunTimeout) as caught:
        run_bounded(["sh", "-c", script], 0.5)
    assert (caught.value.stdout, caught.value.stderr, caught.value.leftover) == (b"partial", b"loading", None)
    assert caught.value.argv == ["sh", "-c", script]
    assert caught.value.timeout == 0.5
    assert str(caught.value) == "sh did not finish within 0.5 s and was killed"
    assert gone(int(pid_file.read_text())), "the helper in the command's session survived the timeout"


@pytest.mark.parametrize("command_exits", [False, True], ids=["command-hangs", "command-exits"])
def test_an_escaped_helper_is_left_behind_quickly(tmp_path, short_grace, command_exits):
    pid_file = tmp_path / "escaped.pid"
    script = (f"setsid sleep 30 & echo $! > {pid_file}; printf out; printf err >&2"
              + ("" if command_exits else "; exec sleep 600"))
    start = time.monotonic()
    try:
        with pytest.raises(RunTimeout) as caught:
            run_bounded(["sh", "-c", script], 0.5)
        assert time.monotonic() - start < 0.5 + 0.3 + 2
        assert (caught.value.stdout, caught.value.stderr) == (b"out", b"err")
        assert caught.value.leftover == ("a process it started outside its session (setsid) survived the "
                                         "kill and still holds its output open; left behind")
        assert str(caught.value) == ("sh did not finish within 0.5 s and was killed; "
                                     + caught.value.leftover)
    finally:
        kill_pid_in(pid_file)


@pytest.fixture
def started(monkeypatch):
    """The Popen objects run_bounded creates (killed and reaped at the end of the test)."""
    procs = []
    real_popen = subprocess.Popen

    def recording_popen(*args, **kwargs):
        procs.append(real_popen(*args, **kwargs))
        return procs[-1]

    monkeypatch.setattr(subprocess, "Popen", recording_popen)
    yield procs
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_timeout_closes_the_pipes_it_gives_up_on(tmp_path, short_grace, started):
    pid_file = tmp_path / "escaped.pid"
    try:
        with pytest.raises(RunTimeout):
            run_bounded(["sh", "-c", f"setsid sleep 30 & echo $! > {pid_file}; exec sleep 600"], 0.3,
                        input=b"")
    finally:
        kill_pid_in(pid_file)
    assert started[0].stdin.closed
    assert started[0].stdout.closed
    assert started[0].stderr.closed


def test_a_command_the_kill_cannot_end_is_left_behind(short_grace, started, monkeypatch):
    # STAND-IN for a process stuck in the kernel (D state ignores SIGKILL): the kill is made a no-op.
    monkeypatch.setattr(bounded_run.os, "killpg", lambda pid, sig: None)
    with pytest.raises(RunTimeout) as caught:
        run_bounded(["sleep", "600"], 0.3)
    assert caught.value.leftover == ("it did not exit within 0.3 s after SIGKILL (stuck in the kernel, "
                                     "e.g. in the GPU driver? check dmesg); left behind")
    assert started[0].poll() is None
    assert (caught.value.stdout, caught.value.stderr) == (b"", b"")  # nothing written: empty, not None


def test_a_session_already_gone_at_the_timeout_is_no_error(monkeypatch):
    # The command's process group can vanish between the timeout and the kill (it exited just then).
    def gone_group(pid, sig):
        raise ProcessLookupError(3, "No such process")

    monkeypatch.setattr(bounded_run.os, "killpg", gone_group)
    monkeypatch.setattr(bounded_run, "KILL_GRACE", 5)
    with pytest.raises(RunTimeout) as caught:
        run_bounded(["sh", "-c", "sleep 0.5"], 0.2)
    assert caught.value.leftover is None  # it ended within the grace period by itself


class _PipeThatFailsToClose:
    """A pipe whose close() fails (as a flush into a broken pipe would), after really closing it."""

    def __init__(self, pipe):
        self.pipe = pipe

    def fileno(self):
        return self.pipe.fileno()

    @property
    def closed(self):
        return self.pipe.closed

    def close(self):
        self.pipe.close()
        raise BrokenPipeError(32, "Broken pipe")


def test_a_pipe_that_fails_to_close_does_not_hide_the_timeout(short_grace, started, monkeypatch):
    # The command is left behind (the kill is made a no-op, as for a process stuck in the kernel); closing
    # its stdout fails: the caller still gets the RunTimeout, and the pipes after it are closed too.
    monkeypatch.setattr(bounded_run.os, "killpg", lambda pid, sig: None)
    real_popen = subprocess.Popen

    def popen_with_failing_stdout(*args, **kwargs):
        proc = real_popen(*args, **kwargs)
        proc.stdout = _PipeThatFailsToClose(proc.stdout)
        return proc

    monkeypatch.setattr(subprocess, "Popen", popen_with_failing_stdout)
    with pytest.raises(RunTimeout) as caught:
        run_bounded(["sh", "-c", "printf out; printf err >&2; exec sleep 600"], 0.3)
    assert caught.value.leftover.startswith("it did not exit within 0.3 s after SIGKILL")
    assert (caught.value.stdout, caught.value.stderr) == (b"out", b"err")
    assert started[0].stdout.closed
    assert started[0].stderr.closed
