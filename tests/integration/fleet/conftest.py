"""Session fixtures for tests on the disposable test fleet (tests/fleet): real systemd hosts over ssh.

``fleet``: three hosts, booted once per session and torn down at its end (also when tests fail; a
killed session's fleet is removed by the next session's ``gc()``). ``fleet_play``: run a playbook
against it through ansible-runner, with per-host task results and stats. ``fleet_stack``: the real
stack roles (playbooks/site.yml) ran on the fleet: torch 2.14.1 (cu130) from the wheelhouse in a stack
that `current` points to on every host (tests/stackrun.py).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Iterator

import pytest
from ansible_run import PlayResult, run_on_fleet
from fleet import Fleet, gc
from fleet.base import ensure_base
from fleet.system import FLEET_TOOLS
from fleet_present import checked_fleet
from prereq import require
from stackrun import (
    SEEDED_UV_CACHE,
    StackRun,
    fill_wheelhouse,
    seed_uv_cache,
    seed_wheel_cache,
    stack_extravars,
)


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


# The session fleet while it is up: ended after the last test that can use it (below), not at the end
# of the session.
_SESSION_FLEETS: list[Fleet] = []


def _uses_the_fleet(item: pytest.Item) -> bool:
    """A test that asks for the session fleet, itself or through another fixture (``fleet_stack``). Not
    every test of this directory: under xdist the modules with fleets of their own run in a lane beside
    the session fleet's (tests/conftest.py), and the session fleet need not wait for them."""
    return "fleet" in getattr(item, "fixturenames", ())


@pytest.hookimpl(trylast=True)  # after pytest's own teardown: module fixtures that use the fleet end first
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """End the session fleet once no test left in the session can use it. Its hosts hold every stack the
    fleet tests built (about 10 GB a host); the integration and unit tests that run after them must not
    share the disk with them (a CI machine ran out of it). ``down`` is idempotent, so the fixture's own
    teardown, which checks that nothing was left behind, still runs at the end of the session."""
    if not _SESSION_FLEETS or (nextitem is not None and _uses_the_fleet(nextitem)):
        return
    later = item.session.items[item.session.items.index(item) + 1:]
    if not any(_uses_the_fleet(other) for other in later):
        while _SESSION_FLEETS:
            _SESSION_FLEETS.pop().down()


@pytest.fixture(scope="session")
def fleet(fleet_base) -> Iterator[Fleet]:
    # checked on the machine, not by the harness's own account (fleet_present)
    with checked_fleet(Fleet(f"t{os.getpid() % 10**8}"), 3, "the session fleet") as session_fleet:
        _SESSION_FLEETS.append(session_fleet)
        try:
            yield session_fleet
        finally:
            if session_fleet in _SESSION_FLEETS:
                _SESSION_FLEETS.remove(session_fleet)


@pytest.fixture(scope="session")
def fleet_play(fleet):
    def play(playbook, **kwargs) -> PlayResult:
        return run_on_fleet(playbook, fleet.inventory, **kwargs)
    return play


@pytest.fixture(scope="session")
def fleet_stack(fleet, fleet_play, tmp_path_factory) -> Iterator[StackRun]:
    """site.yml on the session fleet: a check run on the fresh hosts, then the real run (once).

    The hosts' uv cache is seeded (stackrun.seed_uv_cache): one unpacked torch 2.14.1 hardlinked into the
    three hosts, so they hold one copy of its ~5 GB, not three (the own-fleet lane runs its fleets beside
    this one). The cold install, from an empty uv cache, is test_stack_locked_install.py's."""
    wheelhouse = fill_wheelhouse()
    workdir = tmp_path_factory.mktemp("fleet-stack")
    cache = workdir / "wheel-cache"
    uncached = seed_wheel_cache(cache, wheelhouse)
    seeded = seed_uv_cache(fleet, workdir, fleet.hosts)
    stack = StackRun(fleet=fleet, play=fleet_play, workdir=workdir, wheel_cache=cache,
                     uncached_wheel=uncached,
                     extravars={**stack_extravars(fleet, cache), "stack_uv_cache_dir": SEEDED_UV_CACHE})
    stack.check_run = stack.run(check=True)
    stack.left_by_check = [f"{host}:{path}" for host in stack.hosts
                           for path in (stack.root, "/opt/sglang/tools", "/var/cache/sglang")
                           if fleet.ssh(host, f"test -e {path}", check=False).returncode == 0]
    start = time.monotonic()
    stack.first_run = stack.run()
    stack.first_seconds = time.monotonic() - start
    assert stack.first_run.rc == 0, stack.first_run.stdout[-6000:]
    stack.stack_names = {host: stack.current(host) for host in stack.hosts}
    yield stack
    shutil.rmtree(seeded, ignore_errors=True)  # the controller's names; the hosts' go with the fleet
