"""module_utils/sgl_kernel_runner: the details the mutation run (bench/mutation_score.py) found untested.

The limit probes against a temporary cgroup tree, the process scan against a made-up /proc, run_limited's
decisions with a stand-in process (no build runs, nothing sleeps), the status file, and the log readers.
"""

from __future__ import annotations

import ctypes
import io
import json
import os
import re
import signal
import subprocess

import pytest
from ansible.module_utils import sgl_kernel_runner as runner
from locales import c_locale

PAGE = os.sysconf("SC_PAGE_SIZE")


def stat_line(pid, session, rss_pages, name="cc1plus"):
    # fields after the command: state ppid pgrp session ... (20) vsize (21) rss (22) rsslim
    after = ["S", "1", str(pid), str(session)] + ["0"] * 11 + ["20", "0", "1", "0", "100", "999999",
                                                                 str(rss_pages), "18446744073709551615"]
    return f"{pid} ({name}) " + " ".join(after)


@pytest.fixture
def fake_proc(monkeypatch):
    """A /proc of the given {pid: stat text}, plus 'self' and a pid whose stat is gone."""
    stats = {}
    real_read = runner._read

    def read(path):
        if path.startswith("/proc/"):
            return stats.get(path.split("/")[2])
        return real_read(path)

    monkeypatch.setattr(runner.os, "listdir", lambda path: ["self", "99", *stats] if path == "/proc" else [])
    monkeypatch.setattr(runner, "_read", read)
    return stats


def test_read_strips_and_is_none_when_missing(tmp_path):
    (tmp_path / "f").write_text("  12\n")
    assert runner._read(str(tmp_path / "f")) == "12"
    assert runner._read(str(tmp_path / "absent")) is None


def test_is_cgroup2(tmp_path):
    assert not runner._is_cgroup2(str(tmp_path))
    (tmp_path / "cgroup.controllers").write_text("")
    assert runner._is_cgroup2(str(tmp_path))


def test_build_processes_of_a_session(fake_proc):
    fake_proc.update({"10": stat_line(10, 10, 5), "11": stat_line(11, 10, 7, name="a) b"),
                      "12": stat_line(12, 99, 9), "13": "13 (short) S 1 13 10"})
    assert runner.build_processes(10) == {10: 5 * PAGE, 11: 7 * PAGE}
    assert runner.session_rss(10) == 12 * PAGE
    assert runner.session_rss("10") == 12 * PAGE
    assert runner.build_processes(11) == {}


def test_build_processes_adds_the_marked_ones(fake_proc, monkeypatch):
    fake_proc.update({"10": stat_line(10, 10, 5), "12": stat_line(12, 99, 9), "14": stat_line(14, 98, 1)})
    seen = []

    def marked(pid, marker):
        seen.append((pid, marker))
        return pid == "12"

    monkeypatch.setattr(runner, "_marked", marked)
    assert runner.build_processes(10, "m") == {10: 5 * PAGE, 12: 9 * PAGE}
    assert ("12", "m") in seen
    assert ("14", "m") in seen
    seen.clear()
    assert runner.build_processes(10) == {10: 5 * PAGE}
    assert seen == []


def test_build_processes_of_this_process():
    found = runner.build_processes(os.getsid(0))
    with open("/proc/self/statm") as handle:
        resident = int(handle.read().split()[1]) * PAGE
    assert os.getpid() in found
    assert resident / 2 < found[os.getpid()] < resident * 2


def test_marked_reads_the_environment_entry_exactly(monkeypatch):
    environ = b"A=1\0SGL_KERNEL_BUILD_MARKER=build-1\0B=2"
    opened = []

    def fake_open(path, mode="r"):
        opened.append((path, mode))
        if path != "/proc/42/environ":
            raise FileNotFoundError(path)
        return io.BytesIO(environ)

    monkeypatch.setattr(runner, "open", fake_open, raising=False)
    assert runner._marked("42", "build-1") is True
    assert opened == [("/proc/42/environ", "rb")]
    assert runner._marked("42", "build") is False
    assert runner._marked("42", "build-12") is False
    assert runner._marked("43", "build-1") is False


