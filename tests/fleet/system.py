"""Thin wrappers around the machine: commands, required tools, processes and cgroups.

Everything here acts on an exact name or PID handed in by the caller (read from a fleet's state),
never on a pattern, so two fleets, or a fleet and anything else on the machine, cannot touch each other.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import resource
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Dict, Iterable, List, Optional


class FleetError(RuntimeError):
    """A fleet operation failed; the message says what to do."""


class CommandTimeout(FleetError):
    """A command ran past its time limit (it and everything it started were killed)."""


# Every command the harness runs -> the Debian package that ships it (the names `.ci/run` installs).
FLEET_TOOLS = {
    "systemd-nspawn": "systemd-container",
    "debootstrap": "debootstrap",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "tar": "tar",
}


def require_tools() -> None:
    """Fail with the apt packages to install when a command is missing or we are not root."""
    if os.geteuid() != 0:
        raise FleetError("the test fleet needs root (network namespaces, overlay mounts, cgroups)")
    missing = sorted({package for tool, package in FLEET_TOOLS.items() if shutil.which(tool) is None})
    if missing:
        raise FleetError(f"missing commands for the test fleet; install them with: "
                         f"apt-get install -y {' '.join(missing)}")


def run(cmd: List[str], *, check: bool = True, timeout: float = 120, input_text: Optional[str] = None,
        pass_fds: Iterable[int] = ()) -> subprocess.CompletedProcess:
    """Run a command, capturing output; on failure raise FleetError with its stderr.

    The command gets a session of its own, so a timeout kills it and everything it started
    (debootstrap's chroot'ed dpkg, ssh's proxies) and raises CommandTimeout, a FleetError.
    """
    try:
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if input_text is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True, pass_fds=tuple(pass_fds))
    except OSError as exc:
        raise FleetError(f"cannot run {cmd[0]}: {exc}") from exc
    try:
        stdout, stderr = proc.communicate(input_text, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise CommandTimeout(f"{' '.join(cmd)} did not finish in {timeout:.0f} s (killed)") from None
    if check and proc.returncode != 0:
        raise FleetError(f"{' '.join(cmd)} exited {proc.returncode}: {(stderr or stdout).strip()}")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


# --- processes -----------------------------------------------------------------------------------

def _stat(pid: int) -> Optional[List[str]]:
    """Fields of /proc/PID/stat after the command name (None when the process is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses: split after its closing parenthesis
    return stat[stat.rindex(")") + 2:].split()


def start_time(pid: int) -> Optional[int]:
    """The process's start time in clock ticks since boot (None when it is gone); guards against PID reuse."""
    fields = _stat(pid)
    return int(fields[19]) if fields else None


def is_alive(pid: Optional[int], started: Optional[int]) -> bool:
    """The recorded process still runs (a zombie waiting for its parent to reap it does not count)."""
    fields = _stat(pid) if pid else None
    return bool(fields) and started is not None and int(fields[19]) == started and fields[0] not in "ZX"


def signal_process(pid: Optional[int], started: Optional[int], sig: int) -> None:
    """Signal a PID only if it is still the process recorded (same start time)."""
    if is_alive(pid, started):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


# --- cgroups -------------------------------------------------------------------------------------

def cgroup_parents() -> List[Path]:
    """Where this process sits in the hierarchies nspawn uses: cgroup2 and the named systemd v1 one.

    Fleet cgroups are created below these, never above, so whatever confines this process (a CI
    runner's cgroup) still confines the hosts.
    """
    mounts = {}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        pre, _, post = line.partition(" - ")
        fstype, _source, options = post.split(" ")[:3]
        mount_point = pre.split(" ")[4]
        if fstype == "cgroup2":
            mounts["0:"] = mount_point
        elif fstype == "cgroup" and "name=systemd" in options.split(","):
            mounts["name=systemd"] = mount_point
    parents = []
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        hier_id, controllers, path = line.split(":", 2)
        key = "0:" if hier_id == "0" and controllers == "" else controllers
        if key in mounts:
            parents.append(Path(mounts[key]) / path.lstrip("/"))
    if not parents:
        raise FleetError("no cgroup2 or name=systemd cgroup hierarchy is mounted; systemd-nspawn needs one")
    return parents


def cgroup_tree(root: Path) -> List[Path]:
    """A cgroup directory and all its descendants, deepest first (the order rmdir needs)."""
    if not root.is_dir():
        return []
    found = [Path(d) for d, _, _ in os.walk(root)]
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def cgroup_pids(root: Path) -> List[int]:
    pids: List[int] = []
    for group in cgroup_tree(root):
        try:
            pids += [int(p) for p in (group / "cgroup.procs").read_text().split()]
        except OSError:
            continue
    return pids


def kill_cgroups(roots: Iterable[Path], timeout: float = 10) -> List[int]:
    """SIGKILL every process in the cgroup subtrees until they are empty; return PIDs still left.

    On cgroup2 (Linux >= 5.14) ``cgroup.kill`` kills a whole subtree at once, so a process forking
    in a loop cannot outrun the kill; the v1 hierarchies only allow signalling PID by PID.
    """
    roots = list(roots)
    deadline = time.monotonic() + timeout
    while True:
        pids = sorted({pid for root in roots for pid in cgroup_pids(root)})
        if not pids or time.monotonic() > deadline:
            return pids
        for root in roots:
            if (root / "cgroup.kill").exists():
                with contextlib.suppress(OSError):
                    (root / "cgroup.kill").write_text("1")
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def wait_cgroups_empty(roots: Iterable[Path], timeout: float) -> bool:
    roots = list(roots)
    deadline = time.monotonic() + timeout
    while any(cgroup_pids(root) for root in roots):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


# CPU seconds of the fleets this process launched and tore down, each read from its cgroup2 cpu.stat just
# before its cgroups went: their processes were this process's descendants, so the kernel added their CPU
# to its RUSAGE_CHILDREN when their launchers were reaped, at teardown. tests/conftest.py TestCPU takes it
# out of the test that happened to tear a fleet down (a fleet's whole life is not that test's CPU).
_REAPED_CPU = {"seconds": 0.0}


def cgroup_cpu_seconds(group: Path) -> Optional[float]:
    """The CPU seconds a cgroup2 group and its descendants used (cpu.stat usage_usec); None elsewhere."""
    try:
        for line in (group / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
    except (OSError, ValueError):
        return None
    return None


def note_reaped_cpu(roots: Iterable[Path]) -> None:
    """Add the CPU of a stopped fleet's cgroups (the first that reports it: one hierarchy) to
    ``reaped_cpu_seconds``."""
    for root in roots:
        seconds = cgroup_cpu_seconds(root)
        if seconds is not None:
            _REAPED_CPU["seconds"] += seconds
            return


def children_cpu_seconds() -> float:
    """CPU seconds (user + system) of this process's children that have been waited for, and of theirs:
    a fleet's hosts too, once `down` has reaped them."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def reaped_cpu_seconds() -> float:
    """CPU seconds of the fleets this process launched, stopped and reaped so far (note_reaped_cpu)."""
    return _REAPED_CPU["seconds"]


def remove_cgroups(roots: Iterable[Path]) -> List[str]:
    """Remove the cgroup subtrees, deepest first; return what could not be removed and why."""
    errors = []
    for root in roots:
        for group in cgroup_tree(root):
            try:
                group.rmdir()
            except FileNotFoundError:
                continue
            except OSError as exc:  # EBUSY: a process is left in it
                errors.append(f"rmdir {group}: {exc.strerror}")
    return errors


# --- mounts --------------------------------------------------------------------------------------

MNT_DETACH = 2


def mounts_under(path: Path) -> List[str]:
    """The mount points at or below ``path`` in this mount namespace."""
    prefix = str(path.resolve())
    targets = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        # mountinfo escapes space, tab, newline and backslash as octal
        target = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4])
        if target == prefix or target.startswith(prefix + "/"):
            targets.append(target)
    return targets


def unmount_under(path: Path) -> None:
    """Detach every mount at or below ``path`` in this mount namespace, deepest first."""
    targets = mounts_under(path)
    libc = ctypes.CDLL(None, use_errno=True)
    for target in sorted(targets, key=len, reverse=True):
        if libc.umount2(target.encode(), MNT_DETACH) != 0:
            raise FleetError(f"cannot unmount {target}: {os.strerror(ctypes.get_errno())}; unmount it, "
                             f"then retry")

def mounts_mentioning(needles: Iterable[str]) -> List[str]:
    """Mounts, in the mount namespace of any process, whose mountinfo line contains one of ``needles``
    (as mount point, bind source or overlay layer). Mounts in private namespaces, such as a host's
    overlay root, do not show in this process's own table."""
    needles = tuple(needles)
    seen, found = set(), []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            namespace = os.readlink(proc / "ns" / "mnt")
            if namespace in seen:
                continue
            table = (proc / "mountinfo").read_text()
        except OSError:  # gone, or a kernel thread
            continue
        seen.add(namespace)
        found += [f"{line.split()[4]} (mount namespace of PID {proc.name})" for line in table.splitlines()
                  if any(n in line for n in needles)]
    return found


def memory_bytes(pids: Iterable[int]) -> Dict[str, int]:
    """Resident memory of the processes: ``pss`` splits shared pages between their users (the fair
    share), ``rss`` counts every mapped page in full (an upper bound)."""
    total = {"pss": 0, "rss": 0}
    for pid in pids:
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        except OSError:
            continue
        for line in rollup:
            key = line.split(":")[0].lower()
            if key in total:
                total[key] += int(line.split()[1]) * 1024
    return total
