"""module_utils/sglang_readiness: the diagnostics the gate gathers when a start fails (unit state, journal
tail, process tree), the probe's headers and bounds, and the classifier's fallbacks.

This machine has no systemd (PID 1 is not systemd), so ``systemctl`` and ``journalctl`` are STAND-INS
written per test on PATH: shell scripts that print what systemd 252 prints for these exact calls and
record the arguments they were given. ``ps`` is the real one.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time
import typing

import pytest
from ansible.module_utils import sglang_readiness
from ansible.module_utils.sglang_readiness import (
    classify,
    journal,
    probe,
    process_tree,
    unit_state,
    wait_ready,
)

SHOW = "ActiveState=activating\nSubState=auto-restart\nNRestarts=3\nMainPID=4242\nResult=exit-code\n"


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """stand_in(name, script body) puts a STAND-IN command on PATH; its argv is in tmp_path/<name>.argv."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def make(name, body):
        path = bin_dir / name
        path.write_text(f'#!/bin/sh\nprintf "%s\\n" "$@" > {tmp_path}/{name}.argv\n{body}')
        path.chmod(0o755)
        return lambda: (tmp_path / f"{name}.argv").read_text().splitlines()
    return make


def test_unit_state(stand_in):
    argv = stand_in("systemctl", f"printf '{SHOW}'\n")
    assert unit_state("sglang-main.service") == {"active_state": "activating", "sub_state": "auto-restart",
                                                 "n_restarts": 3, "main_pid": 4242, "result": "exit-code"}
    assert argv() == ["show", "--property=ActiveState,SubState,NRestarts,MainPID,Result",
                      "sglang-main.service"]


def test_unit_state_of_a_unit_systemd_does_not_know(stand_in):
    stand_in("systemctl", "printf 'ActiveState=inactive\\nSubState=dead\\nNRestarts=\\nMainPID=0\\n'\n")
    assert unit_state("nope.service") == {"active_state": "inactive", "sub_state": "dead", "n_restarts": 0,
                                          "main_pid": 0, "result": ""}


def test_unit_state_when_systemctl_fails(stand_in):
    stand_in("systemctl", "echo 'Failed to connect to bus: Host is down' >&2\nexit 1\n")
    assert unit_state("x.service") == {"active_state": "unknown", "sub_state": "", "n_restarts": 0,
                                       "main_pid": 0, "result": ""}


def test_unit_state_keeps_an_equals_sign_in_a_value(stand_in):
    stand_in("systemctl", "printf 'ActiveState=failed\\nResult=a=b\\n'\n")
    assert unit_state("x.service")["result"] == "a=b"


def test_journal_tail_without_systemds_markers(stand_in):
    argv = stand_in("journalctl",
                    "printf -- '-- Boot 1b2c --\\nLoad weight end.\\n\\n   \\nMemory pool end.\\n'\n")
    assert journal("sglang-main.service", 40) == ["Load weight end.", "Memory pool end."]
    assert argv() == ["--no-pager", "-o", "cat", "-n", "40", "-u", "sglang-main.service"]


def test_a_failing_diagnostic_command_says_so(stand_in):
    stand_in("journalctl", "echo 'No journal files were found.'\nexit 1\n")
    assert journal("x.service", 5) == ["(exit 1) No journal files were found."]


def test_a_missing_diagnostic_command_is_named(stand_in, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))     # no journalctl at all
    assert journal("x.service", 5) == ["journalctl: No such file or directory"]


def test_a_hung_diagnostic_command_is_cut_off_with_its_output(stand_in):
    stand_in("journalctl", "echo 'reading the journal'\nexec sleep 5\n")
    text = sglang_readiness._run(["journalctl", "-u", "x.service"], timeout=0.3)
    first, second = text.splitlines()[:2]
    assert "0.3" in first
    assert second == "reading the journal"


