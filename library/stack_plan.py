#!/usr/bin/python
"""Ansible module: check a stack profile and name the stack it makes on this host (read-only)."""

DOCUMENTATION = r"""
---
module: stack_plan
short_description: Validate a stack profile, resolve target capabilities and compute the stack's name
description:
  - Checks a loaded stack profile (C(profiles/<name>.yml)) against the one profile schema; an unknown,
    missing or mistyped key fails naming it.
  - Checks that the torch build's CUDA tag fits the profile's CUDA toolkit (same major, toolkit at
    least the tag's version), that a local version tag and the index channel agree with it.
  - Resolves the host's target capabilities from O(gpu_capability) (the inventory), else from
    O(gpu_capabilities) (the host's GPUs), else O(default_targets), and says so in C(notice).
  - Computes the stack fingerprint (sha256 over the canonical JSON of Python, torch pin, CUDA tag and
    index, CUDA version, kernel pin or source ref with its build settings, sglang and flashinfer pins,
    and the targets) and the stack name C(<profile>-<first 12 hex>).
  - Reports whether that stack exists, is sealed, and which stack C(current) points to, and fails when
    the stack does not exist yet and the stack root has less than O(min_free_gb) free.
  - Never changes anything.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  profile:
    description:
      - The loaded profile (a mapping, for example C(lookup('file', 'profiles/stable.yml') | from_yaml)).
    type: dict
    required: true
  profile_source:
    description: Where the profile came from, used in messages.
    type: str
    default: profile
  gpu_capability:
    description:
      - The host's inventory C(gpu_capability) (a quoted string such as V("12.0")); empty means not set.
    type: str
    default: ""
  gpu_capabilities:
    description:
      - Capabilities of the host's GPUs (C(gpu_facts)' C(capabilities)); used when O(gpu_capability)
        is empty.
    type: list
    elements: str
    default: []
  default_targets:
    description: Targets of a host with neither O(gpu_capability) nor GPUs.
    type: list
    elements: str
    default: ["12.0", "10.0"]
  stack_root:
    description: Directory holding the stacks and the C(current) link.
    type: path
    required: true
  min_free_gb:
    description: Free space (GiB) the stack root must have before a new stack is created.
    type: float
    default: 20
  lock_sha256:
    description:
      - sha256 of the profile's lock file (C(pylock.<name>.toml)); part of the fingerprint when given, so
        a relocked profile makes a new stack.
    type: str
    default: ""
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
  - module: stack_retention
  - module: torch_cuda_archs
"""

EXAMPLES = r"""
- name: Plan this host's stack from the stable profile
  stack_plan:
    profile: "{{ lookup('ansible.builtin.file', 'profiles/stable.yml') | from_yaml }}"
    profile_source: profiles/stable.yml
    gpu_capability: "{{ gpu_capability | default('') }}"
    stack_root: /opt/sglang/stacks
  register: plan
"""

RETURN = r"""
profile:
  description: The validated profile.
  returned: always
  type: dict
profile_name:
  description: The profile's C(name).
  returned: always
  type: str
  sample: stable
targets:
  description: Target capabilities, oldest first.
  returned: always
  type: list
  elements: str
  sample: ["10.0", "12.0"]
target_source:
  description: Where the targets came from, C(inventory), C(gpu) or C(default).
  returned: always
  type: str
notice:
  description: A sentence when the default targets were used, else null.
  returned: always
  type: str
fingerprint_inputs:
  description: What the fingerprint hashes.
  returned: always
  type: dict
fingerprint:
  description: sha256 hex of the canonical JSON of C(fingerprint_inputs).
  returned: always
  type: str
stack_name:
  description: C(<profile>-<first 12 hex of the fingerprint>).
  returned: always
  type: str
  sample: stable-3f9c2a61b0d4
stack_path:
  description: The stack's directory.
  returned: always
  type: str
stack_exists:
  description: Whether the stack directory exists.
  returned: always
  type: bool
stack_sealed:
  description: Whether the stack is sealed (activated once; never installed into again).
  returned: always
  type: bool
current_stack:
  description: Name of the stack the C(current) link points to, or null.
  returned: always
  type: str
free_bytes:
  description: Free bytes where the stack lives (measured at C(free_path)).
  returned: always
  type: int
free_path:
  description: The existing directory that was measured (the stack root or its nearest parent).
  returned: always
  type: str
constraints:
  description: Lines of the stack's constraints file (the profile's pins).
  returned: always
  type: list
  elements: str
  sample: ["torch==2.14.1", "sglang-kernel==0.4.10", "sglang==0.5.23", "flashinfer-python==0.7.2"]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda_arch import ArchError
from ansible.module_utils.stack_profile import (
    ProfileError,
    constraints,
    fingerprint,
    fingerprint_inputs,
    free_space,
    resolve_targets,
    stack_name,
    validate_profile,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "profile": {"type": "dict", "required": True},
            "profile_source": {"type": "str", "default": "profile"},
            "gpu_capability": {"type": "str", "default": ""},
            "gpu_capabilities": {"type": "list", "elements": "str", "default": []},
            "default_targets": {"type": "list", "elements": "str", "default": ["12.0", "10.0"]},
            "stack_root": {"type": "path", "required": True},
            "min_free_gb": {"type": "float", "default": 20},
            "lock_sha256": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    try:
        plan(module)
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"stack_plan failed unexpectedly: {type(exc).__name__}: {exc}")


def plan(module):
    params = module.params
    try:
        profile = validate_profile(params["profile"], params["profile_source"])
        targets, source, notice = resolve_targets(params["gpu_capability"], params["gpu_capabilities"],
                                                  params["default_targets"])
    except (ProfileError, ArchError) as exc:
        module.fail_json(msg=str(exc))
    inputs = fingerprint_inputs(profile, targets)
    if params["lock_sha256"]:
        # the stack is exactly the lock's files: a relocked profile makes a new stack
        inputs["lock_sha256"] = params["lock_sha256"]
    digest = fingerprint(inputs)
    name = stack_name(profile["name"], digest)
    root = params["stack_root"]
    path = os.path.join(root, name)
    link = os.path.join(root, "current")
    current = os.path.basename(os.path.realpath(link)) if os.path.islink(link) else None
    free_path, free_bytes = free_space(root)
    result = {
        "profile": profile, "profile_name": profile["name"], "targets": targets, "target_source": source,
        "notice": notice, "fingerprint_inputs": inputs, "fingerprint": digest, "stack_name": name,
        "stack_path": path, "stack_exists": os.path.isdir(path),
        "stack_sealed": os.path.exists(os.path.join(path, ".sealed")), "current_stack": current,
        "free_bytes": free_bytes, "free_path": free_path, "constraints": constraints(profile),
    }
    needed = int(params["min_free_gb"] * 1024**3)
    if not result["stack_exists"] and free_bytes < needed:
        module.fail_json(
            msg=f"not enough free disk for stack {name}: {free_path} has {free_bytes / 1024**3:.1f} GiB "
                f"free, a stack needs {params['min_free_gb']:g} GiB (stack_min_free_gb); free space there "
                f"(old stacks: lower stack_keep) or move stack_root", **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
