#!/usr/bin/python
"""Ansible module: scan an sgl_kernel wheel before it is installed and decide wheel or source (read-only)."""

DOCUMENTATION = r"""
---
module: sgl_kernel_wheel_check
short_description: Check that an sgl_kernel wheel runs on the target GPUs with the stack's torch
description:
  - Reads the wheel file without installing it. For every capability in O(capabilities), finds the
    C(common_ops) file that the upstream loader picks (C(sm90/) for 9.0, C(sm100/) for every other
    capability, then the package-root file) and reads its SASS and PTX arches from the fatbin headers.
  - Reads the wheel's C(Requires-Dist) torch pin; the C(.so) files are ABI-tied to that exact torch, so
    it must equal O(torch_version) (the local label such as C(+cu130) is ignored unless the pin has one).
  - With O(mode=wheel) a misfit fails, naming the file, the capability, the arches found and the torch
    pin. With O(mode=auto) the result says C(source) instead. With O(mode=source) the wheel is still
    scanned when given, and the choice is C(source).
  - Never changes anything.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  wheel:
    description:
      - Path of the wheel file on the host. May be omitted with O(mode=auto) or O(mode=source) when no
        wheel could be obtained; the choice is then C(source).
    type: path
  capabilities:
    description: Target compute capabilities as strings (V("12.0")).
    type: list
    elements: str
    required: true
  torch_version:
    description: The stack's torch version (V("2.14.1") or V("2.14.1+cu130")).
    type: str
    required: true
  mode:
    description: The install mode, C(sgl_kernel_install).
    type: str
    choices: [auto, wheel, source]
    default: auto
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
notes:
  - The wheel's C(.so) files are copied one at a time to a temporary directory to be read, then removed.
seealso:
  - module: sgl_kernel_variants
  - module: sgl_kernel_build
"""

EXAMPLES = r"""
- name: Scan the released wheel for the fleet's GPUs
  sgl_kernel_wheel_check:
    wheel: /tmp/sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl
    capabilities: ["12.0", "10.0"]
    torch_version: "2.14.1"
    mode: wheel
  register: sgl_kernel_scan
"""

RETURN = r"""
choice:
  description: C(wheel) (install this wheel) or C(source) (build from source).
  returned: always
  type: str
  sample: wheel
reason:
  description: Why, in one sentence.
  returned: always
  type: str
fits:
  description: The wheel runs on every capability with this torch; null when no wheel was given.
  returned: always
  type: bool
problems:
  description: One message per misfit (file, capability, arches found, torch pin).
  returned: always
  type: list
  elements: str
torch_pin:
  description: The exact torch version the wheel requires, or null.
  returned: when a wheel was given
  type: str
  sample: 2.14.1
variants:
  description: Per variant (C(sm90), C(sm100), C(root)), the file read and its C(sass) and C(ptx) arches.
  returned: when a wheel was given
  type: dict
capabilities:
  description: Per capability, the C(variant) the loader picks, its C(member) and C(runs_on) (C(sass),
    C(ptx-jit) or false).
  returned: when a wheel was given
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda_arch import ArchError, parse_capabilities
from ansible.module_utils.sgl_kernel_wheel import INSTALL_MODES, WheelError, decide_install, scan_wheel


def main():
    module = AnsibleModule(
        argument_spec={
            "wheel": {"type": "path"},
            "capabilities": {"type": "list", "elements": "str", "required": True},
            "torch_version": {"type": "str", "required": True},
            "mode": {"type": "str", "choices": list(INSTALL_MODES), "default": "auto"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        capabilities = parse_capabilities(params["capabilities"], known_only=False, param="capabilities")
        scan = scan_wheel(params["wheel"], capabilities, params["torch_version"]) if params["wheel"] else None
        choice, reason = decide_install(params["mode"], scan)
    except (ArchError, WheelError) as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"sgl_kernel_wheel_check failed unexpectedly: {type(exc).__name__}: {exc}")
    result = {"choice": choice, "reason": reason, "fits": scan["fits"] if scan else None,
              "problems": scan["problems"] if scan else []}
    if scan:
        result.update({k: scan[k] for k in ("torch_pin", "variants", "capabilities", "wheel", "version")})
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
