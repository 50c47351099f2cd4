"""The order in which `make test`'s two pytest runs hand work to their xdist workers: the slowest scope
first (longest processing time first), the rest in collection order. A scope is a test module in the
unit and integration run (``--dist loadfile``), and a fleet lane or a module with a fleet of its own in
the fleet run (tests/conftest.py FleetGroupScheduling).

xdist hands out scopes in collection order, one to each worker and then the next to whichever worker has
at most two of its tests left. A slow scope that comes late ends the run on one worker while the others
are idle: on 2026-12-05 (the unit and integration run alone, 3 workers, 514 s) the workers' tests added
up to 415 s, 435 s and 507 s; the last 90 s ran the torch extension build, the gb10 kernel role and the
build keys one after the other on one worker. Handed out slowest first, the same modules add up to about
452 s on each worker (a replay of that run's test times through xdist's rule).

SLOW_SCOPES holds the scopes over 30 s in one clean-clone run (the fleet run: its lanes and the modules
with fleets of their own, however short), with their seconds (setup, calls and teardown of their tests on
one worker). Only the order matters: a figure that drifts costs balance, never a test.
tests/unit/test_workorder.py checks that each entry still names a lane or a test module.
"""

from __future__ import annotations

from collections.abc import Iterable

from xdist.scheduler import LoadFileScheduling

FLEET_TESTS = ("tests/integration/fleet/", "tests/molecule/")
# Two lanes, each one chain on one worker: the session fleet's users (in collection order) and the rollout
# module (4 hosts of its own, about half of the fleet tests' time). Neither holds two stack-heavy fleets
# at once: the session lane's big ones (molecule, the session stacks) run one after the other.
ROLLOUT_LANE_MODULES = frozenset({"test_rolling_rebuild.py"})
# Modules with fleets of their own float: each goes whole to whichever lane's worker frees up first, the
# slowest first (SLOW_SCOPES below), so the two workers end together. Until 2026-12-05 they were fixed
# in the rollout lane and the session lane ended alone: 1,235 s against 1,119 s of one run's tests, its
# last 116 s on one core. The toolkit module got 3 hosts of its own to float (it was the session lane's
# first, 107 s). The locked install, on a host of its own too, stays last in the session lane: there
# it runs after the session fleet is down. Floating, it ran beside the session stacks, and the least
# free disk of a clean-clone run fell from 22.6-23.7 GiB to 18.9 (CI's machine has had 10.5 least).
OWN_FLEET_MODULES = frozenset({"test_cuda_toolchain.py", "test_fleet_reboot.py", "test_fleet_teardown.py",
                               "test_fleet_verify_doctor.py", "test_nvidia_driver_role.py"})


def fleet_module(nodeid: str) -> str | None:
    """The file name of a fleet test's module, None for any other test."""
    if not nodeid.startswith(FLEET_TESTS):
        return None
    return nodeid.split("::", maxsplit=1)[0].rsplit("/", maxsplit=1)[-1]


def fleet_lane(nodeid: str) -> str | None:
    """The lane of a fleet test (fleet-rollout or fleet-session); None for any other test and for the
    modules of OWN_FLEET_MODULES (each is a work unit of its own)."""
    module = fleet_module(nodeid)
    if module is None or module in OWN_FLEET_MODULES:
        return None
    return "fleet-rollout" if module in ROLLOUT_LANE_MODULES else "fleet-session"


SLOW_SCOPES: dict[str, float] = {
    # the unit and integration run (a clean-clone `.ci/run` of c0e02bd, 2026-12-07: 3 workers, 674 s)
    "tests/integration/test_model_weights_role.py": 282,
    "tests/integration/test_preflight.py": 258,
    "tests/integration/test_sgl_kernel_role_index.py": 138,
    "tests/integration/test_bad_input.py": 125,
    "tests/integration/test_sgl_kernel_role_local.py": 108,
    "tests/integration/test_stack_bundle_source.py": 107,
    # 130 s before its extension was split (nvcc no longer parses torch/extension.h)
    "tests/integration/test_cuda_toolchain_torch_extension.py": 105,
    "tests/integration/test_torch_cuda_archs.py": 102,
    "tests/integration/test_sgl_kernel_role_gb10.py": 78,
    "tests/integration/test_spec_gate.py": 62,
    "tests/integration/test_sgl_kernel_build_keys_local.py": 59,
    "tests/integration/test_cuda_fatbin_fuzz.py": 46,
    "tests/integration/test_stack_lock_inputs.py": 45,
    "tests/integration/test_stack_facts_entry.py": 41,
    "tests/integration/test_bounded_waits.py": 35,
    "tests/integration/test_gpu_facts.py": 31,
    "tests/integration/test_sgl_kernel_variants.py": 31,
    # three real parses and two stand-in servers' lives (2026-12-06: 31 s alone)
    "tests/integration/test_sglang_stand_in.py": 31,
    # the fleet run (the same .ci/run: 2 workers, 1,830 s): the two lanes first (one to each worker), then
    # the modules with fleets of their own. The rollout lane is the stage's whole length (1,792 s); the
    # session lane and the floating modules took the other worker 1,779 s.
    "fleet-rollout": 1792,
    "fleet-session": 1454,
    "tests/integration/fleet/test_cuda_toolchain.py": 106,
    "tests/integration/fleet/test_fleet_verify_doctor.py": 94,
    "tests/integration/fleet/test_nvidia_driver_role.py": 83,
    "tests/integration/fleet/test_fleet_teardown.py": 32,
    "tests/integration/fleet/test_fleet_reboot.py": 11,
}


def next_scope(scopes: Iterable[str]) -> str:
    """The scope (a module's path, or a fleet lane) to hand out next: the slowest of SLOW_SCOPES among
    ``scopes``, else the first in their (collection) order."""
    ordered = list(scopes)
    if not ordered:
        raise ValueError("no scope left to hand out")
    return max(ordered, key=lambda scope: SLOW_SCOPES.get(scope, 0.0))  # max keeps the first of equals


class SlowestFirst:
    """A mixin for xdist's scope schedulers: hand out the slowest scope still queued (next_scope) instead
    of the next one collected."""

    def _assign_work_unit(self, node) -> None:
        self.workqueue.move_to_end(next_scope(self.workqueue), last=False)
        super()._assign_work_unit(node)


class SlowestFirstFileScheduling(SlowestFirst, LoadFileScheduling):
    """``--dist loadfile``, slowest module first (tests/conftest.py makes it the scheduler)."""
