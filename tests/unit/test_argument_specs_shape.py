"""Every role's meta/argument_specs.yml is well formed: each option of each entry point is a mapping with a
type (ansible-core fails a role's entry with "'NoneType' object has no attribute 'get'" otherwise, and only
when the role runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"
SPECS = sorted(ROLES.glob("*/meta/argument_specs.yml"))


def test_every_role_has_argument_specs():
    assert {path.parts[-3] for path in SPECS} == {path.name for path in ROLES.iterdir() if path.is_dir()}


@pytest.mark.parametrize("path", SPECS, ids=lambda path: path.parts[-3])
def test_each_option_is_a_typed_mapping(path):
    entries = yaml.safe_load(path.read_text())["argument_specs"]
    bad = [f"{entry}.{name}" for entry, spec in entries.items()
           for name, option in ((spec or {}).get("options") or {}).items()
           if not isinstance(option, dict) or "type" not in option]
    assert bad == []
