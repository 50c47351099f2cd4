"""module_utils/sgl_kernel_runner.py: the memory-limited build runner, fast and without touching real cgroups.

The cgroup roots point at temporary directories laid out as the kernel lays them out (a v1 memory
hierarchy is plain files whose values read back; a v2 root has cgroup.controllers), so the choice of
mechanism, the read-back checks and the status file are tested here. The real limits (a systemd scope,
a root-owned v1 hierarchy, the watchdog killing a real allocation) are in
tests/integration/test_sgl_kernel_runner.py and the kernel role's fleet tests.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from ansible.module_utils import sgl_kernel_runner as runner
from ansible.module_utils.sgl_kernel_runner import (
    LimitError,
    log_tail,
    probe_cgroup_v2,
    progress,
    read_status,
    run_limited,
    session_rss,
    setup_cgroup_v1,
)

LIMIT = 64 << 20
REAL_WHICH = shutil.which


@pytest.fixture
def roots(tmp_path, monkeypatch):
    """No systemd, a v2 root without the memory controller, a writable v1 memory hierarchy."""
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    v1.mkdir()
    v2.mkdir()
    (v2 / "cgroup.controllers").write_text("cpu io pids\n")
    monkeypatch.setattr(runner, "V1_ROOT", str(v1))
    monkeypatch.setattr(runner, "V2_ROOT", str(v2))
    monkeypatch.setattr(runner, "WATCHDOG_PERIOD", 0.02)
    monkeypatch.setattr(runner.shutil, "which", lambda name: None)
    return v1, v2


def run(tmp_path, argv, **kwargs):
    kwargs = {"limit_bytes": LIMIT, "timeout": 30, **kwargs}
    return run_limited(argv, log_path=str(tmp_path / "logs" / "build.log"),
                       status_path=str(tmp_path / "status.json"), **kwargs)


# cgroup v2 ------------------------------------------------------------------------------------------

def test_v2_needs_systemd(roots):
    assert probe_cgroup_v2(LIMIT) == (False, "systemd-run or a running systemd is missing")


def test_v2_needs_a_cgroup2_root_with_the_memory_controller(roots, monkeypatch, tmp_path):
    monkeypatch.setattr(runner.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(runner.os.path, "isdir", lambda path: True)
    _, v2 = roots
    assert probe_cgroup_v2(LIMIT) == (False, f"{v2} is not a cgroup2 hierarchy with the memory controller")
    (v2 / "cgroup.controllers").unlink()
    assert probe_cgroup_v2(LIMIT) == (False, f"{v2} is not a cgroup2 hierarchy with the memory controller")


# cgroup v1 ------------------------------------------------------------------------------------------

def test_v1_limit_is_written_and_read_back(roots):
    v1, _ = roots
    path, detail = setup_cgroup_v1("build-1", LIMIT)
    assert path == str(v1 / "sglang-fleet" / "build-1")
    assert detail == f"v1 memory.limit_in_bytes reads back {LIMIT}"
    assert (v1 / "sglang-fleet" / "build-1" / "memory.limit_in_bytes").read_text() == str(LIMIT)
    assert not (v1 / "sglang-fleet" / "build-1" / "memory.memsw.limit_in_bytes").exists()


def test_v1_swap_limit_is_set_where_the_kernel_has_it(roots):
    v1, _ = roots
    group = v1 / "sglang-fleet" / "build-2"
    group.mkdir(parents=True)
    (group / "memory.memsw.limit_in_bytes").write_text("9223372036854771712")
    assert setup_cgroup_v1("build-2", LIMIT)[0] == str(group)
    assert (group / "memory.memsw.limit_in_bytes").read_text() == str(LIMIT)


def test_v1_leftover_empty_groups_are_removed_and_busy_ones_kept(roots):
    v1, _ = roots
    parent = v1 / "sglang-fleet"
    (parent / "old-empty").mkdir(parents=True)
    (parent / "old-busy").mkdir()
    (parent / "old-busy" / "cgroup.procs").write_text("1234\n")  # rmdir fails, as on a cgroup in use
    (parent / "stray-file").write_text("")
    setup_cgroup_v1("build-3", LIMIT)
    assert sorted(os.listdir(parent)) == ["build-3", "old-busy", "stray-file"]


def test_v1_missing_or_a_cgroup2_mount(roots, monkeypatch, tmp_path):
    v1, _ = roots
    (v1 / "cgroup.controllers").write_text("memory\n")
    assert setup_cgroup_v1("b", LIMIT) == (None, f"no v1 memory hierarchy at {v1}")
    monkeypatch.setattr(runner, "V1_ROOT", str(tmp_path / "absent"))
    assert setup_cgroup_v1("b", LIMIT) == (None, f"no v1 memory hierarchy at {tmp_path / 'absent'}")


def test_v1_not_writable(roots):
    v1, _ = roots
    (v1 / "sglang-fleet").write_text("a file where the parent group should be")
    path, detail = setup_cgroup_v1("b", LIMIT)
    assert path is None
    assert detail.startswith("the v1 memory hierarchy is not writable here (")
    assert detail.endswith(")")
    assert "None" not in detail


def test_v1_limit_that_does_not_read_back(roots, monkeypatch):
    monkeypatch.setattr(runner, "_read", lambda path: "9223372036854771712")
    assert setup_cgroup_v1("b", LIMIT) == (
        None, f"v1 memory.limit_in_bytes reads back '9223372036854771712', not {LIMIT}")
    monkeypatch.setattr(runner, "_read", lambda path: None)
    assert setup_cgroup_v1("b", LIMIT) == (None, f"v1 memory.limit_in_bytes reads back None, not {LIMIT}")


@pytest.mark.parametrize(("written", "ok"), [
    (LIMIT, True), (LIMIT + 4095, True), (LIMIT - 4095, True), (LIMIT + 4096, False), (LIMIT - 4096, False)])
def test_v1_limit_is_rounded_to_a_page(roots, monkeypatch, written, ok):
    real_read = runner._read
    monkeypatch.setattr(runner, "_read", lambda path: str(written) if path.endswith("limit_in_bytes")
                        else real_read(path))
    monkeypatch.setattr(runner.os, "sysconf", lambda name: 4096)
    assert (setup_cgroup_v1("b", LIMIT)[0] is not None) is ok


# run_limited ----------------------------------------------------------------------------------------

def test_no_mechanism_that_can_be_enforced(roots, tmp_path):
    v1, _ = roots
    (v1 / "cgroup.controllers").write_text("")
    with pytest.raises(LimitError) as caught:
        run(tmp_path, ["true"], mechanisms=("cgroup-v2", "cgroup-v1"))
    assert str(caught.value) == ("no memory limit can be enforced: cgroup-v2: systemd-run or a running "
                                 f"systemd is missing; cgroup-v1: no v1 memory hierarchy at {v1}")
    assert not (tmp_path / "status.json").exists()


def test_watchdog_run_logs_and_reports(roots, tmp_path):
    v1, _ = roots
    (v1 / "cgroup.controllers").write_text("")
    status = run(tmp_path, ["sh", "-c", "echo '[1/3] cc a.cu'; echo '[3/3] link' >&2; exit 3"], name="b")
    assert status["mechanism"] == "watchdog"
    assert status["limit_detail"] == ["cgroup-v2: systemd-run or a running systemd is missing",
                                      f"cgroup-v1: no v1 memory hierarchy at {v1}",
                                      "watchdog: sums the RSS of the build's session twice a second"]
    assert status["rc"] == 3
    assert status["killed_by"] is None
    assert status["started"] <= status["finished"]
    assert status["argv"] == ["sh", "-c", "echo '[1/3] cc a.cu'; echo '[3/3] link' >&2; exit 3"]
    assert status["log"] == str(tmp_path / "logs" / "build.log")
    assert read_status(tmp_path / "status.json") == status
    log = (tmp_path / "logs" / "build.log").read_text().splitlines()
    assert log[0].startswith("== ")
    assert log[0].endswith(" sh -c echo '[1/3] cc a.cu'; echo '[3/3] link' >&2; exit 3")
    assert log[1:] == ["[1/3] cc a.cu", "[3/3] link"]
    assert progress(tmp_path / "logs" / "build.log") == ("[3/3]", "[3/3] link")


def test_watchdog_only(roots, tmp_path):
    status = run(tmp_path, ["true"], mechanisms=("watchdog",), timeout=7)
    assert status["mechanism"] == "watchdog"
    assert status["limit_detail"] == ["watchdog: sums the RSS of the build's session twice a second"]
    assert (status["rc"], status["killed_by"]) == (0, None)
    assert (status["timeout"], status["limit_bytes"]) == (7, LIMIT)
    assert isinstance(status["pid"], int)


def test_watchdog_kills_a_session_over_the_limit(roots, tmp_path):
    status = run(tmp_path, ["sh", "-c", "sleep 20 & sleep 20"], mechanisms=("watchdog",), limit_bytes=1)
    assert status["rc"] == -9
    assert status["killed_by"].startswith("watchdog: the build's processes used ")
    assert status["killed_by"].endswith(" MiB > limit")
    assert status["peak_bytes"] > 1


def test_timeout_kills_the_session(roots, tmp_path):
    status = run(tmp_path, ["sleep", "20"], mechanisms=("watchdog",), timeout=0.2)
    assert (status["rc"], status["killed_by"]) == (-9, "timeout: the build ran longer than 0.2 s")


def test_v1_run_joins_the_cgroup_and_reads_its_peak_and_oom_kills(roots, tmp_path):
    v1, _ = roots
    group = v1 / "sglang-fleet" / f"b-{os.getpid()}"
    group.mkdir(parents=True)
    (group / "memory.max_usage_in_bytes").write_text(str(10 * LIMIT))
    (group / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n")
    status = run(tmp_path, ["sh", "-c", "exit 9"], name="b", mechanisms=("cgroup-v1",))
    assert status["mechanism"] == "cgroup-v1"
    assert status["limit_detail"] == [f"cgroup-v1: v1 memory.limit_in_bytes reads back {LIMIT}"]
    assert (group / "cgroup.procs").read_text().strip().isdigit()  # the shell joined before exec
    assert status["peak_bytes"] == 10 * LIMIT
    assert status["killed_by"] == "cgroup-v1 memory limit (OOM kill in the cgroup)"


@pytest.mark.parametrize(("argv", "oom", "killed_by"), [
    (["true"], "oom_kill 2\n", None),  # a build that succeeded was not killed
    (["false"], "oom_kill 0\n", None),
    (["false"], "", None),
])
def test_v1_failure_without_an_oom_kill(roots, tmp_path, argv, oom, killed_by):
    v1, _ = roots
    group = v1 / "sglang-fleet" / f"build-{os.getpid()}"
    group.mkdir(parents=True)
    (group / "memory.oom_control").write_text(oom)
    status = run(tmp_path, argv, mechanisms=("cgroup-v1",))
    assert status["killed_by"] == killed_by
    assert status["peak_bytes"] >= 0


def test_v2_run_uses_a_scope_and_names_a_sigkill_a_limit(roots, tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "probe_cgroup_v2", lambda limit: (True, "reads back"))
    seen = []
    real_popen = runner.subprocess.Popen

    def popen(command, **kwargs):
        seen.append(command)
        return real_popen(["sh", "-c", "kill -9 $$"], **kwargs)

    monkeypatch.setattr(runner.subprocess, "Popen", popen)
    status = run(tmp_path, ["make", "-j2"], name="w")
    assert seen == [["systemd-run", "--quiet", "--scope", f"--unit=sgl-kernel-w-{os.getpid()}", "-p",
                     f"MemoryMax={LIMIT}", "-p", "MemorySwapMax=0", "--", "make", "-j2"]]
    assert status["mechanism"] == "cgroup-v2"
    assert status["limit_detail"] == ["cgroup-v2: reads back"]
    assert status["killed_by"] == "cgroup-v2 memory limit (SIGKILL in the scope)"


@pytest.mark.parametrize(("script", "killed_by"), [
    ("exit 137", "cgroup-v2 memory limit (SIGKILL in the scope)"),
    ("exit 1", None),
    ("exit 0", None),
    ("kill -15 $$", None),
])
def test_v2_which_failures_are_the_limit(roots, tmp_path, monkeypatch, script, killed_by):
    monkeypatch.setattr(runner, "probe_cgroup_v2", lambda limit: (True, "reads back"))
    real_popen = runner.subprocess.Popen
    monkeypatch.setattr(runner.subprocess, "Popen",
                        lambda command, **kw: real_popen(["sh", "-c", script], **kw))
    assert run(tmp_path, ["make"])["killed_by"] == killed_by


def test_an_interrupted_caller_leaves_nothing_running(roots, tmp_path, monkeypatch):
    def interrupt(seconds):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner.time, "sleep", interrupt)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path, ["sleep", "20"], mechanisms=("watchdog",))
    pid = read_status(tmp_path / "status.json")["pid"]
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reaped: killed and waited for


def test_env_and_cwd_reach_the_build(roots, tmp_path):
    run(tmp_path, ["sh", "-c", 'echo "$MARK $PWD"'], mechanisms=("watchdog",),
        env={"MARK": "m", "PATH": "/bin:/usr/bin"}, cwd=str(tmp_path))
    assert (tmp_path / "logs" / "build.log").read_text().splitlines()[-1] == f"m {tmp_path}"


# session_rss, status, log readers ------------------------------------------------------------------

def test_session_rss_counts_the_sessions_processes(tmp_path):
    child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(30 << 20); time.sleep(20)"],
                             start_new_session=True, stdout=subprocess.PIPE)
    try:
        for _ in range(100):
            rss = session_rss(child.pid)
            if rss > 30 << 20:
                break
            time.sleep(0.02)
        assert 30 << 20 < rss < 200 << 20
        assert session_rss(2 ** 22 + 12345) == 0
    finally:
        child.kill()
        child.wait()


def test_read_status_of_nothing(tmp_path):
    assert read_status(tmp_path / "absent.json") is None
    (tmp_path / "empty.json").write_text("")
    assert read_status(tmp_path / "empty.json") is None
    (tmp_path / "s.json").write_text(json.dumps({"rc": 0}))
    assert read_status(tmp_path / "s.json") == {"rc": 0}


def test_progress_reads_only_the_tail(tmp_path):
    log = tmp_path / "build.log"
    assert progress(log) == (None, None)
    log.write_bytes(b"[1/9] early\n" + b"x" * 100 + b"\n\n  \n")
    assert progress(log) == ("[1/9]", "x" * 100)
    assert progress(log, tail_bytes=50) == (None, "x" * 45)
    log.write_bytes(b"[2/9] a\n[10/12] b \xff\n" + b"y" * 300 + b"\n")
    assert progress(log) == ("[10/12]", "y" * 200)
    log.write_bytes(b"")
    assert progress(log) == (None, None)


def test_log_tail(tmp_path):
    log = tmp_path / "build.log"
    assert log_tail(log) == []
    log.write_bytes(b"".join(b"line %d  \n\n" % i for i in range(40)) + b"bad \xff" + b"z" * 400)
    tail = log_tail(log)
    assert len(tail) == 25
    assert tail[:2] == ["line 16", "line 17"]
    assert tail[-1] == "bad \ufffd" + "z" * 295
    assert log_tail(log, lines=2) == ["line 39", tail[-1]]
    log.write_bytes(b"a" * 20000 + b"\nlast\n")
    assert log_tail(log) == ["a" * 300, "last"]


# cgroup v2 through a stand-in systemd-run: it answers the probe's `cat /proc/self/cgroup` with a scope
# path, and for any other command writes the scope's memory.max under the fake v2 root (the value it was
# given, or $STAND_IN_MEMORY_MAX) before it runs the command, as systemd does before the scope starts.
SYSTEMD_RUN = r"""#!/bin/sh
# STAND-IN for systemd-run (no systemd on the test machines): see tests/unit/test_sgl_kernel_runner.py
echo "$*" >> "$STAND_IN_CALLS"
unit=""; limit=""
while [ "$1" != "--" ]; do
    case "$1" in --unit=*) unit=${1#--unit=} ;; MemoryMax=*) limit=${1#MemoryMax=} ;; esac
    shift
done
shift
if [ -n "$STAND_IN_FAIL" ]; then echo "$STAND_IN_FAIL" >&2; exit 1; fi
if [ "$1" = cat ]; then echo "1:name=systemd:/x"; echo "0::/system.slice/$unit.scope"; exit 0; fi
mkdir -p "$STAND_IN_V2/system.slice/$unit.scope"
echo "${STAND_IN_MEMORY_MAX:-$limit}" > "$STAND_IN_V2/system.slice/$unit.scope/memory.max"
exec "$@"
"""


@pytest.fixture
def systemd(roots, tmp_path, monkeypatch):
    """A v2 root with the memory controller, a running systemd, and the stand-in systemd-run on PATH."""
    _, v2 = roots
    (v2 / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemd-run").write_text(SYSTEMD_RUN)
    (bin_dir / "systemd-run").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STAND_IN_V2", str(v2))
    monkeypatch.setenv("STAND_IN_CALLS", str(tmp_path / "calls"))
    real_isdir = os.path.isdir
    monkeypatch.setattr(runner.shutil, "which", REAL_WHICH)
    monkeypatch.setattr(runner.os.path, "isdir",
                        lambda path: path == "/run/systemd/system" or real_isdir(path))
    return v2, tmp_path / "calls"


def test_v2_probe_reads_the_limit_back(systemd):
    _, calls = systemd
    assert probe_cgroup_v2(LIMIT, unit_prefix="p") == (True, f"systemd scope memory.max reads back {LIMIT}")
    unit = f"p-{os.getpid()}"
    assert calls.read_text().splitlines() == [
        f"--quiet --scope --unit={unit} -p MemoryMax={LIMIT} -- cat /proc/self/cgroup",
        f"--quiet --scope --unit={unit}-b -p MemoryMax={LIMIT} -- sleep 5"]


def test_v2_probe_of_a_limit_nothing_enforces(systemd, monkeypatch):
    monkeypatch.setenv("STAND_IN_MEMORY_MAX", "max")
    assert probe_cgroup_v2(LIMIT) == (
        False, f"MemoryMax={LIMIT} was accepted but the scope's memory.max reads 'max'")


def test_v2_probe_that_systemd_refuses(systemd, monkeypatch):
    monkeypatch.setenv("STAND_IN_FAIL", "Failed to start transient scope unit: Access denied")
    assert probe_cgroup_v2(LIMIT) == (
        False, "systemd-run probe failed: Failed to start transient scope unit: Access denied")


def test_v2_probe_without_a_unified_cgroup_line(systemd, monkeypatch, tmp_path):
    bin_dir = tmp_path / "bin2"
    bin_dir.mkdir()
    (bin_dir / "systemd-run").write_text("#!/bin/sh\necho '1:name=systemd:/only-v1'\n")
    (bin_dir / "systemd-run").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    assert probe_cgroup_v2(LIMIT) == (False, "systemd-run probe failed: 1:name=systemd:/only-v1")


def test_v2_probe_that_cannot_start_systemd_run(systemd, monkeypatch):
    monkeypatch.setattr(runner.subprocess, "run", lambda *a, **k: (_ for _ in ()).throw(
        subprocess.TimeoutExpired(["systemd-run"], 30)))
    ok, detail = probe_cgroup_v2(LIMIT)
    assert not ok
    assert detail.startswith("systemd-run probe failed: Command '['systemd-run']' timed out after 30 ")


def test_a_build_in_a_v2_scope(systemd, tmp_path):
    v2, calls = systemd
    status = run(tmp_path, ["sh", "-c", "echo built"], name="k")
    assert status["mechanism"] == "cgroup-v2"
    assert status["limit_detail"] == [f"cgroup-v2: systemd scope memory.max reads back {LIMIT}"]
    assert (status["rc"], status["killed_by"]) == (0, None)
    assert calls.read_text().splitlines()[-1] == (
        f"--quiet --scope --unit=sgl-kernel-k-{os.getpid()} -p MemoryMax={LIMIT} -p MemorySwapMax=0 -- "
        "sh -c echo built")
    scope = v2 / "system.slice" / f"sgl-kernel-k-{os.getpid()}.scope"
    assert (scope / "memory.max").read_text() == f"{LIMIT}\n"
    assert (tmp_path / "logs" / "build.log").read_text().splitlines()[-1] == "built"
