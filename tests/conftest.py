"""Shared pytest set-up.

- Makes this repository's ``module_utils/`` importable as ``ansible.module_utils.<name>``, the same
  import path Ansible uses when it ships a module to a host, so unit tests exercise the exact code.
  ``SGLANG_FLEET_MODULE_UTILS`` names another directory to import them from instead: mutation testing
  (bench/mutation_score.py) points it at mutmut's mutated copy.
- Prerequisites: use ``from prereq import require`` (skip locally, fail under CI).
- ``pytest -n N --dist loadgroup``: the fleet tests (tests/integration/fleet/, tests/molecule/) run in
  two lanes, each on one worker in collection order: the rollout's module (its own 4 hosts; the longest
  module by far; ROLLOUT_LANE_MODULES) and the session fleet's users (in order: test_stack_jobs.py after
  test_stack.py; molecule, the service roles; last the locked install, on a host of its own after the
  session fleet is down). The modules with fleets of their own (OWN_FLEET_MODULES: the toolkit, the
  harness's reboot and teardown, verify/doctor, the driver) each go whole to whichever lane's worker
  frees up first, the slowest first (tests/workorder.py). A test outside the session lane that asks for
  the session fleet is refused at collection. The lanes overlap: the fleet tests spend much of
  their time waiting (gates, drains, reboots, stand-in latencies), and one lane fills the other's idle
  CPU. The other tests spread over the workers. By path, not by xdist_group marks: with pytest 9,
  xdist 3.8's loadgroup never sees its marks (it rewrites ``item._nodeid``, which pytest 9 no longer
  reads), and would spread the fleet tests like ``--dist load``.
- ``pytest -n N --dist loadfile`` (make test's unit and integration run): the slowest modules are handed
  out first (tests/workorder.py), so the stage does not end on one worker.
- ``--timing-json PATH`` (``make test`` passes it): each test's setup, call and teardown seconds and
  outcome, the collection and session wall time, as JSON; ``bench/ci_timing.py summary`` sums them per
  stage and prints the slowest tests. It also samples the free disk of the filesystem that holds the
  test cache and the fleet hosts' layers (every 5 s, in a thread) and records the least seen and the
  tests that were running then (both lanes), and a trace point each time it moved by 1 GiB: the fleet
  tests' stacks are GBs a host, and a CI machine ran out of disk. And each test's CPU seconds
  (``TestCPU``: those of the process that ran it and of the processes it waited for; a fleet host's
  processes are not among them), which ``summary`` lists beside the slowest tests: on a CPU-bound run
  wall time says what waited, CPU seconds what to cut. And the machine's CPU over the run (/proc/stat:
  busy, idle, waiting on I/O, stolen), which says whether the run was CPU-bound or waited.
- At the start of a session, the temporary directories of killed sessions (pytest keeps them three
  days) are removed: ``killed_sessions_tmp``.
- Bytecode goes to the test cache (``bytecode_cache``), whatever ``PYTHONDONTWRITEBYTECODE`` says.
"""

from __future__ import annotations

import getpass
import json
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import ansible.module_utils
import pytest
from ansible_run import prune_payload_cache
from cache import cache_root
from fleet.system import children_cpu_seconds, mounts_under, reaped_cpu_seconds
from workorder import OWN_FLEET_MODULES, SlowestFirst, SlowestFirstFileScheduling, fleet_lane, fleet_module
from xdist.scheduler import LoadGroupScheduling

REPO_ROOT = Path(__file__).resolve().parent.parent
MODULE_UTILS = os.environ.get("SGLANG_FLEET_MODULE_UTILS") or str(REPO_ROOT / "module_utils")

if MODULE_UTILS not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(MODULE_UTILS)


def bytecode_cache() -> Path | None:
    """Python bytecode of everything the tests run on this machine (this process, the xdist workers,
    ansible-playbook, the torch venvs and stacks the tests import) goes to one directory of the test cache
    (``PYTHONPYCACHEPREFIX``), also where ``PYTHONDONTWRITEBYTECODE`` is set: that keeps bytecode out of
    the source and venv trees, and so does this, but without a cache each of the tests' torch imports
    compiled torch again (2.8 s of CPU against 1.4 s, measured on the CI-like machine). Left alone when
    the caller names a prefix of their own. The fleet hosts are not affected (ssh passes no environment).
    Returns the prefix it set (None when the caller's was kept)."""
    if os.environ.get("PYTHONPYCACHEPREFIX"):
        return None
    prefix = str(cache_root() / "pycache")
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False
    return Path(prefix)


BYTECODE_CACHE = bytecode_cache()


def prune_bytecode_cache(prefix: Path) -> list:
    """Remove the bytecode of source directories that are gone (earlier sessions' temporary venvs and
    stacks, earlier CI clones): the prefix mirrors each source directory's absolute path. Returns what
    was removed."""
    removed = []
    for directory, subdirs, _files in os.walk(prefix):
        kept = []
        for name in sorted(subdirs):
            cached = Path(directory) / name
            if (Path("/") / cached.relative_to(prefix)).is_dir():
                kept.append(name)
            else:
                shutil.rmtree(cached, ignore_errors=True)
                removed.append(cached)
        subdirs[:] = kept
    return removed


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


