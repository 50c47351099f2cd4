"""Removing a fleet: everything its state records, by PID and by name, whatever state it was left in.

Every step is tried whatever the steps before it did: a cgroup that will not go away must not keep
the links and namespaces alive. What is still there afterwards is reported (FleetError), and the
state and the name's claim are kept, so a later ``down`` retries exactly that and no other fleet
takes the names meanwhile.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

from . import claims, net
from .state import State
from .system import (
    FleetError,
    cgroup_pids,
    is_alive,
    kill_cgroups,
    mounts_mentioning,
    note_reaped_cpu,
    remove_cgroups,
    run,
    signal_process,
    start_time,
    wait_cgroups_empty,
)

STOP_TIMEOUT = 10  # seconds for an orderly poweroff before everything left is killed
# nspawn keeps a directory per machine name here; it removes it itself only when it exits in order.
NSPAWN_PROPAGATE = Path("/run/systemd/nspawn/propagate")


def teardown(state: State) -> None:
    """Stop processes (orderly, then by force), remove runtime files, cgroups, links, namespaces, the
    name's claim, then the state directory. Raises FleetError naming whatever is left."""
    data, name = state.data, state.name
    procs = [*data.get("hosts", []), data.get("wheelhouse", {})]
    claim = claims.read(name)
    if claim and claim.get("owner") != state.owner:
        # Killed before it claimed the name: it created nothing by name, and those names belong to
        # the fleet holding the claim now. Only the processes it recorded (PID + start time) are ours.
        for entry in procs:
            signal_process(entry.get("pid"), entry.get("start"), signal.SIGKILL)
        shutil.rmtree(state.dir, ignore_errors=True)
        return
    errors: List[str] = []

    def attempt(what: str, action: Callable, *args):
        try:
            return action(*args)
        except (OSError, FleetError) as exc:
            errors.append(f"{what}: {exc}")
            return None

    attempt("closing ssh masters", _exit_ssh_masters, name)  # first: the hosts still answer
    for entry in procs:  # orderly first: nspawn powers its container off on SIGTERM
        attempt("SIGTERM", signal_process, entry.get("pid"), entry.get("start"), signal.SIGTERM)
    roots = [Path(c) for c in data.get("cgroups", [])]
    if not wait_cgroups_empty(roots, STOP_TIMEOUT):
        survivors = attempt("killing the fleet's cgroups", kill_cgroups, roots)
        if survivors:
            errors.append(f"PIDs {survivors} outlived SIGKILL in {', '.join(map(str, roots))}")
    for entry in procs:  # recorded, but killed before it could join its cgroup
        attempt("SIGKILL", signal_process, entry.get("pid"), entry.get("start"), signal.SIGKILL)
        _reap(entry.get("pid"))
    for h in data.get("hosts", []):
        if not _host_running(h):
            attempt("nspawn runtime directory", _remove_dir, _propagate_dir(h))
    launcher = data.get("launched_by") or {}
    if launcher.get("pid") == os.getpid() and launcher.get("start") == start_time(os.getpid()):
        note_reaped_cpu(roots)  # its hosts were this process's descendants, reaped just above
    errors += attempt("removing cgroups", remove_cgroups, roots) or []
    for h in data.get("hosts", []):
        attempt(f"deleting {h.get('veth')}", net.delete_link, h.get("veth"))  # both ends, even if pinned
        attempt(f"deleting netns {h.get('netns')}", net.delete_netns, h.get("netns"))
    attempt(f"deleting {data.get('bridge')}", net.delete_link, data.get("bridge"))
    left = [item for item in leftovers(state) if not item.startswith(("directory ", "claim "))]
    if left:
        data["phase"] = "teardown-failed"
        state.save()
        raise FleetError(f"fleet {name}: could not remove: {'; '.join(left)}"
                         + (f" (errors: {'; '.join(errors)})" if errors else "")
                         + f"; the state is kept: `python tests/fleet down --name {name}` retries")
    claims.release(name, state.owner)
    shutil.rmtree(state.dir, ignore_errors=True)


def _reap(pid: Optional[int]) -> None:
    if not pid:
        return
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
        except ChildProcessError:
            return  # not our child (another process started it): init reaps it
        time.sleep(0.05)


def _exit_ssh_masters(name: str) -> None:
    """Every connection master the fleet's users opened has its socket in the claim's cp/ directory
    (the inventory and the molecule scenario point ssh there): ask each to exit."""
    sockets = [p for p in claims.control_dir(name).glob("*") if p.is_socket()]
    for socket_path in sockets:
        # a literal ControlPath (no % tokens) names the master whatever the destination
        run(["ssh", "-o", f"ControlPath={socket_path}", "-O", "exit", "fleet-host"], check=False, timeout=10)
        if socket_path.is_socket() and not _listening(socket_path):
            socket_path.unlink()  # its master was killed (SIGKILL leaves the socket file): nothing to close


def _listening(socket_path: Path) -> bool:
    """Whether a process still accepts connections on the unix socket."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(5)
        try:
            probe.connect(str(socket_path))
        except (ConnectionRefusedError, FileNotFoundError):
            return False
        except OSError:
            return True  # something is there (a timeout, a full backlog): leave it to the check
    return True


def _propagate_dir(host: Dict) -> Optional[Path]:
    machine = host.get("machine")
    return NSPAWN_PROPAGATE / machine if machine else None


def _remove_dir(path: Optional[Path]) -> None:
    if path and path.is_dir():
        shutil.rmtree(path)


def _host_running(host: Dict) -> bool:
    return is_alive(host.get("pid"), host.get("start")) or any(
        cgroup_pids(Path(c)) for c in host.get("cgroups", []))


def leftovers(state: State) -> List[str]:
    """What of a fleet (as its state records it) still exists on the machine."""
    data, name = state.data, state.name
    hosts, procs = data.get("hosts", []), [*data.get("hosts", []), data.get("wheelhouse", {})]
    left = [f"netns {h['netns']}" for h in hosts if net.netns_exists(h["netns"])]
    links = [data.get("bridge")] + [h["veth"] for h in hosts]
    left += [f"link {n}" for n in links if n and net.link_exists(n)]
    left += [f"cgroup {c}" for c in data.get("cgroups", []) if Path(c).exists()]
    pids = {e["pid"] for e in procs if is_alive(e.get("pid"), e.get("start"))}
    pids |= {pid for c in data.get("cgroups", []) for pid in cgroup_pids(Path(c))}
    left += [f"process {pid}" for pid in sorted(pids)]
    # host roots are mounted in private mount namespaces: look in every process's, not only ours
    left += [f"mount {m}" for m in mounts_mentioning(
        [f"{state.dir}/", *(f"/run/netns/{h['netns']} " for h in hosts)])]
    left += [f"nspawn runtime directory {p}" for p in map(_propagate_dir, hosts) if p and p.exists()]
    claim = claims.read(name)
    if claim and claim.get("owner") == state.owner:
        with contextlib.suppress(OSError):
            left += [f"ssh master {p}" for p in claims.control_dir(name).glob("*") if p.is_socket()]
        left.append(f"claim {claims.claim_dir(name)}")
    if state.dir.exists():
        left.append(f"directory {state.dir}")
    return left
