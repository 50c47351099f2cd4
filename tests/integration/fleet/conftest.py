"""Session fixtures for tests on the disposable test fleet (tests/fleet): real systemd hosts over ssh.

``fleet``: three hosts, booted once per session and torn down at its end (also when tests fail; a
killed session's fleet is removed by the next session's ``gc()``). ``fleet_play``: run a playbook
against it through ansible-runner, with per-host task results and stats.
"""

from __future__ import annotations

import copy
import os
import shutil
from pathlib import Path
from typing import Iterator

import pytest
from ansible_run import PlayResult, run_playbook
from fleet import Fleet, gc
from fleet.base import ensure_base
from fleet.system import FLEET_TOOLS
from fleet_present import present
from prereq import require


def require_fleet_tools() -> None:
    require(os.geteuid() == 0, "the test fleet needs root")
    for tool, package in FLEET_TOOLS.items():
        require(shutil.which(tool) is not None, f"{tool} missing: apt-get install -y {package}")


@pytest.fixture(scope="session")
def fleet_base() -> Path:
    """The cached base rootfs (built by debootstrap on first use, about a minute)."""
    require_fleet_tools()
    gc()  # fleets of sessions that were killed (the session fleet, molecule's, a test's own)
    return ensure_base()


@pytest.fixture(scope="session")
def fleet(fleet_base) -> Iterator[Fleet]:
    session_fleet = Fleet(f"t{os.getpid() % 10**8}")
    recorded = None
    try:
        session_fleet.up(3, owner_pid=os.getpid())
        recorded = copy.deepcopy(session_fleet.state.data)
        yield session_fleet
    finally:
        session_fleet.down()
    # checked on the machine, not by the harness's own account
    assert present(recorded) == [], "the session fleet's down left these behind"


@pytest.fixture(scope="session")
def fleet_play(fleet):
    def play(playbook, *, envvars=None, **kwargs) -> PlayResult:
        # ansible.cfg caches facts on disk for 2 h, keyed by host name, and fleet host names recur
        # (t<pid>-1 ...): a play must never see an earlier fleet's facts
        return run_playbook(playbook, fleet.inventory, envvars={"ANSIBLE_CACHE_PLUGIN": "memory",
                                                               **(envvars or {})}, **kwargs)
    return play