class FleetGroupScheduling(SlowestFirst, LoadGroupScheduling):
    """The fleet run's scheduler: a lane, or a whole module of OWN_FLEET_MODULES, is one work unit (plain
    loadgroup would make each test one); the slowest unit still queued goes first."""

    def _split_scope(self, nodeid: str) -> str:
        if fleet_module(nodeid) in OWN_FLEET_MODULES:
            return nodeid.split("::", maxsplit=1)[0]
        return fleet_lane(nodeid) or super()._split_scope(nodeid)


def pytest_collection_modifyitems(config, items):
    mixed = [item.nodeid for item in items if fleet_lane(item.nodeid) != "fleet-session"
             and fleet_module(item.nodeid) is not None
             and "fleet" in getattr(item, "fixturenames", ())]  # fixturenames holds fleet_stack's too
    if mixed:
        raise pytest.UsageError(f"{', '.join(mixed)}: uses the session fleet, but its module is in "
                                "ROLLOUT_LANE_MODULES or OWN_FLEET_MODULES (tests/workorder.py), which run "
                                "beside the session fleet's lane: take the module out of those lists")


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own, however this file was loaded
def pytest_xdist_make_scheduler(config, log):
    schedulers = {"loadgroup": FleetGroupScheduling, "loadfile": SlowestFirstFileScheduling}
    scheduler = schedulers.get(config.getvalue("dist"))
    return scheduler(config, log) if scheduler else None


def pytest_addoption(parser):
    parser.addoption("--timing-json", metavar="PATH",
                     help="write each test's duration per phase and the session's wall time to PATH "
                          "(JSON read by bench/ci_timing.py summary)")


def killed_sessions_tmp(root: Path) -> list:
    """pytest's numbered temporary directories under ``root`` (pytest-of-<user>) of sessions that were
    killed: pytest writes its pid into a ``.lock`` there and removes it at exit, and keeps a locked one
    for three days whatever its size. A fleet session's holds stacks and uv caches of GBs; a CI machine
    that started with two killed sessions' ran out of disk. A directory with a mount under it is left."""
    found = []
    for directory in sorted(root.glob("pytest-[0-9]*")):
        lock = directory / ".lock"
        if directory.is_symlink() or not lock.is_file():
            continue
        try:
            pid = int(lock.read_text().strip())
            os.kill(pid, 0)
            continue  # its session is running
        except ProcessLookupError:
            pass
        except (ValueError, OSError):
            continue  # not a pid of pytest's, or a process of another user: not ours to judge
        if not mounts_under(directory):
            found.append(directory)
    return found


def _remove_killed_sessions_tmp() -> None:
    temproot = Path(os.environ.get("PYTEST_DEBUG_TEMPROOT") or tempfile.gettempdir())
    root = temproot / f"pytest-of-{getpass.getuser()}"
    for directory in killed_sessions_tmp(root):
        shutil.rmtree(directory, ignore_errors=True)


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller, before any worker or basetemp exists
        _remove_killed_sessions_tmp()
        if BYTECODE_CACHE is not None:  # ours, not a prefix the caller shares with other work
            prune_bytecode_cache(BYTECODE_CACHE)
        prune_payload_cache()
    path = config.getoption("timing_json")
    # what runs the tests measures them: an xdist worker, or pytest without workers
    if path and (hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None)):
        config.pluginmanager.register(TestCPU(), "test-cpu")
    # under xdist the controller gets every worker's reports: only it writes
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(TimingReport(Path(path)), "timing-json")


MACHINE_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def machine_cpu(stat: Path = Path("/proc/stat")) -> dict | None:
    """The machine's CPU seconds since boot, summed over its cores: busy (user, nice, system, irq, softirq),
    idle, iowait (idle with I/O outstanding) and steal (taken by the hypervisor); None without
    /proc/stat."""
    try:
        fields = stat.read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    if not fields or fields[0] != "cpu":
        return None
    ticks = dict(zip(MACHINE_CPU_FIELDS, (int(value) / os.sysconf("SC_CLK_TCK") for value in fields[1:])))
    busy = sum(ticks.get(name, 0.0) for name in ("user", "nice", "system", "irq", "softirq"))
    return {"busy": busy, **{name: ticks.get(name, 0.0) for name in ("idle", "iowait", "steal")}}


def cpu_seconds() -> float:
    """CPU seconds of this process and of the children it has waited for (theirs in turn included), less
    those of the test fleets it launched and tore down (their hosts are reaped at teardown: a fleet's
    whole life, not the tearing-down test's CPU)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime + children_cpu_seconds() - reaped_cpu_seconds()


class TestCPU:
    """Adds each phase's CPU seconds to its report (``user_properties``, which xdist sends to the
    controller): from the test's start or its last phase's report to this one. What a test waited for
    counts (ansible-playbook and its forks, a module run on this machine, nvcc, uv); a daemon it left
    running, and a fleet host's processes, do not (cpu_seconds)."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self) -> None:
        self.mark = cpu_seconds()

    def pytest_runtest_logstart(self, nodeid, location):
        self.mark = cpu_seconds()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        now = cpu_seconds()
        report.user_properties.append(("cpu_seconds", round(now - self.mark, 3)))
        self.mark = now
        return report