def test_process_tree_of_a_real_process_and_its_children():
    parent = subprocess.Popen([sys.executable, "-c", "import subprocess, sys; "
                               "subprocess.Popen(['sleep', '30']).wait()"])
    try:
        deadline = time.monotonic() + 5
        tree = ""
        while time.monotonic() < deadline and "sleep 30" not in tree:
            tree = process_tree(parent.pid)
            time.sleep(0.05)
        lines = tree.splitlines()
        assert lines[0] == "  PID  PPID STAT     ELAPSED COMMAND"
        assert len(lines) == 3
        assert lines[1].split()[0] == str(parent.pid)
        assert lines[2].split()[1] == str(parent.pid)
        assert lines[2].endswith("sleep 30")
        assert str(os.getpid()) not in [line.split()[0] for line in lines[1:]]   # not the caller
    finally:
        subprocess.run(["pkill", "-P", str(parent.pid)], check=False)
        parent.kill()
        parent.wait()


def test_process_tree_without_a_process():
    assert process_tree(0) == "(no process)"


def test_process_tree_of_a_gone_process():
    gone = subprocess.Popen(["true"])
    gone.wait()
    assert process_tree(gone.pid) == "  PID  PPID STAT     ELAPSED COMMAND"


@pytest.mark.parametrize(("lines", "evidence"), [
    (["Load weight end.", "Traceback (most recent call last):", "  KeyError: 'x'  ", "", "  "],
     "KeyError: 'x'"),
    ([], ""),
])
def test_a_crash_without_evidence_names_the_last_line(lines, evidence):
    found = classify(lines, crashed=True)
    assert found == {"cause": "crash", "evidence": evidence,
                     "advice": "the server exited during start-up; read the journal tail above"}


def test_a_hang_without_evidence_names_the_last_line():
    found = classify(["Load weight end.", "  Memory pool end.  ", " "], timed_out=True)
    assert found["cause"] == "hang_after_load"
    assert found["evidence"] == "Memory pool end."
    assert found["advice"].startswith("the process is up but never answered a generation")


def test_evidence_beats_the_crash_and_is_stripped():
    found = classify(["  CUDA out of memory. Tried to allocate 2.00 GiB  ", "exit"], crashed=True)
    assert found["evidence"] == "CUDA out of memory. Tried to allocate 2.00 GiB"
    assert found["advice"].startswith("lower mem_fraction_static")


def test_nothing_known():
    assert classify(["Load weight end."]) == {"cause": "unknown", "evidence": "",
                                              "advice": "read the journal tail and diagnostics"}


# The stand-in servers below answer after `delay` seconds, or at once when the test ends (`release`), so
# a test can give them an answer far slower than any bound it checks and still end quickly. The bounds
# are about what the code waits for, so they keep seconds of slack for a loaded machine.
class _Recorder(http.server.BaseHTTPRequestHandler):
    seen: typing.ClassVar[list] = []
    delay = 0.0
    release = threading.Event()

    def do_GET(self):
        self.seen.append(self.headers.get("Authorization"))
        self.release.wait(self.delay)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


def _serve(handler):
    """Serve ``handler`` (its requests and delay reset) on a free local port; yield the URL."""
    handler.seen, handler.delay, handler.release = [], 0.0, threading.Event()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_port}/health_generate"
    handler.release.set()
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def recorder():
    yield from _serve(_Recorder)


def test_probe_and_wait_send_the_headers(recorder):
    assert probe(recorder, 2, {"Authorization": "Bearer k1"}) == (200, "ok")
    assert wait_ready(recorder, 2, headers={"Authorization": "Bearer k2"}) == (True, 200, "ok")
    assert probe(recorder, 2) == (200, "ok")
    assert _Recorder.seen == ["Bearer k1", "Bearer k2", None]


def test_a_slow_answer_is_a_timeout_not_a_hang(recorder):
    _Recorder.delay = 60.0
    start = time.monotonic()
    status, text = probe(recorder, 0.3)
    assert status is None
    assert "timed out" in text
    assert time.monotonic() - start < 10


