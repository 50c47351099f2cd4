#!/usr/bin/python
"""Ansible module: which GPU architectures binaries carry code for (see module_utils/cuda_fatbin)."""

DOCUMENTATION = r"""
---
module: cuda_binary_archs
short_description: Report the CUDA architectures that binaries carry device code for
description:
  - Reads the device code of ELF shared objects, object files, raw C(.cubin) and C(.fatbin) files from
    their fatbin headers only (memory-mapped; nothing is decompressed, no CUDA toolkit or GPU needed).
  - Reports per file the SASS arches, precise to the suffix (C(sm_90a), C(sm_100f), C(sm_120a)), the
    PTX arches (C(compute_90), C(compute_120f)) and LTO-IR entries where present.
  - With O(require), rates every file with device code on each capability. A cubin C(sm_XY) runs on the
    same major with minor >= Y, C(sm_XYa) only on exactly X.Y, C(sm_XYf) on its family; PTX
    C(compute_XY) is JIT-compiled for any capability >= X.Y, C(compute_XYa) only for X.Y.
  - Files without device code (host-only libraries, linker scripts) are listed with empty lists, not
    treated as errors. A missing path or a truncated or corrupt binary fails with a message naming it.
  - Read-only; never reports C(changed).
version_added: "0.1.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  paths:
    description:
      - Files and directories to scan. Directories are walked recursively for shared objects
        (C(*.so), C(*.so.N)), object files (C(*.o)), C(*.cubin) and C(*.fatbin); a file given
        directly is scanned whatever its name.
    type: list
    elements: path
    required: true
  require:
    description:
      - GPU compute capabilities every file with device code must run on, as strings
        (C("12.0"), C("120") or C("sm_120") all mean 12.0). Quote them in YAML. A capability that no
        known GPU has (a newer GPU) is rated by the same rules, with a warning.
    type: list
    elements: raw
    default: []
  fail_on_missing:
    description:
      - Fail when a file with device code cannot run on a capability of O(require). Defaults to
        C(true) when O(require) is given; set C(false) to only report.
    type: bool
attributes:
  check_mode:
    description: Can run in check mode; it changes nothing in either mode, so the answer is the same.
    support: full
  diff_mode:
    description: Returns no diff; it changes nothing.
    support: none
"""

EXAMPLES = r"""
- name: Check that torch and the kernel libraries run on Blackwell and Hopper
  cuda_binary_archs:
    paths:
      - /opt/sglang/venv/lib/python3.12/site-packages/torch/lib
      - /opt/sglang/venv/lib/python3.12/site-packages/sgl_kernel
    require: ["12.0", "9.0"]

- name: Only report which arches a build produced
  cuda_binary_archs:
    paths: [build/common_ops.abi3.so]
    require: ["12.0"]
    fail_on_missing: false
  register: kernel_archs

- name: Show files without code for 12.0
  ansible.builtin.debug:
    var: kernel_archs.missing["12.0"]
"""

RETURN = r"""
files:
  description:
    - One entry per scanned file, in walk order. C(runs_on) maps each required capability to
      C(sass) (a cubin runs there), C(ptx-jit) (only PTX, JIT-compiled by the driver at load) or
      C(false); it is empty for files without device code. LTO-IR alone runs nowhere until device-linked.
  returned: always
  type: list
  elements: dict
  contains:
    path:
      description: Path of the file as found.
      type: str
    sass:
      description: SASS arches, unique, sorted numerically.
      type: list
      elements: str
    ptx:
      description: PTX arches, unique, sorted numerically.
      type: list
      elements: str
    lto:
      description: LTO-IR arches (C(lto_90)); only present when the file has some.
      type: list
      elements: str
    runs_on:
      description: Capability to C(sass), C(ptx-jit) or C(false).
      type: dict
  sample:
    - path: /opt/venv/lib/python3.12/site-packages/sgl_kernel/sm100/common_ops.abi3.so
      sass: [sm_80, sm_90, sm_100a]
      ptx: []
      runs_on: {"12.0": false, "9.0": sass}
    - path: /opt/venv/lib/python3.12/site-packages/torch/lib/libc10.so
      sass: []
      ptx: []
      runs_on: {}
missing:
  description: For each required capability, the files with device code that cannot run there.
  returned: always
  type: dict
  sample: {"12.0": [/opt/venv/lib/python3.12/site-packages/sgl_kernel/sm100/common_ops.abi3.so], "9.0": []}
counts:
  description: Number of files scanned, with device code and without.
  returned: always
  type: dict
  contains:
    files:
      description: Files scanned.
      type: int
    with_device_code:
      description: Files with SASS, PTX or LTO-IR.
      type: int
    without_device_code:
      description: Files without any.
      type: int
  sample: {files: 14, with_device_code: 4, without_device_code: 10}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda_arch import ArchError, parse_requirements
from ansible.module_utils.cuda_binaries import inspect_binaries, missing_message
from ansible.module_utils.cuda_fatbin import FatbinError


def main():
    module = AnsibleModule(
        argument_spec={
            "paths": {"type": "list", "elements": "path", "required": True},
            "require": {"type": "list", "elements": "raw", "default": []},
            "fail_on_missing": {"type": "bool"},
        },
        supports_check_mode=True,
    )
    params = module.params
    if not params["paths"]:
        module.fail_json(msg="paths is empty: list at least one file or directory to scan")
    try:
        require, fail_on_missing, warnings = parse_requirements(params["require"], params["fail_on_missing"])
        for warning in warnings:
            module.warn(warning)
        report = inspect_binaries(params["paths"], require)
    except ArchError as exc:
        module.fail_json(msg=str(exc))
    except FatbinError as exc:
        module.fail_json(msg=f"cannot scan {exc}")
    except Exception as exc:  # never a traceback: say what failed and where
        module.fail_json(msg=f"cuda_binary_archs failed unexpectedly: {type(exc).__name__}: {exc}")
    result = {"changed": False, **report}
    message = missing_message(report)
    if message and fail_on_missing:
        module.fail_json(msg=message, **result)
    if not message:
        counts = report["counts"]
        message = f"scanned {counts['files']} files, {counts['with_device_code']} with device code"
        if report["missing"]:
            message += "; all of them run on " + ", ".join(report["missing"])
    module.exit_json(msg=message, **result)


if __name__ == "__main__":
    main()
