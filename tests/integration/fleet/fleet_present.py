"""What of a recorded fleet exists on the machine right now, read from the machine itself.

Independent of the harness's own ``leftovers()`` (tests/fleet/teardown.py), so that a teardown bug
cannot hide behind a matching bug in its own check: links and namespaces from ``ip``, mounts from
the mount table of EVERY process (a host's overlay root lives in a private mount namespace), cgroups
and processes from /sys and /proc, TCP connections to the hosts from /proc/net/tcp.
"""

from __future__ import annotations

import copy
import ipaddress
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Set

NSPAWN_PROPAGATE = Path("/run/systemd/nspawn/propagate")
CLAIMS = Path("/run/sglang-fleet")
LISTEN, TIME_WAIT = "0A", "06"


def started(pid: int) -> Optional[int]:
    """Start time of a live (not zombie) process, None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else int(fields[19])


def _all_mount_lines() -> List[str]:
    lines, seen = [], set()
    for proc in Path("/proc").iterdir():
        try:
            namespace = os.readlink(proc / "ns" / "mnt") if proc.name.isdigit() else None
            if namespace is None or namespace in seen:
                continue
            lines += (proc / "mountinfo").read_text().splitlines()
            seen.add(namespace)
        except OSError:
            continue
    return lines


def connections_to(addresses: Iterable[str]) -> List[str]:
    """Sockets held by a process (inode != 0) with one of ``addresses`` as peer, except listeners
    and TIME_WAIT: an ssh connection master left to a host, or any other client."""
    wanted: Set[str] = set(addresses)
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        peer = str(ipaddress.IPv4Address(int(fields[2].split(":")[0], 16).to_bytes(4, sys.byteorder)))
        if peer in wanted and fields[3] not in (LISTEN, TIME_WAIT) and fields[9] != "0":
            found.append(f"connection to {peer} (socket inode {fields[9]}, state {fields[3]})")
    return found


def present(data: Dict) -> List[str]:
    """Resources of a recorded fleet that exist on the machine right now."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout.split()
    links = {line.split(":")[1].strip().split("@")[0] for line in subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout.splitlines()}
    hosts, wheelhouse = data["hosts"], data["wheelhouse"]
    found = [f"netns {h['netns']}" for h in hosts if h["netns"] in netns]
    found += [f"link {n}" for n in [data["bridge"]] + [h["veth"] for h in hosts] if n in links]
    needles = [f"{h['dir']}/" for h in hosts] + [f"/run/netns/{h['netns']} " for h in hosts]
    found += [f"mount {line.split()[4]}" for line in _all_mount_lines() if any(n in line for n in needles)]
    found += [f"cgroup {c}" for c in data["cgroups"] if Path(c).exists()]
    found += [f"process {e['pid']}" for e in [*hosts, wheelhouse]
              if e["pid"] and started(e["pid"]) == e["start"]]
    found += [f"nspawn directory {NSPAWN_PROPAGATE / h['machine']}" for h in hosts
              if (NSPAWN_PROPAGATE / h["machine"]).exists()]
    claim = CLAIMS / data["name"]
    try:  # the claim on the name, if it names this fleet's state (hosts live in <state dir>/hosts/)
        if (claim / "owner").read_text().strip() == str(Path(hosts[0]["dir"]).parents[1] / "state.json"):
            found.append(f"claim {claim}")
    except OSError:
        pass
    found += connections_to(h["ip"] for h in hosts)
    return found


@contextmanager
def checked_fleet(fleet, hosts, what: str, **up) -> Iterator:
    """``fleet`` up with ``hosts`` (owned by this process), down at the end, also when the body fails;
    after a body that did not fail, nothing of it may be left on the machine (``present``)."""
    recorded = None
    try:
        fleet.up(hosts, owner_pid=os.getpid(), **up)
        recorded = copy.deepcopy(fleet.state.data)
        yield fleet
    finally:
        fleet.down()
    assert present(recorded) == [], f"{what}'s down left these behind"
