#!/usr/bin/python
"""Ansible module: which CUDA architectures a torch install was built for (read-only)."""

DOCUMENTATION = r"""
---
module: torch_cuda_archs
short_description: Report the CUDA build and architecture list of the torch in a Python environment
description:
  - Runs a small probe in the given interpreter (torch is never imported into the module process) and
    reports the torch version, its CUDA version, the architectures it was compiled for, and the GPUs it
    sees.
  - The architecture list comes from C(torch._C._cuda_getArchFlags()) when present, which answers on
    GPU-less hosts for every torch version; C(torch.cuda.get_arch_list()) is only a fallback because it
    returns an empty list without a GPU before torch 2.13.
  - With O(require), reports the capabilities the arch list cannot run on (SASS C(sm_XY) entries by the
    same-major rule, C(sm_XYa) exactly, C(compute_XY) PTX by JIT) and fails by default when any is missing.
    A CPU or ROCm build with O(require) always fails, naming the index that serves CUDA builds.
  - The arch list is what torch was configured with; its libraries can hold more cubins (use
    C(cuda_binary_archs) on C(torch/lib) for those).
  - Never changes anything.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  python:
    description:
      - Interpreter of the environment to inspect, e.g. C(/opt/sglang/venv/bin/python) or
        C(~/venv/bin/python). A bare name is looked up on the remote PATH. Must exist and be executable.
      - Give O(python) or O(probe), not both.
    type: path
  probe:
    description:
      - An earlier answer of the same probe, rated instead of importing torch again, e.g. the
        C(torch_probe) that C(stack_facts) returns. C(playbooks/verify.yml) passes it, because a torch
        import costs seconds, and CUDA initialisation more on a GPU host.
      - It must hold what the probe answers (C(python), C(torch_version), C(build), C(arch_list),
        C(devices)); anything else fails with a message. O(timeout) does not apply.
    type: dict
  require:
    description:
      - Compute capabilities that torch must be able to run on, as strings (V("12.0"), V("120"),
        V("sm_120")). Quote them in YAML; a float such as 12.10 is rejected. A capability that no known
        GPU has (a newer GPU) is rated by the same rules, with a warning.
    type: list
    elements: raw
    default: []
  fail_on_missing:
    description:
      - Fail when a capability in O(require) is not covered. Defaults to true when O(require) is given.
    type: bool
  cuda_index_url:
    description:
      - Package index that serves CUDA builds of torch (the PyTorch index's C(whl/cu130) channel or your
        mirror of it). When set, the message for a CPU or ROCm build names it with the exact pip
        command; unset, the message describes where CUDA builds come from.
    type: str
  timeout:
    description:
      - Seconds the probe may take (importing torch and initialising CUDA) before it is killed and the
        module fails.
    type: int
    default: 120
attributes:
  check_mode:
    description: Can run in check mode; it changes nothing in either mode, so the answer is the same.
    support: full
  diff_mode:
    description: Returns no diff; it changes nothing.
    support: none
notes:
  - Supports check mode; the result is the same.
  - CUDA devices are ordered as torch sees them (C(CUDA_DEVICE_ORDER), C(CUDA_VISIBLE_DEVICES) of the
    remote environment apply), which can differ from nvidia-smi's PCI order.
seealso:
  - module: gpu_facts
  - module: sgl_kernel_variants
"""

EXAMPLES = r"""
- name: Rate the torch that stack_facts already probed, for the host's GPUs (no second torch import)
  torch_cuda_archs:
    probe: "{{ stack.torch_probe }}"
    require: "{{ gpu_facts_result.capabilities }}"
    fail_on_missing: false
  when: stack.torch_probe is not none

- name: Check that the serving venv's torch runs on this host's GPUs
  torch_cuda_archs:
    python: /opt/sglang/venv/bin/python
    require: "{{ gpu_facts_result.capabilities }}"

- name: Report only, never fail
  torch_cuda_archs:
    python: /opt/sglang/venv/bin/python
    require: ["12.0", "10.0"]
    fail_on_missing: false
  register: torch_archs

- name: Name a mirror for CUDA builds in the CPU-build message
  torch_cuda_archs:
    python: /opt/sglang/venv/bin/python
    require: ["9.0"]
    cuda_index_url: https://mirror.example.internal/pytorch/whl/cu130
"""

