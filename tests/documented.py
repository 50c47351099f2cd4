"""Check that a module's result holds only keys its RETURN block documents (users read RETURN)."""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

LIBRARY = Path(__file__).resolve().parent.parent / "library"
# Keys every module result carries, added by Ansible or by the test runner (tests/ansible_run.py).
COMMON = {"changed", "failed", "msg", "invocation", "exception", "warnings", "deprecations",
          "_ansible_no_log", "task", "event", "skipped", "skip_reason"}


def documented_returns(module: str) -> set[str]:
    tree = ast.parse((LIBRARY / f"{module}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "RETURN":
            return set(yaml.safe_load(node.value.value))
    raise AssertionError(f"library/{module}.py has no RETURN block")


def assert_documented(module: str, result: dict) -> None:
    undocumented = set(result) - COMMON - documented_returns(module)
    assert not undocumented, f"{module} returns keys its RETURN does not document: {sorted(undocumented)}"