def test_kill_session_kills_the_group_then_the_marked(monkeypatch):
    calls = []

    def killpg(pid, sig):
        calls.append(("killpg", pid, sig))
        raise ProcessLookupError(pid)

    def kill(pid, sig):
        calls.append(("kill", pid, sig))
        if pid == 7:
            raise ProcessLookupError(pid)

    monkeypatch.setattr(runner.os, "killpg", killpg)
    monkeypatch.setattr(runner.os, "kill", kill)
    monkeypatch.setattr(runner, "build_processes",
                        lambda sid, marker=None: {7: 1, 8: 2} if marker and sid == 5 else {})
    runner._kill_session(5, "m")
    assert calls == [("killpg", 5, signal.SIGKILL), ("kill", 7, signal.SIGKILL), ("kill", 8, signal.SIGKILL)]
    calls.clear()
    runner._kill_session(5)
    assert calls == [("killpg", 5, signal.SIGKILL)]


@pytest.fixture
def v1(tmp_path, monkeypatch):
    root = tmp_path / "memory"
    root.mkdir()
    monkeypatch.setattr(runner, "V1_ROOT", str(root))
    return root


def test_setup_cgroup_v1_without_a_hierarchy(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "V1_ROOT", str(tmp_path / "none"))
    assert runner.setup_cgroup_v1("b", 1 << 30) == (None, f"no v1 memory hierarchy at {tmp_path / 'none'}")
    (tmp_path / "cgroup.controllers").write_text("memory")
    monkeypatch.setattr(runner, "V1_ROOT", str(tmp_path))
    assert runner.setup_cgroup_v1("b", 1 << 30) == (None, f"no v1 memory hierarchy at {tmp_path}")


def test_setup_cgroup_v1_writes_and_reads_back(v1):
    parent = v1 / "sglang-fleet"
    (parent / "empty-old").mkdir(parents=True)
    (parent / "busy-old").mkdir()
    (parent / "busy-old" / "cgroup.procs").write_text("1")
    (parent / "a-file").write_text("x")
    (parent / "b").mkdir()
    (parent / "b" / "memory.memsw.limit_in_bytes").write_text("0")
    path, detail = runner.setup_cgroup_v1("b", 1 << 30)
    assert path == str(parent / "b")
    assert detail == f"v1 memory.limit_in_bytes reads back {1 << 30}"
    assert (parent / "b" / "memory.limit_in_bytes").read_text() == str(1 << 30)
    assert (parent / "b" / "memory.memsw.limit_in_bytes").read_text() == str(1 << 30)
    assert sorted(p.name for p in parent.iterdir()) == ["a-file", "b", "busy-old"]


def test_setup_cgroup_v1_without_swap_accounting(v1):
    path, _detail = runner.setup_cgroup_v1("c", 1 << 20)
    assert sorted(os.listdir(path)) == ["memory.limit_in_bytes"]


def test_setup_cgroup_v1_not_writable(v1):
    (v1 / "sglang-fleet").write_text("a file where the directory belongs")
    assert runner.setup_cgroup_v1("b", 1 << 30) == (
        None, "the v1 memory hierarchy is not writable here (Not a directory)")


@pytest.mark.parametrize(("written", "ok"), [(lambda limit: limit - limit % PAGE, True),
                                             (lambda limit: limit - PAGE + 1, True),
                                             (lambda limit: limit + PAGE - 1, True),
                                             (lambda limit: limit - PAGE, False),
                                             (lambda limit: limit + PAGE, False)])
def test_setup_cgroup_v1_accepts_the_kernels_page_rounding(v1, monkeypatch, written, ok):
    limit = 1_000_000 + PAGE // 3
    real_write = runner._write

    def write(path, text):
        real_write(path, str(written(int(text))) if path.endswith("memory.limit_in_bytes") else text)

    monkeypatch.setattr(runner, "_write", write)
    path, detail = runner.setup_cgroup_v1("b", limit)
    value = written(limit)
    if ok:
        assert path == str(v1 / "sglang-fleet" / "b")
        assert detail == f"v1 memory.limit_in_bytes reads back {value}"
    else:
        assert (path, detail) == (None, f"v1 memory.limit_in_bytes reads back '{value}', not {limit}")


def test_setup_cgroup_v1_limit_that_cannot_be_read_back(v1, monkeypatch):
    monkeypatch.setattr(runner, "_read", lambda path: None)
    assert runner.setup_cgroup_v1("b", 4096) == (None, "v1 memory.limit_in_bytes reads back None, not 4096")


