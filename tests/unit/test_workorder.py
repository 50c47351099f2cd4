"""tests/workorder.py: make test's pytest runs hand the slowest scopes out first, and every SLOW_SCOPES
entry still names a fleet lane or a test module that is a scope of its own."""

from __future__ import annotations

import ast
from collections import OrderedDict

import pytest
import workorder
from ansible_run import REPO_ROOT
from workorder import SlowestFirstFileScheduling


@pytest.mark.parametrize("scope", sorted(workorder.SLOW_SCOPES))
def test_each_entry_names_a_lane_or_a_test_module_that_is_a_scope(scope):
    if scope.startswith("fleet-"):
        assert scope in {"fleet-session", "fleet-rollout"}, f"{scope}: no such lane (tests/conftest.py)"
        return
    path = REPO_ROOT / scope
    assert path.is_file(), f"{scope}: no such test module (renamed? update SLOW_SCOPES)"
    assert any(isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
               for node in ast.parse(path.read_text()).body), f"{scope} defines no test"
    # a fleet module in a lane is never a scope of its own: its figure would order nothing
    assert workorder.fleet_lane(f"{scope}::test") is None, f"{scope} runs in a lane, not on its own"


def test_the_lanes_go_out_before_any_module_with_a_fleet_of_its_own():
    own = [scope for scope in workorder.SLOW_SCOPES if scope.startswith("tests/integration/fleet/")]
    assert own
    lanes = ["fleet-session", "fleet-rollout"]
    assert workorder.next_scope([*own, *lanes]) in lanes
    assert workorder.next_scope([*own, "fleet-rollout"]) == "fleet-rollout"


def test_the_slowest_queued_module_goes_first(monkeypatch):
    monkeypatch.setattr(workorder, "SLOW_SCOPES", {"b.py": 10.0, "c.py": 50.0})
    assert workorder.next_scope(["a.py", "b.py", "c.py"]) == "c.py"
    assert workorder.next_scope(["a.py", "b.py"]) == "b.py"


def test_modules_of_no_known_cost_go_in_collection_order(monkeypatch):
    monkeypatch.setattr(workorder, "SLOW_SCOPES", {"b.py": 10.0})
    assert workorder.next_scope(["z.py", "a.py"]) == "z.py"
    monkeypatch.setattr(workorder, "SLOW_SCOPES", {"a.py": 5.0, "z.py": 5.0})
    assert workorder.next_scope(["z.py", "a.py"]) == "z.py"  # equals: the first collected


def test_an_empty_queue_is_an_error():
    with pytest.raises(ValueError, match="no scope left"):
        workorder.next_scope([])


class Worker:
    """A stand-in for xdist's WorkerController: records the test indexes it is sent."""

    def __init__(self):
        self.sent: list[list[int]] = []

    def send_runtest_some(self, indexes):
        self.sent.append(list(indexes))


def test_the_scheduler_sends_a_worker_the_slowest_queued_module(monkeypatch):
    """xdist's own _assign_work_unit, behind the reordering: the tests it sends are the slow module's."""
    monkeypatch.setattr(workorder, "SLOW_SCOPES", {"slow.py": 100.0})
    collection = ["fast.py::test_a", "fast.py::test_b", "slow.py::test_c", "other.py::test_d"]
    scheduler = SlowestFirstFileScheduling.__new__(SlowestFirstFileScheduling)
    scheduler.workqueue = OrderedDict((path, {n: False for n in collection if n.startswith(path)})
                                      for path in ("fast.py", "slow.py", "other.py"))
    worker = Worker()
    scheduler.assigned_work, scheduler.registered_collections = {}, {worker: collection}
    for _ in range(3):
        scheduler._assign_work_unit(worker)
    assert worker.sent == [[2], [0, 1], [3]]
    assert list(scheduler.assigned_work[worker]) == ["slow.py", "fast.py", "other.py"]
