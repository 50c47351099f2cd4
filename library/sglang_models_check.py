#!/usr/bin/python
"""Ansible module: check one host's served models as a whole, against its GPUs (read-only)."""

DOCUMENTATION = r"""
---
module: sglang_models_check
short_description: Check every served-model entry of a host before anything changes
description:
  - Checks each entry of a host's C(sglang_service_models) with the rules the sglang_service role renders
    it with (keys, types, speculative settings, multi-node groups, and attention / MoE backends against
    the host's target capabilities, as sglang 0.5.23 enforces them at start).
  - Then what only the whole list shows, refused here because nothing later notices it. Two entries
    with the same name (the second would replace the first's unit), and two entries that serve HTTP on
    the same port (an unset port is 30000).
  - The capabilities are the stack's targets, resolved like the stack role does it; O(capabilities)
    (C(sglang_service_capabilities) from the inventory) overrides them.
  - Every message names the host, the entry (C(sglang_service_models[N])), the option and, for a backend,
    the capability and what to set instead. Read-only; never reports C(changed).
  - The preflight role runs it delegated to the controller, first with the inventory's C(gpu_capability)
    alone, then (hosts without it) with the GPUs it read.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  host:
    description: Inventory name of the host (messages; its place in a C(nodes_group) group).
    type: str
    required: true
  models:
    description: The host's C(sglang_service_models) (a list of mappings; anything else is reported).
    type: raw
    required: true
  groups:
    description: Inventory group name to its hosts (the C(groups) magic variable), for C(nodes_group).
    type: dict
    default: {}
  gpu_capability:
    description: The host's inventory C(gpu_capability) (a quoted string such as V("12.0")); empty if unset.
    type: str
    default: ""
  gpus_read:
    description:
      - Whether the host's GPUs were read (O(gpu_capabilities) is their answer). False (before the host is
        contacted) checks the backends only against O(gpu_capability) and skips them without it.
    type: bool
    default: false
  gpu_capabilities:
    description: Capabilities of the host's GPUs (C(gpu_facts)' C(capabilities)); empty when it has none.
    type: list
    elements: str
    default: []
  default_targets:
    description:
      - Targets of a host with neither O(gpu_capability) nor GPUs (the stack role's C(stack_default_targets)).
    type: list
    elements: str
    default: ["12.0", "10.0"]
  capabilities:
    description:
      - Capabilities to check against instead of the stack's targets (C(sglang_service_capabilities)).
    type: list
    elements: str
attributes:
  check_mode:
    description: Read-only; runs the same in check mode.
    support: full
  diff_mode:
    description: Nothing is changed, so there is no diff.
    support: none
seealso:
  - module: sglang_server_args
  - module: inventory_check
"""

EXAMPLES = r"""
- name: Check the served models against the inventory's gpu_capability
  sglang_models_check:
    host: "{{ inventory_hostname }}"
    models: "{{ sglang_service_models | default([]) }}"
    groups: "{{ groups }}"
    gpu_capability: "{{ gpu_capability | default('') }}"
  delegate_to: localhost
"""

RETURN = r"""
capabilities:
  description: The capabilities the backends were checked against (empty when not known yet).
  returned: always
  type: list
  elements: str
  sample: ["12.0"]
source:
  description: Where they come from, or null when they are not known yet.
  returned: always
  type: str
  sample: gpu_capability in the inventory
problems:
  description: One message per problem, each naming the host and the entry; empty when all is well.
  returned: always
  type: list
  elements: str
  sample:
    - >-
      host bw-01 (targets 12.0 from gpu_capability in the inventory):
      sglang_service_models[0].attention_backend: fa3 has no kernels for capability 12.0 (model 'chat'):
      sglang 0.5.23 runs it on 8.x, 9.x only (FlashAttention 3). Leave attention_backend unset (sglang picks
      one for the GPU) or set one that runs there: flashinfer or triton
"""

from ansible.module_utils.module_entry import run_module
from ansible.module_utils.sglang_models import check_host_models

# One specification for both ways in: run_module here, action_plugins/sglang_models_check.py on the
# controller (the preflight role runs this check delegated to it).
ARGUMENT_SPEC = {
    "host": {"type": "str", "required": True},
    "models": {"type": "raw", "required": True},
    "groups": {"type": "dict", "default": {}},
    "gpu_capability": {"type": "str", "default": ""},
    "gpus_read": {"type": "bool", "default": False},
    "gpu_capabilities": {"type": "list", "elements": "str", "default": []},
    "default_targets": {"type": "list", "elements": "str", "default": ["12.0", "10.0"]},
    "capabilities": {"type": "list", "elements": "str"},
}


def run(p):
    """The module's result for validated parameters (``failed`` and ``msg`` on a problem)."""
    targets = {"gpu_capability": p["gpu_capability"], "gpu_capabilities": p["gpu_capabilities"],
               "gpus_read": p["gpus_read"], "default_targets": p["default_targets"],
               "capabilities": p["capabilities"]}
    try:
        result = check_host_models(p["host"], p["models"], p["groups"], **targets)
    except Exception as exc:  # never a traceback: say what failed
        return {"failed": True, "problems": [],
                "msg": f"sglang_models_check failed unexpectedly: {type(exc).__name__}: {exc}"}
    problems = result["problems"]
    if problems:
        count = len(problems)
        return {"failed": True, "changed": False, **result,
                "msg": f"{count} problem{'s' if count > 1 else ''} with sglang_service_models: "
                       + "; ".join(problems)}
    return {"changed": False, **result}


def main():
    run_module(ARGUMENT_SPEC, run)


if __name__ == "__main__":
    main()
