#!/usr/bin/python
"""Ansible module: which old stacks under a stack root are beyond the number to keep (read-only)."""

DOCUMENTATION = r"""
---
module: stack_retention
short_description: List the stacks under a stack root and the old ones to remove
description:
  - Lists the stack directories (named C(<profile>-<12 hex>)) under O(stack_root) with the time each was
    sealed (or last changed, when unsealed), and which stack the C(current) link points to.
  - Returns in C(remove) every stack but the current one and O(keep) others. The others kept are the
    stacks in O(protect) first, then the newest of the rest, so O(keep) counts every old stack that
    stays (O(keep=2) with a protected previous stack keeps it and one more). A protected stack is never
    in C(remove), even beyond O(keep). Other entries of the stack root (C(current), wheel directories)
    are never listed.
  - Never changes anything; the role removes what C(remove) names.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  stack_root:
    description: Directory holding the stacks and the C(current) link.
    type: path
    required: true
  keep:
    description:
      - How many old stacks to keep besides the current one, the protected ones included (0 keeps only the
        current stack and the protected ones).
    type: int
    default: 2
  protect:
    description:
      - Stack names never to remove (for example the stack being activated, or the one a rollout may roll
        back to). Those that are old stacks here take their place among the O(keep).
    type: list
    elements: str
    default: []
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
  - module: stack_plan
"""

EXAMPLES = r"""
- name: Find old stacks beyond the two to keep
  stack_retention:
    stack_root: /opt/sglang/stacks
    keep: 2
  register: retention

- name: Remove them
  ansible.builtin.file:
    path: "/opt/sglang/stacks/{{ item }}"
    state: absent
  loop: "{{ retention.remove }}"
"""

RETURN = r"""
stacks:
  description: Stack names under O(stack_root), newest first.
  returned: always
  type: list
  elements: str
current_stack:
  description: Name of the stack the C(current) link points to, or null.
  returned: always
  type: str
remove:
  description: The old stacks beyond O(keep) (protected ones counted first), never current nor protected.
  returned: always
  type: list
  elements: str
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.stack_profile import STACK_NAME_RE, stacks_to_prune


def stack_time(path):
    sealed = os.path.join(path, ".sealed")
    return os.stat(sealed if os.path.exists(sealed) else path).st_mtime


def main():
    module = AnsibleModule(
        argument_spec={
            "stack_root": {"type": "path", "required": True},
            "keep": {"type": "int", "default": 2},
            "protect": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        retention(module)
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"stack_retention failed unexpectedly: {type(exc).__name__}: {exc}")


def retention(module):
    root, keep = module.params["stack_root"], module.params["keep"]
    if keep < 0:
        module.fail_json(msg=f"keep (stack_keep) must be 0 or more, got {keep}")
    link = os.path.join(root, "current")
    current = os.path.basename(os.path.realpath(link)) if os.path.islink(link) else None
    stacks = []
    if os.path.isdir(root):
        for name in os.listdir(root):
            path = os.path.join(root, name)
            if STACK_NAME_RE.match(name) and os.path.isdir(path) and not os.path.islink(path):
                stacks.append((name, stack_time(path)))
    stacks.sort(key=lambda item: item[1], reverse=True)
    remove = stacks_to_prune(stacks, current, keep, module.params["protect"])
    module.exit_json(changed=False, stacks=[name for name, _ in stacks], current_stack=current, remove=remove)


if __name__ == "__main__":
    main()
