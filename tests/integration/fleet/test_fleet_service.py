"""A playbook installs, enables and starts a systemd unit on every host over ssh; a rerun changes nothing.

The playbook and role are the molecule scenario's probe (tests/molecule/fleet/probe.yml): both paths
test one thing.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

CONVERGE = Path(__file__).resolve().parents[2] / "molecule" / "fleet" / "probe.yml"
UNIT = "fleet-probe.service"


@pytest.fixture(scope="module")
def first_run(fleet_play):
    return fleet_play(CONVERGE)


@pytest.fixture(scope="module")
def second_run(fleet_play, first_run):
    return fleet_play(CONVERGE)


def test_first_run_installs_enables_and_starts_the_unit_on_every_host(fleet, first_run):
    assert first_run.rc == 0, first_run.stdout
    for h in fleet.hosts:
        assert first_run.task(h["name"], "Install the probe unit")["changed"] is True
        started = first_run.task(h["name"], "Enable and start the probe service")
        assert started["changed"] is True
        assert started["enabled"] is True
        assert started["state"] == "started"
    assert set(first_run.stats["changed"]) == {h["name"] for h in fleet.hosts}
    assert not first_run.stats.get("failures")


def _show(remote) -> dict:
    out = remote.check_output(f"systemctl show --property=MainPID,InvocationID,ActiveState,NRestarts {UNIT}")
    return dict(line.split("=", 1) for line in out.splitlines())


def test_unit_runs_and_restarts(fleet, first_run):
    for h in fleet.hosts:
        remote = fleet.testinfra(h["name"])
        service = remote.service(UNIT)
        assert service.is_enabled
        assert service.is_running
        old = _show(remote)
        remote.check_output(f"systemctl restart {UNIT}")
        new = _show(remote)
        assert remote.service(UNIT).is_running
        assert int(new["MainPID"]) > 0
        assert new["MainPID"] != old["MainPID"]
        assert new["InvocationID"] != old["InvocationID"]
        # a crash: systemd itself brings the service back (Restart=on-failure), with a new process
        remote.check_output(f"systemctl kill --signal=KILL {UNIT}")
        deadline = time.monotonic() + 30
        now = _show(remote)
        while not (now["ActiveState"] == "active" and now["MainPID"] not in ("0", new["MainPID"])):
            assert time.monotonic() < deadline, f"{UNIT} on {h['name']} not back after SIGKILL: {now}"
            time.sleep(0.2)
            now = _show(remote)
        assert int(now["NRestarts"]) == int(new["NRestarts"]) + 1


def test_second_run_reports_no_change(fleet, second_run):
    assert second_run.rc == 0, second_run.stdout
    assert not second_run.stats.get("changed"), second_run.stats
    assert set(second_run.stats["ok"]) == {h["name"] for h in fleet.hosts}
    for h in fleet.hosts:
        assert second_run.task(h["name"], "Enable and start the probe service")["changed"] is False
