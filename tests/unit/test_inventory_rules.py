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


# Secrets (options with no_log) are type-checked from their own argument, and no message holds their value
HINT = ("quote it in YAML (unquoted digits are a number: leading zeros are lost, and a leading 0 makes it "
        "octal); the value is not shown")
SECRET_SPECS = {"vault": {"argument_specs": {"main": {"options": {
    "vault_key": {"type": "str", "no_log": True},
    "vault_file": {"type": "path", "no_log": True},
    "vault_env": {"type": "dict", "no_log": True},
    "vault_opaque": {"type": "raw", "no_log": True},
    "vault_untyped": {"no_log": True},
}}}}}


@pytest.mark.parametrize(("secrets", "expected"), [
    ({"vault_key": 42798}, ["host h: vault_key must be a string, got int; " + HINT]),
    ({"vault_key": 1.5, "vault_file": 7}, ["host h: vault_file must be a string, got int; " + HINT,
                                           "host h: vault_key must be a string, got float; " + HINT]),
    ({"vault_untyped": 99}, ["host h: vault_untyped must be a string, got int; " + HINT]),
    ({"vault_env": {"HF_TOKEN": 123, "OK": "x", "FLAG": True}},
     ["host h: vault_env.HF_TOKEN must be a string, got int; " + HINT,
      "host h: vault_env.FLAG must be a string, got bool; " + HINT]),
    ({"vault_env": ["a"]}, ["host h: vault_env must be a mapping of names to strings, got list"]),
    ({"vault_key": "0123456", "vault_file": "/k", "vault_env": {"A": "1"}, "vault_opaque": 5}, []),
    ({"vault_key": None, "vault_env": None}, []),
])
def test_secret_types(secrets, expected):
    problems = check_host_variables("h", {}, SECRET_SPECS, names=sorted(secrets), secrets=secrets)
    assert problems == expected
    for problem in problems:
        for value in ("42798", "1.5", "123", "99"):
            assert value not in problem


def test_secret_that_is_no_option_is_an_unknown_name():
    problems = check_host_variables("h", {}, SECRET_SPECS, secrets={"vault_kye": 5})
    assert problems == ["host h: vault_kye is not a variable of this project; did you mean 'vault_key'?"]


def test_secret_removed_name_says_so():
    problems = check_host_variables("h", {}, SECRET_SPECS, removed={"vault_old": "use vault_key"},
                                    secrets={"vault_old": 5})
    assert problems == ["host h: vault_old is not supported: use vault_key"]
