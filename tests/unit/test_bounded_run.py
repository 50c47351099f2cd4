"""module_utils/bounded_run.py: the caller's wait is bounded whatever the command leaves behind."""

import sys
import time

import pytest
from ansible.module_utils.bounded_run import RunTimeout, run_bounded
from processes import AFTER_TIMEOUT, gone, kill_pid_in


def test_answer_input_and_streams():
    script = "import sys; data = sys.stdin.read(); print(data.upper()); sys.stderr.write('err'); sys.exit(3)"
    assert run_bounded([sys.executable, "-c", script], 30, input=b"abc") == (3, b"ABC\n", b"err")
    merged = run_bounded([sys.executable, "-c", script], 30, input=b"x", merge_stderr=True)
    assert merged == (3, b"X\nerr", b"")


def test_timeout_kills_the_session_and_keeps_the_output_so_far(tmp_path):
    pid_file = tmp_path / "helper.pid"
    script = ("import subprocess, sys, time\n"
              "helper = subprocess.Popen(['sleep', '600'])\n"
              f"open({str(pid_file)!r}, 'w').write(str(helper.pid))\n"
              "sys.stderr.write('loading'); sys.stderr.flush()\n"
              "time.sleep(600)\n")
    with pytest.raises(RunTimeout) as caught:
        run_bounded([sys.executable, "-c", script], 2)
    assert caught.value.stderr == b"loading"
    assert caught.value.leftover is None
    assert str(caught.value).endswith("did not finish within 2 s and was killed")
    assert gone(int(pid_file.read_text())), "the helper in the command's session survived the timeout"


@pytest.mark.parametrize("command_exits", [False, True], ids=["command-hangs", "command-exits"])
def test_a_helper_outside_the_session_holding_stdout_cannot_hold_the_caller(tmp_path, command_exits):
    pid_file = tmp_path / "escaped.pid"
    script = ("import subprocess, time\n"
              "helper = subprocess.Popen(['sleep', '30'], start_new_session=True)\n"
              f"open({str(pid_file)!r}, 'w').write(str(helper.pid))\n"
              + ("" if command_exits else "time.sleep(600)\n"))
    start = time.monotonic()
    try:
        with pytest.raises(RunTimeout, match=r"outside its session \(setsid\) survived the kill and still "
                                             "holds its output open"):
            run_bounded([sys.executable, "-c", script], 2)
        assert time.monotonic() - start < 2 + AFTER_TIMEOUT
    finally:
        kill_pid_in(pid_file)


def test_cannot_start(tmp_path):
    with pytest.raises(FileNotFoundError, match="No such file or directory"):
        run_bounded([str(tmp_path / "missing")], 5)