RETURN = r"""
python:
  description: Absolute path of the interpreter that was probed (by this module, or for O(probe)).
  returned: always
  type: str
torch_version:
  description: C(torch.__version__).
  returned: always
  type: str
  sample: 2.14.1+cu130
cuda_version:
  description: CUDA version torch was built with; null for CPU (and ROCm) builds.
  returned: always
  type: str
  sample: "13.0"
hip_version:
  description: HIP version of a ROCm build, else null.
  returned: always
  type: str
git_version:
  description: Git commit torch was built from.
  returned: always
  type: str
build:
  description: C(cuda), C(cpu) or C(rocm).
  returned: always
  type: str
arch_list:
  description: Architectures torch was compiled for.
  returned: always
  type: list
  elements: str
  sample: [sm_75, sm_80, sm_86, sm_90, sm_100, sm_120]
arch_list_source:
  description: C(torch._C._cuda_getArchFlags) or C(torch.cuda.get_arch_list).
  returned: always
  type: str
cuda_available:
  description: C(torch.cuda.is_available()) in that environment.
  returned: always
  type: bool
cuda_error:
  description: Exception text when querying CUDA devices failed, else null.
  returned: always
  type: str
cuda_warnings:
  description: Warnings torch emitted while initialising CUDA (e.g. an old driver).
  returned: always
  type: list
  elements: str
devices:
  description: Visible CUDA devices; C(covered) tells whether arch_list runs on the device.
  returned: always
  type: list
  elements: dict
  contains:
    index:
      description: torch's device index.
      type: int
    name:
      description: C(torch.cuda.get_device_name()).
      type: str
    capability:
      description: Compute capability, a string.
      type: str
    covered:
      description: Whether arch_list runs on this device (null when its capability is unreadable).
      type: bool
  sample: [{index: 0, name: NVIDIA H200, capability: "9.0", covered: true}]
require:
  description: O(require) as canonical capability strings.
  returned: always
  type: list
  elements: str
missing:
  description: Capabilities in O(require) that arch_list cannot run on (all of them for a CPU build).
  returned: always
  type: list
  elements: str
  sample: ["11.0"]
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda_arch import ArchError, parse_requirements
from ansible.module_utils.torch_probe import TorchProbeError, check_requirements, inspect_torch, rate_answer


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path"},
            "probe": {"type": "dict"},
            "require": {"type": "list", "elements": "raw", "default": []},
            "fail_on_missing": {"type": "bool"},
            "cuda_index_url": {"type": "str"},
            "timeout": {"type": "int", "default": 120},
        },
        mutually_exclusive=[("python", "probe")],
        required_one_of=[("python", "probe")],
        supports_check_mode=True,
    )
    try:
        check_torch(module)
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"torch_cuda_archs failed unexpectedly: {type(exc).__name__}: {exc}")


def check_torch(module):
    params = module.params
    if params["timeout"] <= 0:
        module.fail_json(msg=f"timeout must be a positive number of seconds, got {params['timeout']}")
    try:
        require, fail_on_missing, warnings = parse_requirements(params["require"], params["fail_on_missing"])
    except ArchError as exc:
        module.fail_json(msg=str(exc))
    for warning in warnings:
        module.warn(warning)
    try:
        if params["probe"] is not None:
            facts = rate_answer(params["probe"], require)
        else:
            facts = inspect_torch(params["python"], require, timeout=params["timeout"])
    except TorchProbeError as exc:
        module.fail_json(msg=str(exc))
    problem = check_requirements(facts, params["cuda_index_url"])
    if problem and (fail_on_missing or facts["build"] != "cuda"):
        module.fail_json(msg=problem, changed=False, **facts)
    module.exit_json(changed=False, **facts)


if __name__ == "__main__":
    main()
