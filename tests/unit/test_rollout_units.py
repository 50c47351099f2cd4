"""module_utils/rollout_units.py: a rolling rebuild's units (a host, or a multi-node model's hosts) and
batches."""

from __future__ import annotations

import pytest
from ansible.module_utils.rollout_units import UnitsError, plan, units, units_per_batch

CHAT = {"name": "chat", "model_path": "/m/chat", "port": 30000}


def big(group="big_tp", name="big"):
    return {"name": name, "model_path": "/m/big", "port": 30010, "tp_size": 4, "nodes_group": group}


def test_hosts_without_multi_node_models_are_units_of_one_in_their_order():
    found, problems = units(["c", "a", "b"], {"a": [CHAT], "b": [], "c": [CHAT]}, {})
    assert (found, problems) == ([["c"], ["a"], ["b"]], [])


def test_a_multi_node_models_hosts_are_one_unit_at_the_first_ones_place():
    models = {"n1": [CHAT], "n2": [CHAT, big()], "n3": [big()], "n4": [CHAT]}
    found, problems = units(["n1", "n2", "n3", "n4"], models, {"big_tp": ["n2", "n3"]})
    assert (found, problems) == ([["n1"], ["n2", "n3"], ["n4"]], [])


def test_the_unit_keeps_the_order_of_the_hosts_to_roll_not_of_the_group():
    models = {"n1": [big()], "n2": [big()], "n3": [CHAT]}
    found, _ = units(["n3", "n2", "n1"], models, {"big_tp": ["n1", "n2"]})
    assert found == [["n3"], ["n2", "n1"]]


def test_models_sharing_a_host_join_their_groups_into_one_unit():
    models = {"a": [big("g1", "x")], "b": [big("g1", "x"), big("g2", "y")], "c": [big("g2", "y")], "d": []}
    found, problems = units(["a", "b", "c", "d"], models, {"g1": ["a", "b"], "g2": ["b", "c"]})
    assert (found, problems) == ([["a", "b", "c"], ["d"]], [])


def test_groups_joined_from_the_far_end_are_one_unit():
    # c's group reaches b, b's reaches a: the union has to follow the chain (not just the first link)
    models = {"a": [big("g1", "x")], "b": [big("g1", "x"), big("g2", "y")],
              "c": [big("g2", "y"), big("g3", "z")], "d": [big("g3", "z")], "e": []}
    groups = {"g1": ["a", "b"], "g2": ["c", "b"], "g3": ["d", "c"]}
    found, problems = units(["e", "d", "c", "b", "a"], models, groups)
    assert (found, problems) == ([["e"], ["d", "c", "b", "a"]], [])


def test_a_group_host_outside_the_rollout_is_named_once_per_model():
    models = {"n2": [big()], "n3": [big()]}
    found, problems = units(["n2", "n3"], models, {"big_tp": ["n2", "n3", "n4"]})
    assert problems == [
        "model 'big' spans n2, n3, n4 (nodes_group 'big_tp'), but n4 is not among the hosts to roll: "
        "its ranks restart together, so roll all of them or none"]
    assert found == [["n2"], ["n3"]], "nothing is joined through a group that cannot be rolled"


def test_several_hosts_outside_the_rollout_are_all_named():
    _, problems = units(["n2"], {"n2": [big()]}, {"big_tp": ["n2", "n3", "n4"]})
    assert problems == [
        "model 'big' spans n2, n3, n4 (nodes_group 'big_tp'), but n3, n4 are not among the hosts to roll: "
        "its ranks restart together, so roll all of them or none"]


def test_a_group_that_does_not_hold_the_host_or_does_not_exist_is_named():
    models = {"a": [big("missing")], "b": [big("other")], "c": [{"nodes_group": "gone"}]}
    _, problems = units(["a", "b", "c"], models, {"other": ["x"], "gone": []})
    assert problems == [
        "a: model 'big' names nodes_group 'missing', a group that is not in the inventory or has no host",
        "b: model 'big' names nodes_group 'other', a group without this host",
        "c: model '?' names nodes_group 'gone', a group that is not in the inventory or has no host",
    ]


def test_entries_that_are_not_models_are_left_to_the_inventory_check():
    models = {"a": "not a list", "b": ["a string", None, CHAT], "c": None}
    assert units(["a", "b", "c"], models, {}) == ([["a"], ["b"], ["c"]], [])


def test_a_host_missing_from_the_models_is_a_unit_of_one():
    assert units(["a"], {}, {"g": ["a"]}) == ([["a"]], [])


