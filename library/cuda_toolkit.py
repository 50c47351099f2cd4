#!/usr/bin/python
"""Ansible module: find a CUDA toolkit and check it against target capabilities (read-only)."""

DOCUMENTATION = r"""
---
module: cuda_toolkit
short_description: Find a CUDA toolkit and check that it can build for the target GPUs
description:
  - Finds nvcc (O(nvcc), else O(home)/bin/nvcc, else the first of O(search) that has one, else nvcc on
    the remote PATH), runs C(nvcc --version), C(nvcc --list-gpu-arch) and C(nvcc --dryrun), and
    reports the toolkit's release, root (the real CUDA_HOME, also behind a wrapper script) and virtual
    architectures.
  - Computes what the targets need from O(require) and O(extra_targets) with the project's arch rules
    (C(module_utils/cuda_arch.py)), for example sm_120a needs CUDA >= 12.8 and family C(f) targets
    CUDA >= 12.9, and checks the toolkit against it, and against O(version) when given.
  - With O(probe=false) runs nothing and checks only O(version) against the targets, so a role can
    refuse a toolkit release before installing it.
  - Never changes anything.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  nvcc:
    description: The nvcc to check. Must exist and be executable.
    type: path
  home:
    description: A CUDA home (its C(bin/nvcc) is checked). Ignored when O(nvcc) is set.
    type: path
  search:
    description:
      - CUDA homes to try in order when neither O(nvcc) nor O(home) is set; nvcc on the remote PATH
        comes after them.
    type: list
    elements: path
    default: []
  require:
    description:
      - Compute capabilities the toolkit must build real kernels for, as strings (V("12.0")). Each
        needs its arch-specific target from 9.0 on (sm_120a), its plain target before.
    type: list
    elements: raw
    default: []
  extra_targets:
    description: More targets the build steps use, such as V(sm_120f) or V(sm_100f).
    type: list
    elements: str
    default: []
  version:
    description:
      - CUDA release the stack asks for (V("13.0")). A toolkit of another major.minor is a problem. With
        O(probe=false) it is the version checked against the targets.
    type: str
  probe:
    description: Find and run nvcc (true), or only check O(version) against the targets (false).
    type: bool
    default: true
  required:
    description:
      - Fail when no nvcc is found (true), or return RV(found=false) (false). An O(nvcc) or O(home) that
        does not exist always fails.
    type: bool
    default: true
  fail_on_problems:
    description: Fail when RV(problems) is not empty (true), or only report them (false).
    type: bool
    default: true
  timeout:
    description: Seconds each nvcc call may take.
    type: int
    default: 60
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
  - module: torch_cuda_archs
  - module: cuda_binary_archs
"""

EXAMPLES = r"""
- name: Check the toolkit at /usr/local/cuda for RTX PRO 6000 and B200
  cuda_toolkit:
    home: /usr/local/cuda
    require: ["12.0", "10.0"]
    version: "13.0"
  register: toolkit

- name: Refuse CUDA 12.6 for Blackwell before installing it
  cuda_toolkit:
    probe: false
    version: "12.6"
    require: ["12.0"]

- name: Is there a toolkit at all? (never fails)
  cuda_toolkit:
    search: [/usr/local/cuda-13.0, /usr/local/cuda]
    required: false
    fail_on_problems: false
"""

