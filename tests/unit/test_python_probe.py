"""module_utils/python_probe.py: running probes in another interpreter, bounded, with clear failures."""

import os
import sys
import time

import pytest
from ansible.module_utils.python_probe import MARKER, ProbeError, resolve_python, run_probe
from processes import AFTER_TIMEOUT, gone, kill_pid_in


def test_answer_survives_noise_on_stdout():
    script = (f"print('banner from some import')\nprint({MARKER!r} + '{{not json')\n"
              "answer({'argv': sys.argv[1:]})\n")
    assert run_probe(sys.executable, script, args=["a", 2]) == {"argv": ["a", "2"]}


def test_cwd_cannot_shadow_packages(tmp_path, monkeypatch):
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "__init__.py").write_text("raise SystemExit('shadowed')\n")
    monkeypatch.chdir(tmp_path)
    assert run_probe(sys.executable, "import os\nanswer({'cwd': os.getcwd()})\n") == {"cwd": "/"}


def test_resolve_python_errors(tmp_path):
    with pytest.raises(ProbeError, match="does not exist; give the interpreter"):
        resolve_python(str(tmp_path / "bin" / "python"))
    with pytest.raises(ProbeError, match="is a directory; give the interpreter inside it"):
        resolve_python(str(tmp_path))
    plain = tmp_path / "python"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    with pytest.raises(ProbeError, match="is not executable"):
        resolve_python(str(plain))
    with pytest.raises(ProbeError, match="is not on PATH"):
        resolve_python("python-that-does-not-exist-4")
    with pytest.raises(ProbeError, match="must be the path of a Python interpreter"):
        resolve_python("")
    assert os.path.isabs(resolve_python("python3"))


def test_timeout_kills_the_whole_session(tmp_path):
    # The probe starts a helper that keeps our pipes open, then hangs: both must go, promptly.
    pid_file = tmp_path / "helper.pid"
    script = (
        "import subprocess, time\n"
        "helper = subprocess.Popen(['sleep', '600'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(helper.pid))\n"
        "time.sleep(600)\n"
    )
    start = time.monotonic()
    with pytest.raises(ProbeError, match=r"did not finish within 2 s and was killed \(a hung import"):
        run_probe(sys.executable, script, timeout=2, what="the hang probe")
    assert time.monotonic() - start < 30
    assert gone(int(pid_file.read_text())), "the helper process survived the timeout"


def test_timeout_is_bounded_when_a_helper_escapes_the_session(tmp_path):
    # A helper in a session of its own survives the kill and keeps our stdout open: the wait is still
    # bounded (it was endless before), and the message says what was left behind.
    pid_file = tmp_path / "escaped.pid"
    script = ("import subprocess, time\n"
              "helper = subprocess.Popen(['sleep', '30'], start_new_session=True)\n"
              f"open({str(pid_file)!r}, 'w').write(str(helper.pid))\n"
              "time.sleep(600)\n")
    start = time.monotonic()
    try:
        with pytest.raises(ProbeError, match=r"did not finish within 2 s and was killed \(a hung import.*; "
                                             r"a process it started outside its session \(setsid\)"):
            run_probe(sys.executable, script, timeout=2, what="the escape probe")
        assert time.monotonic() - start < 2 + AFTER_TIMEOUT
    finally:
        kill_pid_in(pid_file)


def test_crash_and_missing_answer():
    with pytest.raises(ProbeError, match=r"was killed by signal 6 without an answer"):
        run_probe(sys.executable, "import os\nos.abort()\n")
    with pytest.raises(ProbeError, match=r"exited with status 3 without an answer.*went wrong"):
        run_probe(sys.executable, "sys.stderr.write('went wrong')\nsys.exit(3)\n")
    with pytest.raises(ProbeError, match="malformed answer"):
        run_probe(sys.executable, f"print({MARKER!r} + '{{bad')\n")


@pytest.mark.parametrize(("script", "status"), [
    ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n", "was killed by signal 11"),
    ("raise RuntimeError('broken extension')\n", "exited with status 1"),
])
def test_a_python_that_started_is_not_asked_whether_it_is_python(script, status):
    # The hint about the interpreter is for one that never ran the prelude, not for a crash in the probe.
    with pytest.raises(ProbeError, match=rf"^the crash probe in .* {status} without an answer") as caught:
        run_probe(sys.executable, script, what="the crash probe")
    assert "Python 3 interpreter" not in str(caught.value)


def test_not_python(tmp_path):
    shell = tmp_path / "python"
    shell.write_text("#!/bin/sh\necho 'I am not python'\nexit 0\n")
    shell.chmod(0o755)
    with pytest.raises(ProbeError, match=r"exited with status 0 without an answer \(is it a Python 3 "
                                         r"interpreter\?\); output: I am not python"):
        run_probe(str(shell), "answer({})\n")


@pytest.mark.parametrize("timeout", [0, -1, True, "10"])
def test_bad_timeout(timeout):
    with pytest.raises(ProbeError, match="timeout must be a positive number of seconds"):
        run_probe(sys.executable, "answer({})\n", timeout=timeout)
