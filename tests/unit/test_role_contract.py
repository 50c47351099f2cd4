"""The contract between roles is typed: every fact a role's entry point reads that another role publishes
(set_fact or register, outside the entry point's own includes of that role) is an option of the entry
point's meta/argument_specs.yml, so ansible-core checks its type when the role is entered and ansible-doc
documents it.

Read statically: the entry point's tasks file, the task files it includes or imports by a literal name,
and the templates they render; a fact published by a role the entry point itself includes (stack's
`facts` inside verify, say) is not an input. Role defaults and vars that refer to another role's fact
(sglang_service_gateway_uv: "{{ stack_uv }}") are read where they are used, which this does not follow.

No exception: ``stack_profile`` stays the profile's name or path (a string, from the inventory); the loaded
profile is ``stack_profile_data`` (a dict), a fact of its own.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

ROLES = Path(__file__).resolve().parents[2] / "roles"


def _walk(tasks):
    for task in tasks or []:
        if isinstance(task, dict):
            yield task
            for key in ("block", "rescue", "always"):
                yield from _walk(task.get(key))


@lru_cache(maxsize=None)
def _tasks(path: Path) -> tuple:
    return tuple(_walk(yaml.safe_load(path.read_text()))) if path.exists() else ()


def _published_in(tasks) -> set:
    names = set()
    for task in tasks:
        facts = task.get("ansible.builtin.set_fact")
        if isinstance(facts, dict):
            names |= {name for name in facts if name != "cacheable" and not name.startswith("__")}
        if task.get("register") and not task["register"].startswith("__"):
            names.add(task["register"])
    return names


@lru_cache(maxsize=None)
def _reachable(role: str, entry: str) -> tuple:
    """(task files, templates, (role, entry point) pairs it includes) of one entry point."""
    todo, seen, templates, included = [ROLES / role / "tasks" / f"{entry}.yml"], [], [], set()
    while todo:
        path = todo.pop()
        if path in seen or not path.exists():
            continue
        seen.append(path)
        for task in _tasks(path):
            for key in ("ansible.builtin.include_tasks", "ansible.builtin.import_tasks"):
                name = task.get(key)
                name = name.get("file") if isinstance(name, dict) else name
                if isinstance(name, str) and "{{" not in name:
                    todo.append(path.parent / name)
            for key in ("ansible.builtin.include_role", "ansible.builtin.import_role"):
                spec = task.get(key)
                if isinstance(spec, dict) and spec.get("name"):
                    included.add((spec["name"], spec.get("tasks_from", "main")))
            template = task.get("ansible.builtin.template")
            if isinstance(template, dict) and "{{" not in str(template.get("src", "")):
                templates.append(ROLES / role / "templates" / template["src"])
    return tuple(seen), tuple(templates), frozenset(included)


@lru_cache(maxsize=None)
def _publishes(role: str, entry: str, depth: int = 0) -> frozenset:
    files, _templates, included = _reachable(role, entry)
    names = set().union(*(_published_in(_tasks(path)) for path in files)) if files else set()
    if depth < 5:
        for other in included:
            names |= _publishes(*other, depth + 1)
    return frozenset(names)


@lru_cache(maxsize=None)
def _published_by_role() -> dict:
    owners: dict = {}
    for role_dir in ROLES.iterdir():
        for path in (role_dir / "tasks").glob("*.yml"):
            for name in _published_in(_tasks(path)):
                owners.setdefault(name, set()).add(role_dir.name)
    return owners


def _entry_points():
    for spec_path in sorted(ROLES.glob("*/meta/argument_specs.yml")):
        role = spec_path.parts[-3]
        for entry, spec in yaml.safe_load(spec_path.read_text())["argument_specs"].items():
            yield role, entry, set((spec or {}).get("options") or {})


def inputs(role: str, entry: str) -> set:
    """Facts of other roles this entry point reads."""
    files, templates, included = _reachable(role, entry)
    internal = set().union(*(_publishes(*other) for other in included)) if included else set()
    text = "\n".join(path.read_text() for path in (*files, *templates) if path.exists())
    return {name for name, owners in _published_by_role().items()
            if role not in owners and name not in internal
            and re.search(r"(?<![A-Za-z0-9_.'\"])" + re.escape(name) + r"(?![A-Za-z0-9_])", text)}


@pytest.mark.parametrize(("role", "entry", "options"), list(_entry_points()),
                         ids=[f"{role}:{entry}" for role, entry, _ in _entry_points()])
def test_every_fact_an_entry_point_reads_from_another_role_is_a_typed_option(role, entry, options):
    assert sorted(inputs(role, entry) - options) == []


# Inputs an entry point may be entered without, each with why; every other input is `required: true`, so a
# missing one fails when the role is entered (ansible-core's argument validation), not mid-run.
OPTIONAL_INPUTS = {
    # used only on a path that needs them (a source build, an install into an unsealed stack, a stack
    # synced from a lock); the role also installs a verified wheel into a bare venv given its Python, path
    # and targets (tests/integration/test_sgl_kernel_role_local.py)
    ("sgl_kernel", "main"): {"cuda_toolchain_env", "cuda_toolchain_version", "pytorch_installed_version",
                             "stack_constraints_file", "stack_lock_sha256", "stack_sealed", "stack_uv",
                             "stack_uv_env", "stack_wheel_store"},
    # used only to install sglang into an unsealed stack without a lock (sglang_service_install)
    ("sglang_service", "main"): {"cuda_toolchain_env", "stack_constraints_file", "stack_lock_sha256",
                                 "stack_sealed", "stack_uv", "stack_uv_env"},
    # the entry point checks them itself, with a message that says to run the stack role's tools first
    # (tests/integration/test_bad_input.py), and sglang_service_gateway_uv / _version replace them
    ("sglang_service", "gateway"): {"stack_profile_data", "stack_uv"},
}


def _required(role: str, entry: str) -> set:
    spec = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"][entry]
    return {name for name, option in ((spec or {}).get("options") or {}).items()
            if (option or {}).get("required")}


@pytest.mark.parametrize(("role", "entry", "options"), list(_entry_points()),
                         ids=[f"{role}:{entry}" for role, entry, _ in _entry_points()])
def test_every_input_is_required_unless_said_why_not(role, entry, options):
    optional = OPTIONAL_INPUTS.get((role, entry), set())
    inputs_ = inputs(role, entry)
    assert sorted(inputs_ - optional - _required(role, entry)) == []
    assert sorted(optional - inputs_) == [], "OPTIONAL_INPUTS names what the entry point no longer reads"
    assert sorted(optional & _required(role, entry)) == []


def test_the_reader_sees_the_contract_it_checks():
    # the analysis itself: sgl_kernel's main entry point reads the stack's Python and torch's version
    # (published by stack and pytorch), and verify's main reads nothing of stack's facts as input because
    # it includes stack's facts entry point itself
    assert {"stack_python", "pytorch_installed_version", "cuda_toolchain_env"} <= inputs("sgl_kernel", "main")
    assert "stack_root" not in inputs("verify", "main")
    assert "stack_profile_data" in inputs("pytorch", "main")
    assert "stack_profile" not in inputs("pytorch", "main")  # a name in the inventory, not a fact
