#!/usr/bin/python
"""Ansible module: sgl_kernel common_ops variants, the loader's pick, and its arch coverage (read-only)."""

DOCUMENTATION = r"""
---
module: sgl_kernel_variants
short_description: Report which sgl_kernel common_ops variant loads on a GPU and whether it has code for it
description:
  - Lists every C(common_ops) library of an installed sgl_kernel package (C(sm90/), C(sm100/), any other
    subdirectory, and the package-root fallback) with the SASS and PTX arches each one holds, read from
    the files without importing them.
  - Replicates the upstream loader (C(sgl_kernel/load_utils.py)) to name the variant it loads for a
    capability, 9.0 -> C(sm90), every other capability and no GPU -> C(sm100), then the package-root
    C(common_ops), and tells whether that file can run on the capability. A miss comes with a message that
    names the file, its arches and what to do.
  - The answer is the file the loader tries first. Upstream also falls back to the package-root
    C(common_ops) when that file exists but fails to load (for example a torch ABI mismatch), and last
    to a top-level C(import common_ops); whether a file loads is only known by loading it, which is
    what O(import_check) does.
  - With O(import_check) on a GPU host, imports torch then sgl_kernel in that interpreter and reports which
    file was actually loaded, or the error (an C(undefined symbol) means a torch ABI mismatch).
  - Never changes anything.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  python:
    description:
      - Interpreter of the environment that has sglang-kernel installed. The package is located with
        C(importlib.util.find_spec), which does not import it. A bare name is looked up on the remote
        PATH. Exactly one of O(python) and O(package_dir) is required.
    type: path
  package_dir:
    description:
      - An C(sgl_kernel) package directory to inspect directly (e.g. an unpacked wheel). With
        O(import_check), the import runs in the interpreter that runs this module
        (C(ansible_python_interpreter)) with this directory's parent first on C(sys.path).
    type: path
  capability:
    description:
      - Compute capability to check, as a string (V("12.0")). Default is the first GPU's from nvidia-smi;
        with no GPU the loader's no-GPU choice is reported and C(selected_covers) is null. A capability
        that no known GPU has (a newer GPU) is checked by the same rules, with a warning.
    type: raw
  import_check:
    description:
      - Also import torch and sgl_kernel (only on a host where nvidia-smi lists a GPU; skipped with a
        reason otherwise).
    type: bool
    default: false
  nvidia_smi:
    description:
      - Path of nvidia-smi used to find the GPU; a bare name is looked up on the remote PATH. Default
        is nvidia-smi on the remote PATH, then the usual install directories.
    type: path
  timeout:
    description:
      - Seconds each probe (locating the package, the import check) may take before it is killed.
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
  - The loader uses torch's current device, which by default is ordered fastest-first, not by PCI bus
    like nvidia-smi; on a host with mixed GPUs pass O(capability) explicitly or use O(import_check).
seealso:
  - module: gpu_facts
  - module: torch_cuda_archs
"""

EXAMPLES = r"""
- name: Will the installed sgl_kernel run on this host's GPU?
  sgl_kernel_variants:
    python: /opt/sglang/venv/bin/python
  register: sgl_kernel_check

- name: Stop on a miss, with the module's explanation
  ansible.builtin.assert:
    that: sgl_kernel_check.selected_covers is not false
    fail_msg: "{{ sgl_kernel_check.message }}"

- name: Check an unpacked wheel for a capability this host does not have
  sgl_kernel_variants:
    package_dir: /srv/wheels/unpacked/sgl_kernel
    capability: "12.0"

- name: Import it for real on the GPU host
  sgl_kernel_variants:
    python: /opt/sglang/venv/bin/python
    import_check: true
"""

