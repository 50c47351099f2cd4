"""Removing a fleet: everything its state records, by PID and by name, whatever state it was left in."""

from __future__ import annotations

import os
import shutil
import signal
import time
from pathlib import Path
from typing import Dict, List, Optional

from . import net
from .state import State
from .system import (
    FleetError,
    is_alive,
    kill_cgroups,
    remove_cgroups,
    run,
    signal_process,
    wait_cgroups_empty,
)

STOP_TIMEOUT = 10  # seconds for an orderly poweroff before everything left is killed
# ssh masters the controller may keep for fleet hosts: ours, and ansible's default ControlPath
ANSIBLE_CONTROL_PATH = "~/.ansible/cp/%C"


def teardown(state: State) -> None:
    """Stop processes (orderly, then by force), remove cgroups, links, namespaces, then the state."""
    data = state.data
    hosts, wh = data.get("hosts", []), data.get("wheelhouse", {})
    for entry in [*hosts, wh]:  # orderly first: nspawn powers its container off on SIGTERM
        signal_process(entry.get("pid"), entry.get("start"), signal.SIGTERM)
    roots = [Path(c) for c in data.get("cgroups", [])]
    if not wait_cgroups_empty(roots, STOP_TIMEOUT):
        kill_cgroups(roots)
    for entry in [*hosts, wh]:  # recorded, but killed before it could join its cgroup
        signal_process(entry.get("pid"), entry.get("start"), signal.SIGKILL)
        _reap(entry.get("pid"))
    _exit_ssh_masters(state, [h["ip"] for h in hosts])
    remove_cgroups(roots)
    for h in hosts:
        net.delete_link(h.get("veth"))  # removes both ends even if the namespace is still pinned
        net.delete_netns(h.get("netns"))
    net.delete_link(data.get("bridge"))
    left = [item for item in leftovers(data, state.dir) if not item.startswith("directory ")]
    if left:  # keep the state: a later `down` retries exactly these
        data["phase"] = "teardown-failed"
        state.save()
        raise FleetError(f"fleet {state.name}: could not remove: {'; '.join(left)}")
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


def _exit_ssh_masters(state: State, addresses: List[str]) -> None:
    """Stop ssh connection masters to these addresses: a later fleet may reuse the addresses."""
    for address in addresses:
        for path in (str(state.dir / "cp-%C"), os.path.expanduser(ANSIBLE_CONTROL_PATH)):
            run(["ssh", "-o", f"ControlPath={path}", "-O", "exit", f"root@{address}"], check=False,
                timeout=10)


def leftovers(data: Dict, state_dir: Path) -> List[str]:
    """What of a fleet (given its recorded state) still exists on the machine."""
    left = []
    hosts, wh = data.get("hosts", []), data.get("wheelhouse", {})
    left += [f"netns {h['netns']}" for h in hosts if net.netns_exists(h["netns"])]
    links = [data.get("bridge")] + [h["veth"] for h in hosts]
    left += [f"link {n}" for n in links if n and net.link_exists(n)]
    left += [f"cgroup {c}" for c in data.get("cgroups", []) if Path(c).exists()]
    left += [f"process {e['pid']}" for e in [*hosts, wh] if is_alive(e.get("pid"), e.get("start"))]
    netns_paths = {f"/run/netns/{h['netns']}" for h in hosts}
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4]
        if target in netns_paths or target.startswith(f"{state_dir}/"):
            left.append(f"mount {target}")
    if state_dir.exists():
        left.append(f"directory {state_dir}")
    return left
