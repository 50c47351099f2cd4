"""Teardown leaves nothing behind: after a clean `down`, and after the harness was killed mid-`up`.

The checks read the machine directly (ip, /proc, /sys/fs/cgroup), not the harness's own leftovers().
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fleet import Fleet, FleetError
from fleet import host as hostlib
from fleet.state import fleets_root

pytestmark = pytest.mark.integration

HARNESS = Path(__file__).resolve().parents[2] / "fleet"


def _started(pid: int):
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    return None if fields[0] == "Z" else int(fields[19])


def _present(data: dict) -> list:
    """Resources of a recorded fleet that exist on the machine right now."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout.split()
    links = {line.split(":")[1].strip().split("@")[0] for line in subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout.splitlines()}
    mounts = {line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()}
    hosts, wheelhouse = data["hosts"], data["wheelhouse"]
    found = [f"netns {h['netns']}" for h in hosts if h["netns"] in netns]
    found += [f"link {n}" for n in [data["bridge"]] + [h["veth"] for h in hosts] if n in links]
    found += [f"mount {m}" for m in mounts
              if any(m == f"/run/netns/{h['netns']}" or m.startswith(h["dir"]) for h in hosts)]
    found += [f"cgroup {c}" for c in data["cgroups"] if Path(c).exists()]
    found += [f"process {e['pid']}" for e in [*hosts, wheelhouse]
              if e["pid"] and _started(e["pid"]) == e["start"]]
    return found


def test_down_removes_everything_and_is_idempotent(fleet_base):
    fleet = Fleet(f"d{os.getpid() % 10**8}")
    try:
        fleet.up(2, owner_pid=os.getpid(), cuda=False)
        recorded, state_dir = copy.deepcopy(fleet.state.data), fleet.dir
        present = _present(recorded)
        assert len([p for p in present if p.startswith("process")]) == 3  # 2 hosts + wheelhouse
        assert f"link {recorded['bridge']}" in present
        # each host's overlay root lives only in its own mount namespace, not in the machine's table
        for h in recorded["hosts"]:
            root = f"{h['dir']}/root"
            assert root in Path(f"/proc/{h['pid']}/mounts").read_text()
            assert root not in Path("/proc/mounts").read_text()
        assert fleet.down() is True
        assert _present(recorded) == []
        assert not state_dir.exists()
        assert Fleet(fleet.name).down() is False
    finally:
        fleet.down()


def test_failed_boot_removes_what_it_made(fleet_base, monkeypatch):
    """A host that cannot boot fails `up` with its console output, and `up` removes everything."""
    broken = Fleet(f"f{os.getpid() % 10**8}")
    nspawn_command = hostlib.nspawn_command
    monkeypatch.setattr(hostlib, "nspawn_command",
                        lambda *args: [*nspawn_command(*args), "--no-such-nspawn-option"])
    with pytest.raises(FleetError, match="exited while booting") as failure:
        broken.up(2, owner_pid=os.getpid(), cuda=False)
    assert "no-such-nspawn-option" in str(failure.value)  # the console tail names the cause
    assert broken.state is None
    assert not broken.dir.exists()
    assert not any(broken.name in line for line in subprocess.run(
        ["ip", "-o", "link", "show"], capture_output=True, text=True, check=True).stdout.splitlines())
    assert broken.name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                             check=True).stdout


def test_killed_harness_leaves_nothing_after_the_next_down(fleet_base):
    name = f"k{os.getpid() % 10**8}"
    state_file = fleets_root() / name / "state.json"
    harness = subprocess.Popen([sys.executable, str(HARNESS), "up", "--name", name, "--hosts", "3",
                                "--no-cuda"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        recorded = None
        deadline = time.monotonic() + 300
        # kill it once the second host has been launched: bridge, namespaces, mounts, processes exist
        while not (recorded and recorded["hosts"][1]["pid"]):
            assert harness.poll() is None, f"harness ended before it was killed: {harness.stdout.read()}"
            assert time.monotonic() < deadline, "harness never launched a second host"
            if state_file.exists():
                recorded = json.loads(state_file.read_text())
            time.sleep(0.01)
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        recorded = json.loads(state_file.read_text())
        assert recorded["phase"] == "starting"
        present = _present(recorded)
        assert f"link {recorded['bridge']}" in present
        assert any(p.startswith("netns") for p in present)
        assert any(p.startswith("process") for p in present)
    finally:
        harness.kill()
        down = subprocess.run([sys.executable, str(HARNESS), "down", "--name", name], capture_output=True,
                              text=True, check=False)
    assert down.returncode == 0, down.stdout + down.stderr
    assert _present(recorded) == []
    assert not state_file.parent.exists()