RETURN = r"""
package_dir:
  description: The sgl_kernel directory inspected.
  returned: always
  type: str
package_version:
  description: C(__version__) from sgl_kernel/version.py, or null.
  returned: always
  type: str
  sample: 0.4.10
python:
  description: >-
    The interpreter that located the package (O(python)); null with O(package_dir). The one that ran
    the import check is C(import_check.python).
  returned: always
  type: str
capability:
  description: Capability checked, or null when none was given and no GPU was found.
  returned: always
  type: str
capability_source:
  description: C(param), C(nvidia-smi), or C(none) with the reason in C(gpu_reason).
  returned: always
  type: str
gpu_reason:
  description: >-
    When nvidia-smi was asked (no O(capability), or O(import_check)): why it gave no GPU, or no
    capability (drivers before 510 list GPUs without one); null otherwise.
  returned: always
  type: str
variants:
  description: >-
    Every common_ops variant, keyed by subdirectory name (C(root) for the package-root file):
    C(path) (the file the loader would load), C(sass), C(ptx), C(other_files), and C(runs_on)
    (C(sass), C(ptx-jit), false, or null without a capability).
  returned: always
  type: dict
  sample:
    sm100: {path: /venv/.../sgl_kernel/sm100/common_ops.abi3.so, ptx: [], runs_on: sass, other_files: [],
            sass: [sm_80, sm_89, sm_90, sm_90a, sm_100f, sm_120a]}
selected_variant:
  description: Variant the upstream loader tries first for the capability, or null when none exists.
  returned: always
  type: str
  sample: sm100
selected_path:
  description: File of the selected variant.
  returned: always
  type: str
selected_covers:
  description: Whether the selected file can run on the capability; null without a capability.
  returned: always
  type: bool
message:
  description: What was selected and why it runs, or which file lacks code for the capability and what to do.
  returned: always
  type: str
  sample: "sm100/common_ops.abi3.so has no code for 12.1: sm_80 sm_89 sm_90 sm_90a sm_100f sm_120a ..."
import_check:
  description: With O(import_check), what importing torch then sgl_kernel did.
  returned: when O(import_check) is true
  type: dict
  contains:
    status:
      description: C(ok), C(failed) or C(skipped).
      type: str
    reason:
      description: Why the import was skipped (no usable GPU, or a package_dir not named sgl_kernel).
      type: str
    python:
      description: The interpreter that ran the import (O(python), else the one running this module).
      type: str
    torch_version:
      description: C(torch.__version__) there.
      type: str
    torch_cuda_version:
      description: C(torch.version.cuda) there; null for a CPU build.
      type: str
    cuda_available:
      description: C(torch.cuda.is_available()) there.
      type: bool
    torch_capability:
      description: Capability of torch's current device, which is what the loader picks by.
      type: str
    sgl_kernel_file:
      description: The C(sgl_kernel/__init__.py) that was imported.
      type: str
    loaded_file:
      description: The C(common_ops) file the loader loaded.
      type: str
    expected_path:
      description: >-
        The file the loader tries first for C(torch_capability) (no GPU in torch: its no-GPU choice),
        or null when the package has none.
      type: str
    loaded_expected:
      description: >-
        Whether C(loaded_file) is C(expected_path); false means the loader fell back (that file did
        not load) or loaded another package.
      type: bool
    error:
      description: The exception of a failed import or probe.
      type: str
    failed_at:
      description: C(import torch) or C(import sgl_kernel).
      type: str
    hint:
      description: >-
        What a known failure means and what to do (an C(undefined symbol) is a torch ABI mismatch),
        or null.
      type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.sgl_kernel_probe import SglKernelProbeError, check_sgl_kernel


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path"},
            "package_dir": {"type": "path"},
            "capability": {"type": "raw"},
            "import_check": {"type": "bool", "default": False},
            "nvidia_smi": {"type": "path"},
            "timeout": {"type": "int", "default": 120},
        },
        mutually_exclusive=[("python", "package_dir")],
        required_one_of=[("python", "package_dir")],
        supports_check_mode=True,
    )
    params = module.params
    if params["timeout"] <= 0:
        module.fail_json(msg=f"timeout must be a positive number of seconds, got {params['timeout']}")
    try:
        result = check_sgl_kernel(**params)
    except SglKernelProbeError as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"sgl_kernel_variants failed unexpectedly: {type(exc).__name__}: {exc}")
    for warning in result.pop("warnings"):
        module.warn(warning)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