@pytest.mark.parametrize(("serial", "count", "expected"), [
    (1, 5, 1), (2, 5, 2), ("3", 5, 3), (" 2 ", 5, 2), (7, 3, 7),
    ("50%", 5, 2), ("100%", 5, 5), ("1%", 5, 1), ("20%", 10, 2), ("25 %", 8, 2), ("19%", 10, 1),
])
def test_units_per_batch(serial, count, expected):
    assert units_per_batch(serial, count) == expected


NEED = "rolling_rebuild_serial must be a number of at least 1 or a percentage such as \"25%\", got "


@pytest.mark.parametrize(("serial", "message"), [
    (0, NEED + "0"),
    ("-1", NEED + "'-1'"),
    ("two", NEED + "'two'"),
    (1.5, NEED + "1.5"),
    ("", "rolling_rebuild_serial must be a number or a percentage, got ''"),
    (True, "rolling_rebuild_serial must be a number or a percentage, got True"),
    ("0%", "rolling_rebuild_serial '0%': a percentage from 1% to 100%"),
    ("101%", "rolling_rebuild_serial '101%': a percentage from 1% to 100%"),
    ("x%", "rolling_rebuild_serial 'x%': a percentage from 1% to 100%"),
])
def test_a_batch_size_that_is_not_one_is_refused(serial, message):
    with pytest.raises(UnitsError) as raised:
        units_per_batch(serial, 4)
    assert str(raised.value) == message


def test_plan_batches_whole_units():
    models = {"n1": [CHAT], "n2": [big()], "n3": [big()], "n4": [CHAT], "n5": [CHAT]}
    result = plan(["n1", "n2", "n3", "n4", "n5"], models, {"big_tp": ["n2", "n3"]}, 2)
    assert result == {
        "units": [["n1"], ["n2", "n3"], ["n4"], ["n5"]],
        "order": ["n1", "n2", "n3", "n4", "n5"],
        "batches": [3, 2],
        "batch_hosts": [["n1", "n2", "n3"], ["n4", "n5"]],
        "unit_of": {"n1": ["n1"], "n2": ["n2", "n3"], "n3": ["n2", "n3"], "n4": ["n4"], "n5": ["n5"]},
    }


def test_plan_reorders_hosts_so_a_unit_is_contiguous():
    models = {"a": [big()], "b": [CHAT], "c": [big()]}
    result = plan(["a", "b", "c"], models, {"big_tp": ["a", "c"]})
    assert (result["order"], result["batches"]) == (["a", "c", "b"], [2, 1])


def test_plan_with_a_percentage_counts_units():
    models = {h: [big()] for h in ("a", "b")}
    result = plan(["a", "b", "c", "d"], models, {"big_tp": ["a", "b"]}, "50%")  # 3 units: 1 per batch
    assert result["batch_hosts"] == [["a", "b"], ["c"], ["d"]]


def test_plan_refuses_every_problem_at_once():
    models = {"a": [big()], "b": [big("nope", "other")]}
    with pytest.raises(UnitsError) as raised:
        plan(["a", "b"], models, {"big_tp": ["a", "z"]})
    assert str(raised.value) == (
        "model 'big' spans a, z (nodes_group 'big_tp'), but z is not among the hosts to roll: its ranks "
        "restart together, so roll all of them or none; b: model 'other' names nodes_group 'nope', a group "
        "that is not in the inventory or has no host")


def test_plan_of_a_bad_batch_size_is_refused():
    with pytest.raises(UnitsError, match="at least 1"):
        plan(["a"], {}, {}, 0)


def test_a_model_after_one_without_a_group_still_joins_its_hosts():
    # only a declares the model: its group joins a and b even though a lists a plain model first
    assert units(["a", "b"], {"a": [CHAT, big()], "b": []}, {"big_tp": ["a", "b"]}) == ([["a", "b"]], [])


def test_a_model_after_a_bad_group_still_joins_its_hosts():
    models = {"a": [big("missing", "x"), big("g", "y")], "b": []}
    found, problems = units(["a", "b"], models, {"g": ["a", "b"]})
    assert found == [["a", "b"]]
    assert problems == [
        "a: model 'x' names nodes_group 'missing', a group that is not in the inventory or has no host"]


def test_a_model_after_one_spanning_hosts_outside_still_joins_its_hosts():
    models = {"a": [big("wide", "x"), big("g", "y")], "b": []}
    found, problems = units(["a", "b"], models, {"wide": ["a", "z"], "g": ["a", "b"]})
    assert found == [["a", "b"]]
    assert len(problems) == 1
    assert problems[0].startswith("model 'x' spans a, z")