def test_wait_ready_bounds_each_request_by_request_timeout(recorder):
    _Recorder.delay = 60.0
    start = time.monotonic()
    assert wait_ready(recorder, 30, poll=0.1, request_timeout=0.2, alive=lambda: False)[0] is False
    assert time.monotonic() - start < 4  # 0.2 s, not the default request timeout of 5 s
    assert len(_Recorder.seen) == 1


def test_wait_ready_polls_once_even_with_no_time_left(recorder):
    assert wait_ready(recorder, 0) == (True, 200, "ok")
    assert wait_ready(recorder, -5) == (True, 200, "ok")


def test_a_diagnostic_commands_errors_are_read_too(stand_in):
    stand_in("journalctl", "echo 'No journal files were found.' >&2\nexit 1\n")
    assert journal("x.service", 5) == ["(exit 1) No journal files were found."]


def test_output_that_is_not_utf8_is_read(stand_in):
    stand_in("journalctl", "printf 'weights \\377 loaded\\n'\n")
    assert journal("x.service", 5) == ["weights \ufffd loaded"]
    stand_in("systemctl", "printf 'ActiveState=act\\377ive\\n'\nexec sleep 5\n")
    text = sglang_readiness._run(["systemctl", "show"], timeout=0.3)
    assert text.splitlines()[1] == "ActiveState=act\ufffdive"


def test_process_tree_when_ps_fails(stand_in):
    stand_in("ps", "echo 'error: unknown user-defined format specifier \"etime=\"'\nexit 1\n")
    assert process_tree(4242) == "  PID  PPID STAT     ELAPSED COMMAND"


def test_a_hang_without_any_line():
    assert classify(["", "  "], timed_out=True) == {
        "cause": "hang_after_load", "evidence": "",
        "advice": "the process is up but never answered a generation: take a stack dump "
                  "(py-spy dump --pid MAINPID), check GPU use (nvidia-smi) and dmesg for Xid"}


def test_a_refused_connection_names_the_reason_only():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]                 # bound, never listening: the connection is refused
        assert probe(f"http://127.0.0.1:{port}/health", 2) == (None, "[Errno 111] Connection refused")


class _NeverReady(http.server.BaseHTTPRequestHandler):
    delay = 0.0
    release = threading.Event()
    seen: typing.ClassVar[list] = []  # when each request came (time.monotonic())

    def do_GET(self):
        self.seen.append(time.monotonic())
        self.release.wait(self.delay)
        self.send_response(503)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def never_ready():
    yield from _serve(_NeverReady)


def test_no_time_left_means_one_probe(never_ready):
    assert wait_ready(never_ready, 0, poll=0.1) == (False, 503, "HTTP 503")
    assert len(_NeverReady.seen) == 1


def test_no_poll_is_started_that_would_end_past_the_deadline(never_ready):
    start = time.monotonic()
    assert wait_ready(never_ready, 2.0, poll=1.5)[0] is False    # probes at 0 and 1.5 s, not at 3 s
    assert time.monotonic() - start >= 1.5
    assert len(_NeverReady.seen) == 2


def test_a_request_is_bounded_by_the_time_left(never_ready):
    _NeverReady.delay = 60.0
    start = time.monotonic()
    status, _text = wait_ready(never_ready, 0.5, request_timeout=5)[1:]
    assert status is None
    assert time.monotonic() - start < 4  # the last request gets at least 0.5 s, not the 5 s asked


def test_the_default_poll_is_a_second(never_ready):
    # 503 at once, then 200 from 0.4 s on: the second probe, one second after the first, sees it
    ready_at = time.monotonic() + 0.4
    original = _NeverReady.do_GET

    def do_get(self):
        if time.monotonic() < ready_at:
            return original(self)
        self.seen.append(time.monotonic())
        self.send_response(200)
        self.end_headers()
        return None

    _NeverReady.do_GET = do_get
    try:
        assert wait_ready(never_ready, 5)[:2] == (True, 200)
        assert len(_NeverReady.seen) == 2
        assert 0.9 < _NeverReady.seen[1] - _NeverReady.seen[0] < 1.9  # one second, not two
    finally:
        _NeverReady.do_GET = original