@pytest.fixture
def v2(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "V2_ROOT", str(tmp_path))
    monkeypatch.setattr(runner.shutil, "which",
                        lambda name: "/usr/bin/systemd-run" if name == "systemd-run" else None)
    real_isdir = os.path.isdir
    monkeypatch.setattr(runner.os.path, "isdir", lambda p: p == "/run/systemd/system" or real_isdir(p))
    sleeps = []
    monkeypatch.setattr(runner.time, "sleep", sleeps.append)
    monkeypatch.setattr(runner, "SLEEPS", sleeps, raising=False)
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    return tmp_path


def test_probe_cgroup_v2_needs_systemd(monkeypatch):
    monkeypatch.setattr(runner.shutil, "which", lambda name: None)
    assert runner.probe_cgroup_v2(1) == (False, "systemd-run or a running systemd is missing")
    monkeypatch.setattr(runner.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(runner.os.path, "isdir", lambda p: False)
    assert runner.probe_cgroup_v2(1) == (False, "systemd-run or a running systemd is missing")


def test_probe_cgroup_v2_needs_the_memory_controller(v2):
    (v2 / "cgroup.controllers").write_text("cpu io pids\n")
    assert runner.probe_cgroup_v2(1) == (False, f"{v2} is not a cgroup2 hierarchy with the memory controller")
    (v2 / "cgroup.controllers").unlink()
    assert runner.probe_cgroup_v2(1) == (False, f"{v2} is not a cgroup2 hierarchy with the memory controller")


class Sleeper:
    def __init__(self, argv, log):
        log.append(("popen", argv))
        self.log = log

    def kill(self):
        self.log.append("kill")

    def wait(self):
        self.log.append("wait")


def probe_with(monkeypatch, answer, memory_max):
    """probe_cgroup_v2 with systemd-run answering ``answer`` and the twin scope's memory.max reading
    ``memory_max`` (None: no file)."""
    log = []

    def run(argv, **kwargs):
        log.append(("run", argv, kwargs))
        if isinstance(answer, Exception):
            raise answer
        return subprocess.CompletedProcess(argv, answer[0], answer[1], answer[2])

    monkeypatch.setattr(runner.subprocess, "run", run)
    monkeypatch.setattr(runner.subprocess, "Popen", lambda argv: Sleeper(argv, log))
    if memory_max is not None:
        scope = os.path.join(runner.V2_ROOT, "system.slice", f"sgl-kernel-probe-{os.getpid()}-b.scope")
        os.makedirs(scope)
        with open(os.path.join(scope, "memory.max"), "w") as handle:
            handle.write(memory_max + "\n")
    return log


CGROUP = f"1:name=systemd:/x\n0::/system.slice/sgl-kernel-probe-{os.getpid()}.scope\n"


def test_probe_cgroup_v2_reads_the_limit_back(v2, monkeypatch):
    log = probe_with(monkeypatch, (0, CGROUP, ""), "1048576")
    assert runner.probe_cgroup_v2(1048576) == (True, "systemd scope memory.max reads back 1048576")
    assert runner.SLEEPS == [0.1]
    unit = f"sgl-kernel-probe-{os.getpid()}"
    assert log == [
        ("run", ["systemd-run", "--quiet", "--scope", f"--unit={unit}", "-p", "MemoryMax=1048576", "--",
                 "cat", "/proc/self/cgroup"],
         {"capture_output": True, "text": True, "timeout": 30, "check": False}),
        ("popen", ["systemd-run", "--quiet", "--scope", f"--unit={unit}-b", "-p", "MemoryMax=1048576", "--",
                   "sleep", "5"]),
        "kill", "wait"]


def test_probe_cgroup_v2_limit_not_enforced(v2, monkeypatch):
    probe_with(monkeypatch, (0, CGROUP, ""), "max")
    assert runner.probe_cgroup_v2(1048576) == (
        False, "MemoryMax=1048576 was accepted but the scope's memory.max reads 'max'")


@pytest.mark.parametrize(("answer", "detail"), [
    (OSError("no such file"), "systemd-run probe failed: no such file"),
    (subprocess.TimeoutExpired(["systemd-run"], 30),
     "systemd-run probe failed: Command '['systemd-run']' timed out after 30 seconds"),
    ((1, "", " Failed to start transient scope unit \n"),
     "systemd-run probe failed: Failed to start transient scope unit"),
    ((1, " only stdout \n", ""), "systemd-run probe failed: only stdout"),
    ((0, "1:name=systemd:/x\n", ""), "systemd-run probe failed: 1:name=systemd:/x"),
])
def test_probe_cgroup_v2_failures(v2, monkeypatch, answer, detail):
    log = probe_with(monkeypatch, answer, None)
    assert runner.probe_cgroup_v2(1) == (False, detail)
    assert not any(entry[0] == "popen" for entry in log if isinstance(entry, tuple))


class FakeProcess:
    """A build that is 'running' for ``polls`` polls, then ended with ``rc``."""

    def __init__(self, rc, polls=0):
        self.pid = 999_999_999
        self.rc, self.polls, self.returncode = rc, polls, None

    def poll(self):
        if self.polls > 0:
            self.polls -= 1
            return None
        self.returncode = self.rc
        return self.rc

    def wait(self):
        self.returncode = self.rc
        return self.rc


@pytest.fixture
def launch(monkeypatch, tmp_path):
    """run_limited with Popen replaced: returns (run, calls), calls holding each Popen's argv and kwargs."""
    calls = []

    def run(process, **kwargs):
        def popen(argv, **popen_kwargs):
            calls.append((argv, popen_kwargs))
            return process
        monkeypatch.setattr(runner.subprocess, "Popen", popen)
        monkeypatch.setattr(runner.time, "sleep", lambda seconds: calls.append(("sleep", seconds)))
        arguments = {"log_path": str(tmp_path / "logs" / "build.log"),
                     "status_path": str(tmp_path / "s.json"), "limit_bytes": 1 << 30, "timeout": 100,
                     "name": "kern"}
        arguments.update(kwargs)
        return runner.run_limited(["make", "-j2"], **arguments)

    return run, calls


def test_run_limited_without_any_mechanism(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "probe_cgroup_v2", lambda limit: (False, "no systemd"))
    with pytest.raises(runner.LimitError) as info:
        runner.run_limited(["make"], log_path=str(tmp_path / "log"), status_path=str(tmp_path / "s"),
                           limit_bytes=1, timeout=1, mechanisms=("cgroup-v2", "cgroup-v3"))
    assert str(info.value) == "no memory limit can be enforced: cgroup-v2: no systemd"
    assert not (tmp_path / "log").exists()


def test_run_limited_under_cgroup_v2(launch, monkeypatch, tmp_path):
    run, calls = launch
    monkeypatch.setattr(runner, "probe_cgroup_v2", lambda limit: (True, f"reads back {limit}"))
    status = run(FakeProcess(137, polls=1), env={"PATH": "/bin"}, cwd="/src")
    argv, kwargs = calls[0]
    assert argv == ["systemd-run", "--quiet", "--scope", f"--unit=sgl-kernel-kern-{os.getpid()}",
                    "-p", f"MemoryMax={1 << 30}", "-p", "MemorySwapMax=0", "--", "make", "-j2"]
    assert kwargs["stderr"] is subprocess.STDOUT
    assert kwargs["stdin"] is subprocess.DEVNULL
    assert kwargs["cwd"] == "/src"
    assert kwargs["start_new_session"] is True
    marker = kwargs["env"][runner.BUILD_MARKER]
    assert kwargs["env"] == {"PATH": "/bin", runner.BUILD_MARKER: marker}
    assert marker.startswith(f"kern-{os.getpid()}-")
    assert calls[1] == ("sleep", runner.WATCHDOG_PERIOD)
    assert status["mechanism"] == "cgroup-v2"
    assert status["limit_detail"] == [f"cgroup-v2: reads back {1 << 30}"]
    assert status["rc"] == 137
    assert status["killed_by"] == "cgroup-v2 memory limit (SIGKILL in the scope)"
    assert status["pid"] == 999_999_999
    assert status["argv"] == ["make", "-j2"]
    assert status["timeout"] == 100
    assert status["limit_bytes"] == 1 << 30
    assert status["started"] <= status["finished"]
    assert json.loads((tmp_path / "s.json").read_text()) == status
    assert not (tmp_path / "s.json.tmp").exists()
    log = (tmp_path / "logs" / "build.log").read_text()
    assert log.startswith("== ")
    assert log.endswith(" " + " ".join(argv) + "\n")


@pytest.mark.parametrize(("rc", "killed_by"), [(-9, "cgroup-v2 memory limit (SIGKILL in the scope)"),
                                               (0, None), (2, None), (-15, None)])
def test_run_limited_cgroup_v2_return_codes(launch, monkeypatch, rc, killed_by):
    run, _calls = launch
    monkeypatch.setattr(runner, "probe_cgroup_v2", lambda limit: (True, "ok"))
    assert run(FakeProcess(rc))["killed_by"] == killed_by


def test_run_limited_under_cgroup_v1(launch, monkeypatch, v1):
    run, calls = launch
    monkeypatch.setattr(runner, "probe_cgroup_v2", lambda limit: (False, "no systemd"))
    cgroup = v1 / "sglang-fleet" / f"kern-{os.getpid()}"
    cgroup.mkdir(parents=True)
    (cgroup / "memory.max_usage_in_bytes").write_text("123456789\n")
    (cgroup / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    status = run(FakeProcess(137), mechanisms=("cgroup-v2", "cgroup-v1", "watchdog"))
    procs = str(cgroup / "cgroup.procs")
    assert calls[0][0] == ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, "make", "-j2"]
    assert status["mechanism"] == "cgroup-v1"
    assert status["limit_detail"] == ["cgroup-v2: no systemd",
                                      f"cgroup-v1: v1 memory.limit_in_bytes reads back {1 << 30}"]
    assert status["peak_bytes"] == 123456789
    assert status["killed_by"] == "cgroup-v1 memory limit (OOM kill in the cgroup)"


@pytest.mark.parametrize(("rc", "oom", "killed_by"), [(0, "oom_kill 2\n", None), (137, "oom_kill 0\n", None),
                                                      (137, "", None), (1, "oom_kill 1\n", "OOM")])
def test_run_limited_cgroup_v1_oom_needs_a_failure_and_a_kill(launch, v1, rc, oom, killed_by):
    run, _calls = launch
    cgroup = v1 / "sglang-fleet" / f"kern-{os.getpid()}"
    cgroup.mkdir(parents=True)
    if oom:
        (cgroup / "memory.oom_control").write_text(oom)
    status = run(FakeProcess(rc), mechanisms=("cgroup-v1",))
    assert status["peak_bytes"] == 0
    if killed_by:
        assert status["killed_by"] == "cgroup-v1 memory limit (OOM kill in the cgroup)"
    else:
        assert status["killed_by"] is None


def test_run_limited_cgroup_v1_keeps_an_earlier_kill(launch, monkeypatch, v1):
    run, _calls = launch
    cgroup = v1 / "sglang-fleet" / f"kern-{os.getpid()}"
    cgroup.mkdir(parents=True)
    (cgroup / "memory.oom_control").write_text("oom_kill 1\n")
    monkeypatch.setattr(runner, "_kill_session", lambda pid, marker=None: None)
    status = run(FakeProcess(137, polls=1), mechanisms=("cgroup-v1",), timeout=-1)
    assert status["killed_by"] == "timeout: the build ran longer than -1 s"


def test_run_limited_watchdog_kills_over_the_limit(launch, monkeypatch):
    run, _calls = launch
    rss = iter([3 << 20, (1 << 30) + (5 << 20), 1 << 20])
    monkeypatch.setattr(runner, "session_rss", lambda pid, marker=None: next(rss))
    killed = []
    monkeypatch.setattr(runner, "_kill_session", lambda pid, marker=None: killed.append((pid, marker)))
    status = run(FakeProcess(-9, polls=3), mechanisms=("watchdog",))
    assert status["mechanism"] == "watchdog"
    assert status["limit_detail"] == ["watchdog: sums the RSS of the build's session twice a second"]
    assert status["killed_by"] == "watchdog: the build's processes used 1029 MiB > limit"
    assert status["peak_bytes"] == (1 << 30) + (5 << 20)
    assert len(killed) == 1
    assert killed[0][0] == 999_999_999
    assert killed[0][1].startswith("kern-")


def test_run_limited_watchdog_at_the_limit_is_not_over_it(launch, monkeypatch):
    run, _calls = launch
    monkeypatch.setattr(runner, "session_rss", lambda pid, marker=None: 1 << 30)
    status = run(FakeProcess(0, polls=2), mechanisms=("watchdog",))
    assert status["killed_by"] is None
    assert status["peak_bytes"] == 1 << 30


def test_run_limited_timeout(launch, monkeypatch):
    run, _calls = launch
    clock = iter([1000.0, 1000.0, 1050.0, 1101.0, 1200.0])
    monkeypatch.setattr(runner.time, "monotonic", lambda: next(clock))
    killed = []
    monkeypatch.setattr(runner, "_kill_session", lambda pid, marker=None: killed.append(pid))
    status = run(FakeProcess(-9, polls=3), mechanisms=("watchdog",), timeout=100)
    assert status["killed_by"] == "timeout: the build ran longer than 100 s"
    assert killed == [999_999_999]


def test_run_limited_leaves_nothing_running_when_interrupted(launch, monkeypatch):
    run, _calls = launch
    killed = []

    def interrupted(pid, marker=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "session_rss", interrupted)
    monkeypatch.setattr(runner, "_kill_session", lambda pid, marker=None: killed.append(pid))
    process = FakeProcess(-9, polls=5)
    with pytest.raises(KeyboardInterrupt):
        run(process, mechanisms=("watchdog",))
    assert killed == [999_999_999]
    assert process.returncode == -9


def test_run_limited_inherits_the_environment(launch, monkeypatch):
    run, calls = launch
    monkeypatch.setenv("MUT3_PROBE", "1")
    run(FakeProcess(0), mechanisms=("watchdog",))
    env = calls[0][1]["env"]
    assert env["MUT3_PROBE"] == "1"
    assert runner.BUILD_MARKER in env
    assert runner.BUILD_MARKER not in os.environ


def test_run_limited_a_log_in_the_current_directory(launch, monkeypatch, tmp_path):
    run, _calls = launch
    monkeypatch.chdir(tmp_path)
    run(FakeProcess(0), mechanisms=("watchdog",), log_path="build.log", status_path="s.json")
    assert (tmp_path / "build.log").read_text().startswith("== ")
    assert sorted(os.listdir(tmp_path)) == ["build.log", "s.json"]


def test_status_file_round_trip(tmp_path):
    path = str(tmp_path / "status.json")
    assert runner.read_status(path) is None
    runner._save(path, {"rc": 0, "killed_by": None})
    assert runner.read_status(path) == {"rc": 0, "killed_by": None}
    assert os.listdir(tmp_path) == ["status.json"]


def test_progress(tmp_path):
    log = tmp_path / "log"
    assert runner.progress(str(log)) == (None, None)
    log.write_bytes(b"")
    assert runner.progress(str(log)) == (None, None)
    log.write_bytes(b"[1/9] a\n[12/340] b \xff\n" + b"x" * 300 + b"\n\n  \n")
    assert runner.progress(str(log)) == ("[12/340]", "x" * 200)
    log.write_bytes(b"[1/9] a\n[2/9] b\nlast\n")
    assert runner.progress(str(log), tail_bytes=13) == ("[2/9]", "last")
    assert runner.progress(str(log), tail_bytes=12) == (None, "last")
    assert runner.progress(str(log), tail_bytes=5) == (None, "last")


def test_log_tail(tmp_path):
    log = tmp_path / "log"
    assert runner.log_tail(str(log)) == []
    log.write_text("".join(f"line {i}  \n\n" for i in range(40)) + "y" * 400 + "\n")
    tail = runner.log_tail(str(log))
    assert len(tail) == 25
    assert tail[0] == "line 16"
    assert tail[-1] == "y" * 300
    assert runner.log_tail(str(log), lines=2) == ["line 39", "y" * 300]
    log.write_text("old\n" + "z" * 17000 + "\nnew\n")
    assert runner.log_tail(str(log)) == ["z" * 300, "new"]


def test_run_limited_names_every_mechanism_tried(tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "probe_cgroup_v2", lambda limit: (False, "no systemd"))
    monkeypatch.setattr(runner, "setup_cgroup_v1", lambda name, limit: (None, "no v1"))
    with pytest.raises(runner.LimitError) as info:
        runner.run_limited(["make"], log_path=str(tmp_path / "log"), status_path=str(tmp_path / "s"),
                           limit_bytes=1, timeout=1, mechanisms=("cgroup-v2", "cgroup-v1"))
    assert str(info.value) == "no memory limit can be enforced: cgroup-v2: no systemd; cgroup-v1: no v1"


def test_run_limited_status_keys_and_default_name(tmp_path, monkeypatch):
    calls = []

    def popen(argv, **kwargs):
        calls.append(kwargs)
        return FakeProcess(0)

    monkeypatch.setattr(runner.subprocess, "Popen", popen)
    monkeypatch.setattr(runner.time, "sleep", lambda seconds: None)
    status = runner.run_limited(["make"], log_path=str(tmp_path / "log"), status_path=str(tmp_path / "s"),
                                limit_bytes=1, timeout=1, mechanisms=("watchdog",))
    assert sorted(status) == ["argv", "finished", "killed_by", "limit_bytes", "limit_detail", "log",
                              "mechanism", "peak_bytes", "pid", "rc", "started", "timeout"]
    assert status["log"] == str(tmp_path / "log")
    assert (status["rc"], status["pid"]) == (0, 999_999_999)
    assert status["finished"] is not None
    assert calls[0]["env"][runner.BUILD_MARKER].startswith(f"build-{os.getpid()}-")


def test_log_tail_reads_the_last_16_kib_exactly(tmp_path):
    log = tmp_path / "log"
    log.write_bytes(b"abc\n")
    assert runner.log_tail(str(log)) == ["abc"]
    log.write_bytes(b"ab\n" + b"c" * 16381 + b"\n")  # 16385 bytes: the tail starts at the b
    assert runner.log_tail(str(log)) == ["b", "c" * 300]
    log.write_bytes(b"\xff ok\n")
    assert runner.log_tail(str(log)) == ["\ufffd ok"]


def test_progress_reads_the_last_64_kib_exactly(tmp_path):
    log = tmp_path / "log"
    log.write_bytes(b"[1/2] a\n")
    assert runner.progress(str(log)) == ("[1/2]", "[1/2] a")
    log.write_bytes(b"[1/2]" + b"y" * 65532)  # 65537 bytes: the tail starts after the [
    assert runner.progress(str(log)) == (None, "1/2]" + "y" * 196)
    log.write_bytes(b"[3/4] \xff\n")
    assert runner.progress(str(log)) == ("[3/4]", "[3/4] \ufffd")


# --- m_runner: what the fourth mutation run found -------------------------------------------------------

def test_read_decodes_utf8_whatever_the_locale(tmp_path):
    with c_locale():
        (tmp_path / "f").write_bytes("café\n".encode())
        assert runner._read(str(tmp_path / "f")) == "café"


def test_read_replaces_what_is_not_utf8(tmp_path):
    (tmp_path / "f").write_bytes(b"12 (\xc3) S\n")
    assert runner._read(str(tmp_path / "f")) == "12 (\ufffd) S"


@pytest.fixture
def own_name():
    """Set this process's name (/proc/self/stat's comm, 15 bytes at most) for the test."""
    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/self/comm", "rb") as handle:
        saved = handle.read().rstrip(b"\n")

    def set_name(name):
        assert libc.prctl(15, ctypes.c_char_p(name), 0, 0, 0) == 0  # PR_SET_NAME

    yield set_name
    set_name(saved)


def test_build_processes_of_a_process_whose_name_is_cut_inside_a_character(own_name):
    # an executable named "ééééééééé" runs as 15 bytes of it: the last é is cut in half
    own_name("ééééééééé".encode())
    with open("/proc/self/stat", "rb") as handle:
        assert b" (" + "ééééééé".encode() + b"\xc3) " in handle.read()
    found = runner.build_processes(os.getsid(0))
    assert found[os.getpid()] > 0


def test_build_processes_skips_a_stat_line_it_cannot_read(fake_proc):
    fake_proc.update({"10": stat_line(10, 10, 5), "15": "15 garbage without a name"})
    assert runner.build_processes(10) == {10: 5 * PAGE}


def test_build_processes_needs_the_fields_up_to_the_rss(fake_proc):
    whole = stat_line(10, 10, 5).split()
    # the fields after the name: state ... rss are 22, the rest (rsslim and on) is not needed
    fake_proc.update({"10": " ".join(whole[:2 + 22]), "11": " ".join(whole[:2 + 21]).replace("10", "11", 1)})
    assert runner.build_processes(10) == {10: 5 * PAGE}


@pytest.mark.parametrize("parent", ["system.slice", "user.slice/user-0.slice", "X11:0.slice/app.slice"])
def test_probe_cgroup_v2_finds_the_twin_scope_next_to_the_probe(v2, monkeypatch, parent):
    unit = f"sgl-kernel-probe-{os.getpid()}"
    cgroup = f"1:name=systemd:/x\n0::/{parent}/{unit}.scope\n"
    probe_with(monkeypatch, (0, cgroup, ""), None)
    scope = v2 / parent / f"{unit}-b.scope"
    scope.mkdir(parents=True)
    (scope / "memory.max").write_text("4096\n")
    assert runner.probe_cgroup_v2(4096) == (True, "systemd scope memory.max reads back 4096")


def test_probe_cgroup_v2_waits_five_seconds_for_the_twin_scope(v2, monkeypatch):
    probe_with(monkeypatch, (0, CGROUP, ""), None)
    clock = iter([100.0, 100.0, 101.0, 102.0, 103.0, 104.0, 104.99, 105.0, 106.0, 107.0])
    monkeypatch.setattr(runner.time, "monotonic", lambda: next(clock))
    assert runner.probe_cgroup_v2(4096) == (
        False, "MemoryMax=4096 was accepted but the scope's memory.max reads None")
    assert runner.SLEEPS == [0.1] * 6  # read at 100 .. 104.99, not at 105


def test_run_limited_log_header_comes_before_the_builds_output(monkeypatch, tmp_path):
    def popen(argv, **kwargs):
        os.write(kwargs["stdout"].fileno(), b"first line of the build\n")
        return FakeProcess(0)

    monkeypatch.setattr(runner.subprocess, "Popen", popen)
    monkeypatch.setattr(runner.time, "sleep", lambda seconds: None)
    runner.run_limited(["make", "-j2"], log_path=str(tmp_path / "log"), status_path=str(tmp_path / "s"),
                       limit_bytes=1 << 30, timeout=100, mechanisms=("watchdog",))
    header, output = (tmp_path / "log").read_text().splitlines()
    assert re.fullmatch(r"== \d{4}-\d\d-\d\d \d\d:\d\d:\d\d make -j2", header)
    assert output == "first line of the build"


def test_run_limited_counts_the_session_without_the_marker(launch, fake_proc, monkeypatch):
    # the build's own process, in its own session, whose environment no longer holds the marker
    fake_proc.update({"999999999": stat_line(999_999_999, 999_999_999, (2 << 30) // PAGE)})
    killed = []
    monkeypatch.setattr(runner, "_kill_session", lambda pid, marker=None: killed.append(pid))
    run, _calls = launch
    status = run(FakeProcess(-9, polls=1), mechanisms=("watchdog",))
    assert status["killed_by"] == "watchdog: the build's processes used 2048 MiB > limit"
    assert killed == [999_999_999]


def test_run_limited_timeout_is_after_the_timeout_not_at_it(launch, monkeypatch):
    run, _calls = launch
    times = [1000.0, 1100.0]
    monkeypatch.setattr(runner.time, "monotonic", lambda: times.pop(0) if len(times) > 1 else times[0])
    monkeypatch.setattr(runner, "session_rss", lambda pid, marker=None: 0)
    status = run(FakeProcess(0, polls=2), mechanisms=("watchdog",), timeout=100)
    assert (status["rc"], status["killed_by"]) == (0, None)


def marked_outside(monkeypatch):
    """build_processes answering that pid 4242 (a daemonized sccache server) carries the build's marker;
    returns the list of the pids os.kill was given."""
    killed = []
    monkeypatch.setattr(runner, "build_processes", lambda session, marker=None: (
        {4242: 1} if marker and marker.startswith(f"kern-{os.getpid()}-") else {}))
    monkeypatch.setattr(runner.os, "killpg", lambda pid, sig: killed.append(("group", pid)))
    monkeypatch.setattr(runner.os, "kill", lambda pid, sig: killed.append(pid))
    return killed


def test_run_limited_timeout_kills_the_marked_processes_too(launch, monkeypatch):
    killed = marked_outside(monkeypatch)
    times = [1000.0, 1101.0]
    monkeypatch.setattr(runner.time, "monotonic", lambda: times.pop(0) if len(times) > 1 else times[0])
    run, _calls = launch
    status = run(FakeProcess(-9, polls=1), mechanisms=("watchdog",), timeout=100)
    assert status["killed_by"] == "timeout: the build ran longer than 100 s"
    assert killed == [("group", 999_999_999), 4242]


def test_run_limited_interrupted_kills_the_marked_processes_too(launch, monkeypatch):
    killed = marked_outside(monkeypatch)
    run, _calls = launch

    def interrupted(pid, marker=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "session_rss", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run(FakeProcess(-9, polls=5), mechanisms=("watchdog",))
    assert killed == [("group", 999_999_999), 4242]
