"""A fleet host can reboot: the container's systemd asks nspawn for a reboot (exit status 133), the
launcher starts it again on the same root, network namespace and cgroups, and teardown still leaves
nothing. A poweroff from inside stays a poweroff.

Checked on the machine, not by the harness's account: PID 1's start time inside the host, the
launcher's PID and the recorded state, files in the host's /run (a fresh tmpfs per boot) and /root
(the overlay's upper layer, kept), and fleet_present.present() after `down`.
"""

from __future__ import annotations

import copy
import os
import time
from pathlib import Path

import pytest
from fleet import Fleet
from fleet.system import is_alive
from fleet_present import present

pytestmark = pytest.mark.integration

BOOT_MARK = "awk '{print $22}' /proc/1/stat"  # PID 1's start time: new on every container boot


def wait_back(fleet: Fleet, host: str, old_mark: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        proc = fleet.ssh(host, f"systemctl is-system-running --wait >/dev/null; {BOOT_MARK}", check=False,
                         timeout=30)
        mark = proc.stdout.strip()
        if proc.returncode == 0 and mark and mark != old_mark:
            return mark
        time.sleep(0.5)
    raise AssertionError(f"{host} did not come back from its reboot within {timeout} s")


def test_reboot_restarts_the_host_and_down_still_removes_everything(fleet_base):
    fleet = Fleet(f"r{os.getpid() % 10**8}")
    try:
        fleet.up(1, owner_pid=os.getpid(), cuda=False)
        recorded = copy.deepcopy(fleet.state.data)
        [host] = recorded["hosts"]
        name = host["name"]
        before = fleet.ssh(name, f"{BOOT_MARK}; touch /run/this-boot /root/kept").stdout.strip()
        machine_id = fleet.ssh(name, "cat /etc/machine-id").stdout
        fleet.ssh(name, "systemctl reboot", check=False)
        after = wait_back(fleet, name, before)
        assert after != before
        # same host: same launcher (recorded PID and start time), identity and upper layer kept,
        # /run is a new tmpfs
        assert is_alive(host["pid"], host["start"])
        assert fleet.state.data["hosts"][0]["pid"] == host["pid"]
        assert fleet.ssh(name, "cat /etc/machine-id").stdout == machine_id
        assert fleet.ssh(name, "test -e /root/kept && ! test -e /run/this-boot", check=False).returncode == 0
        assert fleet.ssh(name, "ps -p 1 -o comm=").stdout.strip() == "systemd"
        console = (Path(host["dir"]) / "console.log").read_text(errors="replace")
        assert "the container rebooted (nspawn exit status 133)" in console
        # a second reboot works as the first
        fleet.ssh(name, "systemctl reboot", check=False)
        assert wait_back(fleet, name, after) not in (before, after)
        assert fleet.down() is True
        assert present(recorded) == []
    finally:
        fleet.down()


def test_poweroff_from_inside_is_not_restarted(fleet_base):
    fleet = Fleet(f"p{os.getpid() % 10**8}")
    try:
        fleet.up(1, owner_pid=os.getpid(), cuda=False)
        recorded = copy.deepcopy(fleet.state.data)
        [host] = recorded["hosts"]
        fleet.ssh(host["name"], "systemctl poweroff", check=False)
        deadline = time.monotonic() + 60
        while is_alive(host["pid"], host["start"]):
            assert time.monotonic() < deadline, "the launcher outlived a poweroff of its host"
            time.sleep(0.2)
        assert "the container rebooted" not in (Path(host["dir"]) / "console.log").read_text(errors="replace")
        assert fleet.down() is True
        assert present(recorded) == []
    finally:
        fleet.down()
