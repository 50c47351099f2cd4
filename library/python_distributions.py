#!/usr/bin/python
"""Ansible module: every Python distribution installed in an environment (see module_utils/python_dists)."""

DOCUMENTATION = r"""
---
module: python_distributions
short_description: List the Python distributions installed in an environment, with their RECORD hashes
description:
  - Runs the environment's own interpreter (a child process, bounded in time) and reads every installed
    distribution's metadata with C(importlib.metadata); nothing from the environment is imported.
  - Returns each distribution's canonical name, version, installer and the sha256 of its C(RECORD)
    (the installed files with their hashes), so a lock can tell a package upgraded, removed or
    reinstalled by hand.
  - Read-only; never reports C(changed).
version_added: "0.2.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  python:
    description: Interpreter of the environment, for example the stack's C(bin/python).
    type: path
    required: true
  timeout:
    description: Seconds the listing may take before it is killed.
    type: int
    default: 120
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
"""

EXAMPLES = r"""
- name: List what the stack in use holds
  python_distributions:
    python: /opt/sglang/stacks/current/bin/python
  register: installed
"""

RETURN = r"""
python:
  description: The interpreter that answered (sys.executable).
  returned: always
  type: str
python_version:
  description: Its version.
  returned: always
  type: str
  sample: "3.11.2"
distributions:
  description: One entry per installed distribution, sorted by name.
  returned: always
  type: list
  elements: dict
  contains:
    name:
      description: PEP 503 normalised name.
      type: str
    version:
      description: Installed version.
      type: str
    installer:
      description: Content of C(INSTALLER) (C(uv), C(pip)), empty when absent.
      type: str
    record_sha256:
      description:
        - sha256 of the distribution's C(RECORD) file less the installer's bookkeeping lines (C(INSTALLER),
          C(REQUESTED), C(direct_url.json), C(uv_cache.json)), so the same wheel installed another way
          hashes the same; null when it has no C(RECORD).
      type: str
    direct_url:
      description: Content of C(direct_url.json) for URL or local-path installs, else null.
      type: str
  sample: [{name: torch, version: 2.14.1, installer: uv, record_sha256: 5c1e..., direct_url: null}]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.python_dists import DistributionsError, probe_distributions


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "timeout": {"type": "int", "default": 120},
        },
        supports_check_mode=True,
    )
    try:
        facts = probe_distributions(module.params["python"], timeout=module.params["timeout"])
    except DistributionsError as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"python_distributions failed unexpectedly: {type(exc).__name__}: {exc}")
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
