"""Check that a module's result holds only keys its RETURN block documents (users read RETURN).

Nested results are checked too: a dict return, or the dict elements of a list return, against the
``contains`` of its RETURN entry. A dict documented without ``contains`` is keyed by data (capabilities,
variant names) and its keys are not checked.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

LIBRARY = Path(__file__).resolve().parent.parent / "library"
# Keys every module result carries, added by Ansible or by the test runner (tests/ansible_run.py).
COMMON = {"changed", "failed", "msg", "invocation", "exception", "warnings", "deprecations",
          "_ansible_no_log", "task", "event", "skipped", "skip_reason"}


def module_block(module: str, name: str) -> dict:
    """The DOCUMENTATION, EXAMPLES or RETURN block of library/<module>.py, parsed."""
    tree = ast.parse((LIBRARY / f"{module}.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == name:
            return yaml.safe_load(node.value.value)
    raise AssertionError(f"library/{module}.py has no {name} block")


def documented_returns(module: str) -> dict:
    """The RETURN block of library/<module>.py, parsed."""
    return module_block(module, "RETURN")


def undocumented(result: dict, spec: dict, where: str = "", common: set[str] = frozenset()) -> list[str]:
    """Dotted names of the keys of ``result`` (recursively) that ``spec`` does not document."""
    missing = [f"{where}{key}" for key in result if key not in spec and key not in common]
    for key, value in result.items():
        contains = (spec.get(key) or {}).get("contains")
        if not contains:
            continue
        if isinstance(value, dict):
            missing += undocumented(value, contains, f"{where}{key}.")
        elif isinstance(value, list):
            for index, element in enumerate(value):
                if isinstance(element, dict):
                    missing += undocumented(element, contains, f"{where}{key}[{index}].")
    return missing


def assert_documented(module: str, result: dict) -> None:
    missing = undocumented(result, documented_returns(module), common=COMMON)
    assert not missing, f"{module} returns keys its RETURN does not document: {missing}"
