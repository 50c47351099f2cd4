"""Teardown leaves nothing behind: after a clean `down`, after a failed boot, after the harness was
killed mid-`up` (its ssh masters too), and when one teardown step fails.

The checks read the machine directly (fleet_present.py), not the harness's own leftovers().
"""

from __future__ import annotations

import copy
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fleet import Fleet, FleetError, claims, core
from fleet import host as hostlib
from fleet import teardown as teardown_mod
from fleet.state import fleets_root
from fleet.system import CommandTimeout, children_cpu_seconds, reaped_cpu_seconds
from fleet_present import NSPAWN_PROPAGATE, present

pytestmark = pytest.mark.integration

HARNESS = Path(__file__).resolve().parents[2] / "fleet"


def nspawn_of(launcher: int) -> int:
    """A host's recorded PID is its launcher, which runs systemd-nspawn as its only child (launch.py)."""
    [child] = Path(f"/proc/{launcher}/task/{launcher}/children").read_text().split()
    assert Path(f"/proc/{child}/comm").read_text().strip() == "systemd-nspawn"
    return int(child)


def test_down_removes_everything_and_is_idempotent(fleet_base):
    fleet = Fleet(f"d{os.getpid() % 10**8}")
    try:
        fleet.up(2, owner_pid=os.getpid(), cuda=False)
        recorded, state_dir = copy.deepcopy(fleet.state.data), fleet.dir
        first, second = recorded["hosts"]
        assert fleet.ssh(first["name"], "hostname").stdout.strip() == first["name"]  # leaves a master
        found = present(recorded)
        assert len([p for p in found if p.startswith("process")]) == 3  # 2 hosts + wheelhouse
        assert f"link {recorded['bridge']}" in found
        assert any(p.startswith(f"connection to {first['ip']}") for p in found)
        for h in recorded["hosts"]:
            # each host's overlay root lives only in its own mount namespace, not in the machine's table
            root = f"{h['dir']}/root"
            assert root in Path(f"/proc/{h['pid']}/mounts").read_text()
            assert root not in Path("/proc/mounts").read_text()
            assert any(p.startswith(f"mount {root}") for p in found)
            # nspawn's runtime directory is named by the host's unique machine name; no image lock files
            assert f"nspawn directory {NSPAWN_PROPAGATE / h['machine']}" in found
            fds = [os.readlink(fd) for fd in Path(f"/proc/{nspawn_of(h['pid'])}/fd").iterdir()]
            assert not [fd for fd in fds if fd.startswith("/run/systemd/nspawn/locks")]
        # a crashed nspawn cannot clean up after itself: its /run directory stays for `down` to remove
        os.kill(nspawn_of(second["pid"]), signal.SIGKILL)
        time.sleep(0.5)
        assert f"nspawn directory {NSPAWN_PROPAGATE / second['machine']}" in present(recorded)
        assert fleet.down() is True
        assert present(recorded) == []
        assert not state_dir.exists()
        assert Fleet(fleet.name).down() is False
    finally:
        fleet.down()


BURN = "python3 -c 'import time\nend = time.process_time() + 1.0\nwhile time.process_time() < end: pass'"


def test_down_counts_the_cpu_of_the_hosts_it_reaps_for_the_fleets_this_process_launched(fleet_base):
    """A host's processes are this process's descendants: their CPU reaches its RUSAGE_CHILDREN when
    `down` reaps their launchers. `down` reads it from the fleet's cgroup first (reaped_cpu_seconds, which
    tests/conftest.py TestCPU takes out of the test that tore the fleet down), and only for a fleet this
    process launched (a killed session's fleet, removed by gc(), was another's)."""
    fleet = Fleet(f"u{os.getpid() % 10**8}")
    try:
        for launched_here in (True, False):
            fleet.up(1, owner_pid=os.getpid(), cuda=False)
            fleet.ssh(fleet.hosts[0]["name"], BURN)  # a second of CPU on the host
            if not launched_here:
                fleet.state.data["launched_by"]["pid"] = 1
                fleet.state.save()
            children, reaped = children_cpu_seconds(), reaped_cpu_seconds()
            assert fleet.down() is True
            counted, added = reaped_cpu_seconds() - reaped, children_cpu_seconds() - children
            if launched_here:
                assert counted >= 1.0, counted  # the burn, the boot
                # what was counted is what the kernel added to this process's children on the reaping
                assert added >= 0.9 * counted, (added, counted)
            else:
                assert counted == 0.0
                assert added >= 1.0  # reaped all the same: only the count is left out
    finally:
        fleet.down()


