"""module_utils/python_probe.py: running probes in another interpreter, bounded, with clear failures."""

import os
import sys

import pytest
from ansible.module_utils import bounded_run, python_probe
from ansible.module_utils.python_probe import MARKER, PRELUDE, ProbeError, resolve_python, run_probe


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


def test_resolve_python_messages_in_full(tmp_path, monkeypatch):
    missing = str(tmp_path / "bin" / "python")
    cases = [
        (missing, f"python {missing} does not exist; give the interpreter of the environment to inspect "
                  "(e.g. <venv>/bin/python)"),
        (str(tmp_path), f"python {tmp_path} is a directory; give the interpreter inside it (e.g. "
                        f"{tmp_path}/bin/python)"),
        ("python-that-does-not-exist-4",
         "python 'python-that-does-not-exist-4' is not on PATH; give the full path of the interpreter"),
        ("", "python must be the path of a Python interpreter, e.g. /opt/sglang/venv/bin/python"),
        (None, "python must be the path of a Python interpreter, e.g. /opt/sglang/venv/bin/python"),
    ]
    plain = tmp_path / "python"
    plain.write_text("#!/bin/sh\n")
    plain.chmod(0o644)
    cases.append((str(plain),
                  f"python {plain} is not executable (check its mode and the mount's noexec flag)"))
    for python, message in cases:
        with pytest.raises(ProbeError) as caught:
            resolve_python(python)
        assert str(caught.value) == message


@pytest.mark.parametrize(("text", "shown"), [
    ("S" + "x" * 1998 + "E", "S" + "x" * 1998 + "E"),  # 2000 characters: all of it
    ("S" + "x" * 1999 + "E", "..." + "x" * 1999 + "E"),  # 2001: the last 2000
])
def test_only_the_end_of_a_long_error_is_kept(text, shown):
    with pytest.raises(ProbeError) as caught:
        run_probe(sys.executable, f"sys.stderr.write({text!r})\nsys.exit(3)\n")
    assert str(caught.value).endswith(f"exited with status 3 without an answer; output: {shown}")


def test_the_default_name_of_a_probe_in_its_errors():
    expected = rf"^probe in {sys.executable} exited with status 3 without an answer$"
    with pytest.raises(ProbeError, match=expected):
        run_probe(sys.executable, "sys.exit(3)\n")


def test_an_interpreter_that_cannot_be_started(tmp_path):
    garbage = tmp_path / "python"
    garbage.write_bytes(b"\x00\x01 not an executable format\n")
    garbage.chmod(0o755)
    with pytest.raises(ProbeError, match=rf"^cannot start {garbage}: \[Errno 8\] Exec format error"):
        run_probe(str(garbage), "answer({})\n")


def test_undecodable_output_is_shown_replaced():
    script = "sys.stdout.flush()\nos.write(1, b'out \\xff')\nos.write(2, b'err \\xfe')\nsys.exit(3)\n"
    with pytest.raises(ProbeError, match=r"exited with status 3 without an answer; output: err \ufffd$"):
        run_probe(sys.executable, "import os\n" + script)
    with pytest.raises(ProbeError, match=r"exited with status 3 without an answer; output: out \ufffd$"):
        run_probe(sys.executable, "import os\nsys.stdout.flush()\nos.write(1, b'out \\xff')\nsys.exit(3)\n")


def test_an_answer_after_undecodable_noise():
    assert run_probe(sys.executable, "import os\nos.write(1, b'\\xff\\n')\nanswer({'ok': 1})\n") == {"ok": 1}


def test_the_started_marker_is_not_shown_as_output():
    with pytest.raises(ProbeError, match=r"exited with status 3 without an answer; output: half done$"):
        run_probe(sys.executable, "print('half done')\nsys.exit(3)\n")


# The message of a timeout, for each combination of what run_bounded reports. A stand-in for run_bounded
# raises RunTimeout at once (after checking what it was asked to run); the real kill, of a probe that
# hangs and of one whose helper escapes its session, is timed in tests/integration/test_bounded_waits.py.
@pytest.mark.parametrize(("stderr", "leftover", "tail"), [
    (b"", None, ""),
    (b"  \n", None, ""),
    (b"loading \xff", None, "; stderr: loading \ufffd"),
    (b"", "it was left behind", "; it was left behind"),
    (b"x", "it was left behind", "; it was left behind; stderr: x"),
])
def test_timeout_message_parts(monkeypatch, stderr, leftover, tail):
    def hangs(argv, timeout, input=None, cwd=None):
        assert (argv, timeout, cwd) == ([os.path.abspath(sys.executable), "-", "a", "2"], 7, "/")
        assert input == (PRELUDE + "answer({})\n").encode()
        raise bounded_run.RunTimeout(argv, timeout, b"", stderr, leftover)

    monkeypatch.setattr(python_probe, "run_bounded", hangs)
    with pytest.raises(ProbeError) as caught:
        run_probe(sys.executable, "answer({})\n", args=["a", 2], timeout=7)
    assert str(caught.value) == (
        f"probe in {os.path.abspath(sys.executable)} did not finish within 7 s and was killed (a hung "
        f"import or CUDA initialisation?); raise timeout if the host is just slow{tail}")
