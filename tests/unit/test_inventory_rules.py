"""module_utils/inventory_rules: cases from cases/inventory_rules.yml, plus message invariants."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.module_utils.inventory_rules import check_host_variables, known_options

DATA = yaml.safe_load((Path(__file__).parent / "cases" / "inventory_rules.yml").read_text())


@pytest.mark.parametrize("case", DATA["cases"], ids=[c["name"] for c in DATA["cases"]])
def test_case(case):
    problems = check_host_variables(
        "gpu-01", case.get("variables", {}), DATA["specs"],
        prefixes=DATA["prefixes"], removed=DATA["removed"], names=case.get("names", []),
    )
    assert len(problems) == len(case["expect"]), problems
    for problem, fragments in zip(problems, case["expect"]):
        assert problem.startswith("host gpu-01: "), problem
        for fragment in fragments:
            assert fragment in problem, (fragment, problem)


def test_secret_value_never_echoed():
    # A secret passed by mistake with a wrong type must not appear in the message either way: the
    # role passes secrets by name only, so the module never sees the value.
    problems = check_host_variables("h", {}, DATA["specs"], names=["demo_token"])
    assert problems == []


def test_known_options_merges_roles_and_entry_points():
    options = known_options(DATA["specs"])
    assert options["gpu_capability"][0] == "preflight"
    assert options["demo_jobs"] == ("demo", {"type": "int"})


def test_every_role_variable_prefix_is_policed():
    problems = check_host_variables("h", {}, DATA["specs"], names=["preflight_check_inventroy"])
    assert problems == ["host h: preflight_check_inventroy is not a variable of this project"]