RETURN = r"""
found:
  description: Whether an nvcc was found (always true with O(probe=false), which looks for none).
  returned: always
  type: bool
nvcc:
  description: The nvcc that was run; null when none was found or with O(probe=false).
  returned: always
  type: str
  sample: /usr/local/cuda-13.0/bin/nvcc
home:
  description: The toolkit root nvcc resolves (C(#$ TOP) of C(nvcc --dryrun)), i.e. CUDA_HOME.
  returned: always
  type: str
  sample: /usr/local/cuda-13.0
version:
  description: CUDA release as major.minor (O(version) with O(probe=false)).
  returned: always
  type: str
  sample: "13.0"
version_full:
  description: Full nvcc version; null with O(probe=false).
  returned: always
  type: str
  sample: 13.0.88
gpu_archs:
  description: Virtual architectures of C(nvcc --list-gpu-arch).
  returned: always
  type: list
  elements: str
  sample: [compute_75, compute_80, compute_90, compute_100, compute_120, compute_121]
requirements:
  description: What the targets need.
  returned: always
  type: dict
  contains:
    min_version:
      description: Oldest CUDA release that builds every target; null when no rule applies.
      type: str
      sample: "12.8"
    min_version_reason:
      description: The target that sets RV(requirements.min_version).
      type: str
      sample: sm_120a needs CUDA >= 12.8
    compute_archs:
      description: Virtual architectures nvcc must list.
      type: list
      elements: str
      sample: [compute_100, compute_120]
    max_major:
      description: Newest CUDA major that still targets every capability (12 below 7.5), else null.
      type: int
    targets:
      description: Each target with the first CUDA release that compiles it (null when unknown).
      type: list
      elements: dict
      sample: [{target: sm_120a, min_version: "12.8"}]
missing_archs:
  description: Entries of RV(requirements.compute_archs) that nvcc does not list.
  returned: always
  type: list
  elements: str
problems:
  description: Why the toolkit does not fit, one sentence each; empty when it does.
  returned: always
  type: list
  elements: str
env:
  description:
    - Environment for build steps and services, CUDA_HOME, CUDA_PATH, CUDACXX and PATH (the toolkit's
      bin first); empty when no toolkit was found.
  returned: always
  type: dict
  sample: {CUDA_HOME: /usr/local/cuda-13.0, CUDA_PATH: /usr/local/cuda-13.0,
           CUDACXX: /usr/local/cuda-13.0/bin/nvcc, PATH: /usr/local/cuda-13.0/bin:/usr/bin:/bin}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda_arch import ArchError, cuda_version_tuple, parse_capabilities
from ansible.module_utils.cuda_toolkit import (
    ToolkitError,
    check_toolkit,
    find_nvcc,
    inspect_toolkit,
    toolkit_env,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "nvcc": {"type": "path"},
            "home": {"type": "path"},
            "search": {"type": "list", "elements": "path", "default": []},
            "require": {"type": "list", "elements": "raw", "default": []},
            "extra_targets": {"type": "list", "elements": "str", "default": []},
            "version": {"type": "str"},
            "probe": {"type": "bool", "default": True},
            "required": {"type": "bool", "default": True},
            "fail_on_problems": {"type": "bool", "default": True},
            "timeout": {"type": "int", "default": 60},
        },
        required_if=[("probe", False, ("version",))],
        supports_check_mode=True,
    )
    try:
        check(module)
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"cuda_toolkit failed unexpectedly: {type(exc).__name__}: {exc}")


def check(module):
    params = module.params
    if params["timeout"] <= 0:
        module.fail_json(msg=f"timeout must be a positive number of seconds, got {params['timeout']}")
    try:
        capabilities = parse_capabilities(params["require"], known_only=False)
        if params["version"] is not None:
            cuda_version_tuple(params["version"])
    except ArchError as exc:
        module.fail_json(msg=str(exc))
    result = {"found": False, "nvcc": None, "home": None, "version": None, "version_full": None,
              "gpu_archs": [], "requirements": {}, "missing_archs": [], "problems": [], "env": {}}
    try:
        if not params["probe"]:
            facts = {"version": params["version"]}
            result.update(found=True, version=params["version"])
        else:
            nvcc = find_nvcc(params["nvcc"], params["home"], params["search"])
            if nvcc is None:
                where = ", ".join([*params["search"], "PATH"])
                if params["required"]:
                    module.fail_json(msg=f"no CUDA toolkit found (no nvcc in {where})", **result)
                result["problems"] = [f"no CUDA toolkit found (no nvcc in {where})"]
                module.exit_json(changed=False, **result)
            facts = inspect_toolkit(nvcc, params["timeout"])
            own_nvcc = os.path.join(facts["home"], "bin", "nvcc")
            result.update(facts, found=True,
                          env=toolkit_env(facts["home"], own_nvcc if os.path.isfile(own_nvcc) else nvcc))
        problems, requirements, missing = check_toolkit(facts, capabilities, params["extra_targets"],
                                                        params["version"] if params["probe"] else None)
    except (ToolkitError, ArchError) as exc:
        module.fail_json(msg=str(exc), **result)
    result.update(requirements=requirements, missing_archs=missing, problems=problems)
    unknown = [t["target"] for t in requirements["targets"] if t["min_version"] is None]
    if unknown:
        decides = ("nvcc --list-gpu-arch decides" if params["probe"]
                   else "only the installed toolkit's nvcc --list-gpu-arch can tell")
        module.warn(f"no known CUDA release rule for {', '.join(unknown)} (newer than the project's table in "
                    f"module_utils/cuda_arch.py): {decides}")
    if problems and params["fail_on_problems"]:
        where = f" ({result['nvcc']})" if result["nvcc"] else ""
        module.fail_json(msg=f"CUDA {result['version']}{where} does not fit the targets "
                             f"{', '.join(capabilities) or '(none)'}: " + "; ".join(problems), **result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
