"""Run a command with a hard bound on the time the caller waits, whatever the command leaves behind.

``subprocess.run(timeout=...)`` bounds only the first wait: after the timeout it kills the child and then
waits for it (and ``communicate()`` for the end of its output) without a limit. Two real cases make that
wait endless: a process stuck in the kernel (a GPU driver call in D state ignores SIGKILL until it
returns), and a process the command started in a session of its own (``setsid``), which the kill does
not reach and which keeps the command's stdout open. Here the command runs in a new session, a timeout
kills that whole session, the output gets a short grace period, and then the caller gets an answer.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import contextlib
import os
import signal
import subprocess

KILL_GRACE = 5  # seconds to wait for the output to close after SIGKILL


class RunTimeout(Exception):
    """The command did not finish in time and was killed.

    ``stdout``/``stderr`` hold what it wrote before (bytes); ``leftover`` is None when the kill ended it,
    else why the caller stopped waiting (a process that survived or still holds the output).
    """

    def __init__(self, argv, timeout, stdout, stderr, leftover):
        self.argv, self.timeout = argv, timeout
        self.stdout, self.stderr, self.leftover = stdout or b"", stderr or b"", leftover
        message = f"{argv[0]} did not finish within {timeout} s and was killed"
        super().__init__(message + (f"; {leftover}" if leftover else ""))


def run_bounded(argv, timeout, input=None, cwd=None, merge_stderr=False):
    """(returncode, stdout bytes, stderr bytes) of ``argv``, in at most about ``timeout + KILL_GRACE`` s.

    ``input`` (bytes) goes to stdin; ``merge_stderr`` sends stderr into stdout (stderr is then b"").
    Raises OSError when the command cannot start and RunTimeout when it had to be killed.
    """
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
        cwd=cwd, start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(input, timeout=timeout)
        return proc.returncode, stdout, stderr or b""
    except subprocess.TimeoutExpired:
        pass
    # The session id is the child's pid: this reaches everything it started that did not leave it.
    with contextlib.suppress(OSError):
        os.killpg(proc.pid, signal.SIGKILL)
    try:
        stdout, stderr = proc.communicate(timeout=KILL_GRACE)
        leftover = None
    except subprocess.TimeoutExpired as exc:
        stdout, stderr = exc.output, exc.stderr
        if proc.poll() is None:
            leftover = (f"it did not exit within {KILL_GRACE} s after SIGKILL (stuck in the kernel, e.g. "
                        "in the GPU driver? check dmesg); left behind")
        else:
            leftover = ("a process it started outside its session (setsid) survived the kill and still "
                        "holds its output open; left behind")
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
    raise RunTimeout(argv, timeout, stdout, stderr, leftover)
