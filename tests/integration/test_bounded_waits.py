"""Bounded waits, with real timeouts: a hung command, and helpers it leaves in or outside its session.

Moved from tests/unit (issue 12): each test waits for a real timeout (1-2 s) and, where a helper escapes
the session, for bounded_run's kill grace (5 s) too, about 35 s together, which made the unit suite the
slowest part of a developer's loop. The assertions are unchanged. tests/unit keeps fast versions of the
same paths (short timeouts and a short kill grace) so that the unit suite, and so mutation testing,
still reaches them.
"""

import os
import sys
import time
from pathlib import Path

import pytest
from ansible.module_utils.bounded_run import RunTimeout, run_bounded
from ansible.module_utils.nvidia_smi import gpu_facts
from ansible.module_utils.python_probe import ProbeError, run_probe
from fleet import FleetError
from fleet import host as hostlib
from fleet.system import CommandTimeout, run
from processes import AFTER_TIMEOUT, gone, kill_pid_in

pytestmark = pytest.mark.integration

STAND_INS = Path(__file__).resolve().parent.parent / "stand_ins"
STAND_IN = str(STAND_INS / "nvidia-smi")
RECORDINGS = STAND_INS / "nvidia-smi-recordings"


@pytest.fixture
def replay(monkeypatch):
    """facts for a recording: the stand-in replays it (as in tests/unit/test_nvidia_smi.py)."""
    def run(name, module_files=None, timeout=30):
        monkeypatch.setenv("NVIDIA_SMI_RECORDING", str(RECORDINGS / name))
        if module_files is None:
            module_files = [str(RECORDINGS / name / "proc-driver-nvidia-version.txt")]
        return gpu_facts(STAND_IN, timeout=timeout, module_version_files=module_files)
    return run


# module_utils/bounded_run.py (from tests/unit/test_bounded_run.py)

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


# module_utils/python_probe.py (from tests/unit/test_python_probe.py)

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


# module_utils/nvidia_smi.py (from tests/unit/test_nvidia_smi.py)

def test_hung_nvidia_smi_is_bounded(replay, tmp_path):
    facts = replay("hung", module_files=[str(tmp_path / "absent")], timeout=1)
    assert facts["present"] is False
    assert "did not answer within 1 s" in facts["reason"]


def test_hung_nvidia_smi_and_its_helpers_are_bounded(tmp_path):
    # STAND-IN for a hung nvidia-smi that started a helper in its session and one outside it (setsid):
    # the first must be killed with it, the second must not hold gpu_facts beyond timeout + grace.
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\n"
                   f"sleep 30 & echo $! > {tmp_path}/in-session.pid\n"
                   f"setsid sleep 30 & echo $! > {tmp_path}/escaped.pid\n"
                   "exec sleep 30\n")
    smi.chmod(0o755)
    start = time.monotonic()
    try:
        facts = gpu_facts(str(smi), timeout=1, module_version_files=[])
        assert time.monotonic() - start < 1 + AFTER_TIMEOUT
        assert facts["present"] is False
        assert facts["reason"].startswith(f"{smi} did not answer within 1 s (a hung GPU or driver?")
        assert "outside its session (setsid) survived the kill" in facts["reason"]
        assert gone(int((tmp_path / "in-session.pid").read_text())), "nvidia-smi's helper survived"
    finally:
        kill_pid_in(tmp_path / "in-session.pid")
        kill_pid_in(tmp_path / "escaped.pid")


# tests/fleet (from tests/unit/test_fleet_config.py)

def test_command_timeout_is_a_fleet_error_and_kills_what_the_command_started(tmp_path):
    pid_file = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(CommandTimeout, match="did not finish in 1 s"):
        run(["sh", "-c", f"sleep 60 & echo $! > {pid_file}; wait"], timeout=1)
    assert time.monotonic() - started < 10
    grandchild = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while Path(f"/proc/{grandchild}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)  # killed; init reaps it
    assert not Path(f"/proc/{grandchild}").exists() or " Z " in Path(f"/proc/{grandchild}/stat").read_text()


def test_nvcc_that_never_answers_is_a_fleet_error(tmp_path, monkeypatch):
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text("#!/bin/sh\nexec sleep 60\n")
    nvcc.chmod(0o755)
    monkeypatch.delenv("SGLANG_FLEET_CUDA", raising=False)
    monkeypatch.setenv("PATH", f"{nvcc.parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(hostlib, "NVCC_TIMEOUT", 1)
    with pytest.raises(FleetError, match="set SGLANG_FLEET_CUDA"):
        hostlib.cuda_toolkit()
