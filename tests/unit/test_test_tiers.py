"""The extended tier (tests/tiers.py EXTENDED_TESTS): every entry still names a test, and a test's
tier is read from its node id the way the collection hook reads it."""

from __future__ import annotations

import ast

import pytest
import tiers
from ansible_run import REPO_ROOT

MODULE = "tests/integration/fleet/test_stack.py"


@pytest.mark.parametrize("module", sorted(tiers.EXTENDED_TESTS))
def test_each_entry_names_a_test_module_and_its_tests(module):
    path = REPO_ROOT / module
    assert path.is_file(), f"{module}: no such test module (renamed? update EXTENDED_TESTS)"
    defined = {node.name for node in ast.parse(path.read_text()).body
               if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}
    assert defined, f"{module} defines no test"
    missing = set(tiers.EXTENDED_TESTS[module]) - defined
    assert not missing, f"{module} has no {sorted(missing)} (renamed? update EXTENDED_TESTS)"


def test_a_module_entry_takes_every_test_and_parameter_of_it(monkeypatch):
    monkeypatch.setattr(tiers, "EXTENDED_TESTS", {MODULE: ()})
    assert tiers.extended(f"{MODULE}::test_one")
    assert tiers.extended(f"{MODULE}::test_two[param-1]")
    assert not tiers.extended("tests/integration/fleet/test_stack_jobs.py::test_one")


def test_a_test_entry_takes_that_test_and_its_parameters_only(monkeypatch):
    monkeypatch.setattr(tiers, "EXTENDED_TESTS", {MODULE: ("test_one",)})
    assert tiers.extended(f"{MODULE}::test_one")
    assert tiers.extended(f"{MODULE}::test_one[a]")
    assert not tiers.extended(f"{MODULE}::test_one_more")
    assert not tiers.extended(f"{MODULE}::test_two")
    assert not tiers.extended("tests/integration/fleet/test_other.py::test_one")