def test_failed_boot_removes_what_it_made(fleet_base, monkeypatch):
    """A host that cannot boot fails `up` with its console output, and `up` removes everything."""
    broken = Fleet(f"f{os.getpid() % 10**8}")
    nspawn_command = hostlib.nspawn_command
    monkeypatch.setattr(hostlib, "nspawn_command",
                        lambda *args: [*nspawn_command(*args), "--no-such-nspawn-option"])
    torn_down = []
    teardown = core.teardown

    def spy(state):
        torn_down.append(copy.deepcopy(state.data))
        teardown(state)

    monkeypatch.setattr(core, "teardown", spy)
    with pytest.raises(FleetError, match="exited while booting") as failure:
        broken.up(2, owner_pid=os.getpid(), cuda=False)
    assert "no-such-nspawn-option" in str(failure.value)  # the console tail names the cause
    assert broken.state is None
    assert not broken.dir.exists()
    [recorded] = torn_down
    # processes were started (hosts and the wheelhouse server) before the failure: all are gone
    assert all(e["pid"] for e in [*recorded["hosts"], recorded["wheelhouse"]])
    assert present(recorded) == []


def test_killed_harness_leaves_nothing_after_the_next_down(fleet_base):
    name = f"k{os.getpid() % 10**8}"
    state_file = fleets_root() / name / "state.json"
    # owned by this session: if this test is killed too, the next session's gc() removes the fleet
    harness = subprocess.Popen([sys.executable, str(HARNESS), "up", "--name", name, "--hosts", "3",
                                "--no-cuda", "--owner-pid", str(os.getpid())],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
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
        assert recorded["owner"]["pid"] == os.getpid()
        found = present(recorded)
        assert f"link {recorded['bridge']}" in found
        assert any(p.startswith("netns") for p in found)
        assert any(p.startswith("process") for p in found)
        # a connection master killed with the harness (as CI's timeout kills the process group) leaves
        # its socket file, which no `ssh -O exit` can close
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as dead_master:
            dead_master.bind(str(claims.control_dir(name) / "killed-master"))
    finally:
        harness.kill()
        down = subprocess.run([sys.executable, str(HARNESS), "down", "--name", name], capture_output=True,
                              text=True, check=False)
    assert down.returncode == 0, down.stdout + down.stderr
    assert present(recorded) == []
    assert not state_file.parent.exists()


def test_a_failing_teardown_step_does_not_stop_the_others(fleet_base, monkeypatch):
    """A cgroup the kernel will not remove (EBUSY) and an ssh master that does not answer: every other
    step still runs, `down` names what is left and keeps the state, and the next `down` finishes."""
    # a host may be called "wheelhouse": the wheelhouse server's cgroup cannot take its name
    fleet = Fleet(f"e{os.getpid() % 10**8}")
    try:
        fleet.up(["wheelhouse"], owner_pid=os.getpid(), cuda=False)
        recorded = copy.deepcopy(fleet.state.data)
        busy_group = recorded["hosts"][0]["cgroups"][0]
        rmdir = os.rmdir

        def refusing_rmdir(path, *args, **kwargs):
            if str(path) == busy_group:
                raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))
            return rmdir(path, *args, **kwargs)

        def unanswered_ssh(cmd, **kwargs):
            raise CommandTimeout(f"{' '.join(cmd)} did not finish in 10 s (killed)")

        assert fleet.ssh("wheelhouse", "true").returncode == 0  # a master to close
        monkeypatch.setattr(os, "rmdir", refusing_rmdir)
        monkeypatch.setattr(teardown_mod, "run", unanswered_ssh)
        with pytest.raises(FleetError, match="could not remove") as failure:
            fleet.down()
        message = str(failure.value)
        assert f"rmdir {busy_group}: Device or resource busy" in message
        assert "ssh master" in message
        assert "did not finish" in message
        left = present(recorded)
        # processes, links, namespaces, mounts and nspawn's directory went regardless
        assert not [p for p in left if p.split()[0] in ("process", "link", "netns", "mount", "nspawn")]
        assert f"cgroup {Path(busy_group).parent}" in left
        assert Fleet(fleet.name).state.data["phase"] == "teardown-failed"
        monkeypatch.undo()
        assert fleet.down() is True
        assert present(recorded) == []
    finally:
        monkeypatch.undo()
        fleet.down()
