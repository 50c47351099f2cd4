#!/usr/bin/python
"""Ansible module: what the host runs right now, in the shape of a lock (see module_utils/stack_facts)."""

DOCUMENTATION = r"""
---
module: stack_facts
short_description: Read the stack in use, its toolkit, driver, torch, kernel, sglang and unit, as a lock would
description:
  - Reads the stack that C(<stack_root>/current) points to and its C(stack.json) manifest, the CUDA
    toolkit (C(nvcc --version)), the driver (nvidia-smi), torch as the stack's interpreter reports it,
    every installed Python distribution with the sha256 of its C(RECORD), and the model unit file's
    sha256.
  - The result has the shape of a lock (C(playbooks/snapshot.yml) builds one from it with the
    C(stack_lock) module; C(playbooks/verify.yml) compares it with one).
  - A host without a stack in use is an answer (C(stack.name) null), not a failure.
  - Read-only; never reports C(changed).
version_added: "0.2.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  stack_root:
    description: Directory holding the stacks and the C(current) link.
    type: path
    default: /opt/sglang/stacks
  nvcc:
    description: nvcc of the toolkit the stack is built and served with.
    type: path
    default: /usr/local/cuda/bin/nvcc
  unit_paths:
    description:
      - Paths or glob patterns of the model unit files (the sglang_service role writes one
        C(sglang-<model>.service) per model).
      - The first that matches a file is hashed; when it matches several, one sha256 covers them all
        (each file's name and sha256), so a change to any model's unit is drift.
    type: list
    elements: path
    default: []
  nvidia_smi:
    description: nvidia-smi to run; default is the one on PATH or in the usual driver locations.
    type: path
  timeout:
    description: Seconds each probe of the stack's interpreter may take.
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
- name: Read what this host runs
  stack_facts:
    stack_root: /opt/sglang/stacks
    unit_paths: [/etc/systemd/system/sglang-*.service]
  register: running
"""

RETURN = r"""
facts:
  description: Lock-shaped facts.
  returned: always
  type: dict
  contains:
    stack:
      description:
        - C(root), C(name) and C(path) of the stack in use (null when none), its C(fingerprint) and
          C(python) (its interpreter's version).
      type: dict
    profile:
      description: Name of the profile the stack was built from.
      type: str
    target_capabilities:
      description: Capabilities the stack was built for.
      type: list
      elements: str
    cuda:
      description: C(toolkit_version), C(nvcc_version) and C(nvcc).
      type: dict
    driver:
      description: C(version), C(cuda_driver_version) and C(capabilities) of the GPUs (nulls without a GPU).
      type: dict
    torch:
      description: C(version), C(git_version), C(cuda_version) and the C(index_url) it came from.
      type: dict
    sgl_kernel:
      description: C(package), C(version) and C(build_fingerprint).
      type: dict
    sglang:
      description: C(version).
      type: dict
    unit:
      description: C(path) (the file, or the pattern when it matched several) and C(sha256) of the units.
      type: dict
    distributions:
      description: Installed distributions (see the python_distributions module).
      type: list
      elements: dict
torch_probe:
  description:
    - The whole answer of the stack interpreter's torch probe (the keys the torch_cuda_archs module returns
      before it rates, such as C(torch_version), C(build), C(arch_list) and C(devices)); null when the
      stack in use has no torch, or there is no stack in use.
    - Give it to C(torch_cuda_archs) as its C(probe) option to rate torch for capabilities
      without importing torch a second time (C(playbooks/verify.yml) does).
  returned: always
  type: dict
  sample: {torch_version: 2.14.1+cu130, build: cuda, cuda_version: "13.0", arch_list: [sm_90, sm_100, sm_120],
           devices: [], cuda_available: false, python: /opt/sglang/stacks/stable-3f2a9c1d0e4b/bin/python}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.stack_facts import StackFactsError, read


def main():
    module = AnsibleModule(
        argument_spec={
            "stack_root": {"type": "path", "default": "/opt/sglang/stacks"},
            "nvcc": {"type": "path", "default": "/usr/local/cuda/bin/nvcc"},
            "unit_paths": {"type": "list", "elements": "path", "default": []},
            "nvidia_smi": {"type": "path"},
            "timeout": {"type": "int", "default": 120},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        facts, torch_probe = read(params["stack_root"], nvcc=params["nvcc"], unit_paths=params["unit_paths"],
                                  nvidia_smi=params["nvidia_smi"], timeout=params["timeout"])
    except StackFactsError as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"stack_facts failed unexpectedly: {type(exc).__name__}: {exc}")
    module.exit_json(changed=False, facts=facts, torch_probe=torch_probe)


if __name__ == "__main__":
    main()
