#!/usr/bin/python
"""Ansible module: read a profile's pylock.toml, check it against the profile, narrow it to one host."""

DOCUMENTATION = r"""
---
module: stack_pylock
short_description: Read a profile's PEP 751 lock, check its pins and pick one host's files
description:
  - Reads the profile (YAML; a file that is not valid YAML is named with its line) and validates it.
  - Reads C(profiles/pylock.<name>.toml), the one full, hashed resolution of a profile (written by
    C(make lock PROFILE=<name>)), on the controller.
  - Fails, naming the package, when the lock no longer holds the profile's pins (torch, sglang,
    flashinfer, uv, and the kernel unless it is built from source), and says C(make lock PROFILE=...).
  - With O(machine) and O(python_version), narrows the lock to what such a host installs, one wheel
    per package (the one the host's tags prefer), each with its URL, size and sha256; fails naming every
    package the lock has no wheel for on that host (a lock made for another Python or platform).
  - Without O(machine), reports which of the lock's platforms (Linux x86_64, aarch64) lack a wheel.
  - Never changes anything. Runs on the controller (C(delegate_to=localhost)); it needs Python >= 3.11.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  profile_path:
    description: The profile file (YAML) on the controller; read and validated here.
    type: path
    required: true
  path:
    description: The lock file; empty is C(pylock.<profile name>.toml) beside the profile.
    type: path
    default: ""
  use_lock:
    description:
      - Read the lock. False only loads the profile (a stack resolved on the host from the profile's
        pins, for development profiles without a lock; not reproducible).
    type: bool
    default: true
  machine:
    description: The host's machine (C(uname -m)); empty for the coverage report only.
    type: str
    default: ""
  python_version:
    description: The host's stack Python (C(3.11) or C(3.11.7)); defaults to the profile's.
    type: str
    default: ""
  glibc:
    description: The host's glibc version (C(getconf GNU_LIBC_VERSION)), which decides its manylinux tags.
    type: str
    default: "2.28"
  every_variant:
    description:
      - Return every wheel a host of O(machine) and the Python may pick (any glibc up to O(glibc)), not only
        the one a host of that glibc prefers - what an offline bundle carries.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
notes:
  - Supports check mode; the result is the same.
seealso:
  - module: stack_fetch_wheels
  - module: stack_plan
"""

EXAMPLES = r"""
- name: Narrow the profile's lock to this host
  stack_pylock:
    profile_path: "{{ playbook_dir }}/../profiles/stable.yml"
    machine: x86_64
    python_version: "3.11"
  delegate_to: localhost
  register: lock
"""

RETURN = r"""
profile:
  description: The profile, validated.
  returned: always
  type: dict
profile_name:
  description: The profile's name.
  returned: always
  type: str
path:
  description: The lock file.
  returned: always
  type: str
sha256:
  description: sha256 of the lock file (part of the stack's fingerprint); empty without a lock.
  returned: always
  type: str
created_by:
  description: The tool the lock names as its writer.
  returned: always
  type: str
  sample: uv
packages:
  description: Number of packages in the lock.
  returned: always
  type: int
files:
  description: The stack's files for this host (name, version, filename, url, sha256, size); uv left out.
  returned: always
  type: list
  elements: dict
tool_files:
  description: The pinned uv's file for this host (same keys).
  returned: always
  type: list
  elements: dict
requirements:
  description: Exact pins with their sha256 each, for C(uv pip sync --require-hashes).
  returned: always
  type: str
coverage_header:
  description: Comment lines naming the platforms the lock covers and each package without a wheel.
  returned: when machine is empty and a lock is read
  type: str
lock_inputs:
  description: The requirements C(make lock) resolves (the profile's pins, on Linux x86_64 and aarch64).
  returned: always
  type: list
  elements: str
coverage:
  description: Per platform of the lock, the packages it has no wheel for (empty list - covered).
  returned: when machine is empty and a lock is read
  type: dict
"""

import os

from ansible.module_utils.module_entry import run_module
from ansible.module_utils.pylock import (
    LockError,
    check_python_version,
    coverage,
    coverage_header,
    lock_file_name,
    lock_requirements,
    pin_problems,
    read_lock,
    requirements_text,
    select,
    split_tools,
)
from ansible.module_utils.stack_profile import ProfileError, read_profile, validate_profile

# One specification for both ways in: run_module here, action_plugins/stack_pylock.py on the
# controller (the stack role reads profiles and locks delegated to it).
ARGUMENT_SPEC = {
    "profile_path": {"type": "path", "required": True},
    "path": {"type": "path", "default": ""},
    "use_lock": {"type": "bool", "default": True},
    "machine": {"type": "str", "default": ""},
    "python_version": {"type": "str", "default": ""},
    "glibc": {"type": "str", "default": "2.28"},
    "every_variant": {"type": "bool", "default": False},
}


def run(params):
    """The module's result for validated parameters (``failed`` and ``msg`` on a problem)."""
    try:
        profile = validate_profile(read_profile(params["profile_path"]), params["profile_path"])
    except ProfileError as exc:
        return {"failed": True, "msg": str(exc)}
    name = profile["name"]
    path = params["path"] or os.path.join(os.path.dirname(params["profile_path"]), lock_file_name(name))
    result = {
        "changed": False,
        "profile": profile,
        "profile_name": name,
        "path": path,
        "sha256": "",
        "lock_inputs": lock_requirements(profile),
        "created_by": "",
        "packages": 0,
        "files": [],
        "tool_files": [],
        "requirements": "",
    }
    if not params["use_lock"]:
        return result
    try:
        if not os.path.exists(path):
            raise LockError(
                f"profile {name} has no lock: {path} does not exist. Run `make lock PROFILE={name}` "
                "on the controller and commit the file; nothing was installed"
            )
        lock, digest = read_lock(path)
        python = check_python_version(params["python_version"] or profile["python"])
        problems = pin_problems(profile, lock, path, name)
        if problems:
            raise LockError(f"{path} does not match profile {name}: " + "; ".join(problems))
        result.update(
            sha256=digest, created_by=str(lock.get("created-by", "")), packages=len(lock["packages"])
        )
        if params["machine"]:
            files, problems = select(
                lock,
                params["machine"],
                python,
                params["glibc"],
                lock_path=path,
                every_variant=params["every_variant"],
            )
            if problems:
                raise LockError(
                    "; ".join(problems) + f". Nothing was installed. Run `make lock PROFILE={name}` "
                    "for this platform and Python, or use hosts the lock covers"
                )
            stack, tools = split_tools(files)
            result.update(files=stack, tool_files=tools, requirements=requirements_text(stack))
        else:
            result["coverage"] = coverage(lock, python, params["glibc"])
            result["coverage_header"] = coverage_header(result["coverage"], python, params["glibc"])
    except LockError as exc:
        return {"failed": True, "msg": str(exc)}
    return result


def main():
    run_module(ARGUMENT_SPEC, run)


if __name__ == "__main__":
    main()
