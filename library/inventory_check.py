#!/usr/bin/python
"""Ansible module: strict check of one host's project variables (see module_utils/inventory_rules)."""

DOCUMENTATION = r"""
---
module: inventory_check
short_description: Strictly check a host's project variables against the roles' argument specs
description:
  - Checks the variables of one host that carry a project prefix (every role name followed by C(_),
    plus O(prefixes)) against the typed C(meta/argument_specs.yml) of every role.
  - Stricter than ansible-core's own role argument validation, which converts the string C("false")
    to a boolean and the float C(12.0) to a string. Here a boolean passed as a string, a number where
    a string is expected (capabilities must be quoted, C("12.0")), an unknown capability, a value
    outside C(choices), an unknown (misspelled) variable and a removed variable are all errors.
  - Variables named C(*_capability) (a string) or C(*_capabilities) (a list) must be compute
    capabilities of real GPUs in canonical form, such as C("12.0").
  - Every message names the host and the variable. Read-only; never reports C(changed).
  - Runs anywhere (stdlib only); the preflight role runs it delegated to the controller so a bad
    inventory fails before any host is contacted.
version_added: "0.1.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  host:
    description: Inventory name of the host whose variables these are (used in messages).
    type: str
    required: true
  variables:
    description:
      - Name to value mapping of the host's variables whose values are checked.
      - Pass only known, non-secret variables here (options without C(no_log)); secrets go in
        O(secrets) (a C(no_log) option) and unknown names in O(names), so no secret value reaches a
        logged argument.
    type: dict
    required: true
  names:
    description:
      - Every project-prefixed variable name the host has. Names are checked for being known and not
        removed; their values are not needed.
    type: list
    elements: str
    default: []
  specs:
    description:
      - Role name to parsed C(meta/argument_specs.yml) document, for every role of the project.
      - Each role name followed by C(_) is a policed prefix.
      - Like any C(dict) option, it also takes the mapping as a JSON string. The preflight role passes
        one, because a string reaches each host's module as it is, where a nested mapping is templated
        again for every host.
    type: dict
    required: true
  prefixes:
    description: Further policed prefixes for inventory-level variables, such as C(gpu_).
    type: list
    elements: str
    default: []
  removed:
    description: Variable names that no longer exist (or never worked), mapped to what to do instead.
    type: dict
    default: {}
  secrets:
    description:
      - Name to value mapping of the host's secrets (options with C(no_log)), type-checked only
        (a string option must be a string; a mapping of secrets must map names to strings).
      - A C(no_log) option, so the values never appear in the module's arguments, result or messages.
    type: dict
    default: {}
attributes:
  check_mode:
    description: Can run in check mode; it changes nothing in either mode, so the answer is the same.
    support: full
  diff_mode:
    description: Returns no diff; it changes nothing.
    support: none
"""

EXAMPLES = r"""
- name: Check this host's variables against every role's argument specs
  inventory_check:
    host: "{{ inventory_hostname }}"
    variables:
      gpu_capability: "12.0"
      preflight_fail_on_unsupported_os: true
    specs:
      preflight: "{{ lookup('ansible.builtin.file', 'roles/preflight/meta/argument_specs.yml') | from_yaml }}"
    prefixes: [gpu_]
    removed:
      gpu_compute_capability: renamed to gpu_capability
  delegate_to: localhost
"""

RETURN = r"""
checked:
  description: Names of the variables that were checked, sorted.
  returned: always
  type: list
  elements: str
  sample: [gpu_capability, preflight_fail_on_unsupported_os]
problems:
  description: One message per problem, each naming the host and the variable; empty when all is well.
  returned: always
  type: list
  elements: str
  sample:
    - 'host gpu-01: gpu_capability must be a string, got float 12.0; quote it in YAML (e.g. "12.0")'
    - "host gpu-02: gpu_capabilty is not a variable of this project; did you mean 'gpu_capability'?"
    - "host gpu-03: sglang_service_api_key must be a string, got int; quote it in YAML (unquoted digits are a
      number: leading zeros are lost, and a leading 0 makes it octal); the value is not shown"
"""

from ansible.module_utils.inventory_rules import check_host_variables
from ansible.module_utils.module_entry import run_module

# One specification for both ways in: run_module here, action_plugins/inventory_check.py on the
# controller (the preflight role runs this check delegated to it).
ARGUMENT_SPEC = {
    "host": {"type": "str", "required": True},
    "variables": {"type": "dict", "required": True},
    "names": {"type": "list", "elements": "str", "default": []},
    "specs": {"type": "dict", "required": True},
    "prefixes": {"type": "list", "elements": "str", "default": []},
    "removed": {"type": "dict", "default": {}},
    "secrets": {"type": "dict", "default": {}, "no_log": True},
}


def run(params):
    """The module's result for validated parameters (``failed`` and ``msg`` on a problem)."""
    try:
        problems = check_host_variables(
            params["host"], params["variables"], params["specs"],
            prefixes=params["prefixes"], removed=params["removed"], names=params["names"],
            secrets=params["secrets"],
        )
    except Exception as exc:  # a malformed spec file must not surface as a traceback
        return {"failed": True, "msg": f"host {params['host']}: could not check variables: {exc}",
                "changed": False, "checked": [], "problems": []}
    checked = sorted(set(params["variables"]) | set(params["names"]) | set(params["secrets"]))
    result = {"changed": False, "checked": checked, "problems": problems}
    if problems:
        count = len(problems)
        result.update(failed=True,
                      msg=f"{count} inventory problem{'s' if count > 1 else ''}: " + "; ".join(problems))
    return result


def main():
    run_module(ARGUMENT_SPEC, run)


if __name__ == "__main__":
    main()
