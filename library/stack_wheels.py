#!/usr/bin/python
"""Ansible module: which wheels of a stack's lock files a wheel cache lacks (read-only)."""

DOCUMENTATION = r"""
---
module: stack_wheels
short_description: Compare a stack's pinned wheels with a wheel cache's listing
description:
  - Reads the stack's lock files (written by C(uv pip compile --emit-index-url --emit-find-links)), that
    is the package sources they were resolved from and their exact pins.
  - Returns the pins that no wheel in O(cached) satisfies (same name and version, and a platform tag
    of C(any) or this machine's architecture), and the pip requirements text that downloads exactly
    those from the lock's sources.
  - Never changes anything.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  lock_files:
    description: Lock files on the host.
    type: list
    elements: path
    required: true
  cached:
    description: File names of the wheels already in the cache (basenames).
    type: list
    elements: str
    default: []
  no_index:
    description: Download from the lock's find-links only (drop its index lines, add C(--no-index)).
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
  - module: stack_plan
"""

EXAMPLES = r"""
- name: Find the stack's wheels the controller's cache lacks
  stack_wheels:
    lock_files: [/opt/sglang/stacks/stable-0123456789ab/locks/torch.txt]
    cached: "{{ cache_listing.files | map(attribute='path') | map('basename') | list }}"
  register: wheels
"""

RETURN = r"""
pins:
  description: Every pin of the lock files, as C(name==version).
  returned: always
  type: list
  elements: str
missing:
  description: Pins no cached wheel satisfies.
  returned: always
  type: list
  elements: str
  sample: ["torch==2.14.1"]
requirements:
  description: pip requirements text (source options, then the missing pins) for C(pip download).
  returned: always
  type: str
"""

import platform

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.wheel_cache import LockError, download_requirements, missing_pins, parse_lock


def main():
    module = AnsibleModule(
        argument_spec={
            "lock_files": {"type": "list", "elements": "path", "required": True},
            "cached": {"type": "list", "elements": "str", "default": []},
            "no_index": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    try:
        compare(module)
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"stack_wheels failed unexpectedly: {type(exc).__name__}: {exc}")


def compare(module):
    options, pins = [], []
    for path in module.params["lock_files"]:
        try:
            with open(path, encoding="utf-8") as handle:
                file_options, file_pins = parse_lock(handle.read(), path)
        except OSError as exc:
            module.fail_json(msg=f"cannot read lock file {path}: {exc.strerror}")
        except LockError as exc:
            module.fail_json(msg=str(exc))
        options += file_options
        pins += [pin for pin in file_pins if pin not in pins]
    missing = missing_pins(pins, module.params["cached"], platform.machine())
    module.exit_json(changed=False, pins=[f"{name}=={version}" for name, version in pins], missing=missing,
                     requirements=download_requirements(options, missing, module.params["no_index"]))


if __name__ == "__main__":
    main()