DISK_SAMPLE_SECONDS = 5.0
DISK_TRACE_STEP_GB = 1.0


def _free_gb(path: Path) -> float:
    stat = os.statvfs(path)
    return round(stat.f_bavail * stat.f_frsize / 2**30, 1)


class TimingReport:
    """Seconds per test and phase, as pytest measured them. Session-scoped fixtures are finalized in
    the last test's teardown: that time is recorded apart (``session_teardown_seconds``), not charged
    to whichever test happened to run last."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.started = time.monotonic()
        self.collect_seconds = 0.0
        self.tests: dict = {}
        self.collect_errors: list = []
        self.last_nodeid = None
        self.session_teardown_seconds = 0.0
        self.session_teardown_cpu_seconds = 0.0
        self.current = "(collection)"
        self.running: list = []  # the tests running now (under xdist, one per worker)
        self.machine_start = machine_cpu()
        self.disk_path = cache_root()
        self.disk = {"path": str(self.disk_path), "start_free_gb": _free_gb(self.disk_path)}
        self.disk.update(least_free_gb=self.disk["start_free_gb"], least_during=self.current)
        # [seconds since the start, free GiB, the tests running] each time the free disk moved by
        # DISK_TRACE_STEP_GB: which tests (of both lanes) hold how much, for the next CI that runs short
        self.disk_trace = [[0.0, self.disk["start_free_gb"], self.current]]
        self.stop = threading.Event()
        threading.Thread(target=self._sample_disk, name="disk-sampler", daemon=True).start()

    def _sample_disk(self) -> None:
        while not self.stop.wait(DISK_SAMPLE_SECONDS):
            self._note_disk()

    def _note_disk(self) -> None:
        free = _free_gb(self.disk_path)
        if free < self.disk["least_free_gb"]:
            self.disk.update(least_free_gb=free, least_during=self.current)
        if abs(free - self.disk_trace[-1][1]) >= DISK_TRACE_STEP_GB:
            self.disk_trace.append([round(time.monotonic() - self.started, 1), free, self.current])

    def pytest_runtest_logstart(self, nodeid, location):
        self.running.append(nodeid)
        self.current = " + ".join(self.running)

    def pytest_runtest_logfinish(self, nodeid, location):
        if nodeid in self.running:
            self.running.remove(nodeid)
        self.current = " + ".join(self.running) or nodeid

    @pytest.hookimpl(wrapper=True)
    def pytest_collection(self, session):
        started = time.monotonic()
        try:
            return (yield)
        finally:
            self.collect_seconds = time.monotonic() - started

    def pytest_collectreport(self, report):
        if report.failed:
            self.collect_errors.append(report.nodeid)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item, nextitem):
        if nextitem is None:
            self.last_nodeid = item.nodeid
        return (yield)

    def pytest_runtest_logreport(self, report):
        test = self.tests.setdefault(report.nodeid, {"nodeid": report.nodeid, "outcome": "passed",
                                                     "setup": 0.0, "call": 0.0, "teardown": 0.0,
                                                     "cpu_seconds": 0.0})
        duration = report.duration
        cpu = dict(report.user_properties).get("cpu_seconds", 0.0)
        if report.when == "teardown" and report.nodeid == self.last_nodeid:
            self.session_teardown_seconds += duration
            self.session_teardown_cpu_seconds += cpu
            duration = cpu = 0.0
        test[report.when] += duration
        test["cpu_seconds"] = round(test["cpu_seconds"] + cpu, 3)
        if report.failed:
            test["outcome"] = "failed" if report.when == "call" else "error"
        elif report.skipped and test["outcome"] == "passed":
            test["outcome"] = "skipped"

    def pytest_sessionfinish(self, session, exitstatus):
        self.stop.set()
        self._note_disk()
        self.disk["end_free_gb"] = _free_gb(self.disk_path)
        machine_end = machine_cpu()
        machine = None
        if self.machine_start is not None and machine_end is not None:
            machine = {"cores": os.cpu_count(),
                       **{key: round(machine_end[key] - self.machine_start[key], 1) for key in machine_end}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps({
            "wall_seconds": round(time.monotonic() - self.started, 3),
            "collect_seconds": round(self.collect_seconds, 3),
            "session_teardown_seconds": round(self.session_teardown_seconds, 3),
            "session_teardown_cpu_seconds": round(self.session_teardown_cpu_seconds, 3),
            "exitstatus": int(exitstatus),
            "collect_errors": self.collect_errors,
            "disk": self.disk,
            "disk_trace": self.disk_trace,
            "machine_cpu": machine,
            "tests": list(self.tests.values()),
        }, indent=1) + "\n")
