"""Fleet names are claimed machine-wide: a second fleet of the same name, from another cache root
(another checkout, another CI job), is refused before it touches anything, and the first one keeps
working. Without the claim both would share bridge, veth, namespace and cgroup names, and the second
one's failure cleanup would kill the first one's hosts."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest
from fleet import Fleet, FleetError
from fleet_present import present

pytestmark = pytest.mark.integration


def test_same_name_from_another_cache_root_is_refused(fleet, tmp_path, monkeypatch):
    before, holder = copy.deepcopy(fleet.state.data), fleet.state.owner
    running = present(before)
    monkeypatch.setenv("SGLANG_FLEET_CACHE", str(tmp_path))
    # the other cache root shares the base (no second debootstrap), nothing else
    (tmp_path / "fleet-base").symlink_to(Path(before["base"]).parent)
    twin = Fleet(fleet.name)
    assert twin.state is None  # the first fleet's state is not visible from the other cache root
    claimed = rf"claim /run/sglang-fleet/{fleet.name}\b.*already exist"
    with pytest.raises(FleetError, match=claimed) as refused:
        twin.up(len(fleet.hosts), owner_pid=os.getpid(), cuda=False)
    assert holder in str(refused.value)  # names the fleet that holds the name
    assert not (tmp_path / "fleets" / fleet.name).exists()
    monkeypatch.undo()
    # the first fleet is untouched and still works
    assert present(before) == running
    for h in fleet.hosts:
        assert fleet.ssh(h["name"], "systemctl is-system-running").stdout.strip() == "running"
