#!/usr/bin/python
"""Ansible module: the NVIDIA driver's state and what it needs (read-only)."""

DOCUMENTATION = r"""
---
module: nvidia_driver_facts
short_description: Check the NVIDIA driver against the CUDA branch rules and say whether a reboot is needed
description:
  - Reads the GPUs and the loaded kernel module (the same facts as C(gpu_facts)), the nvidia module on
    disk (C(modinfo nvidia)), the module flavour (open or proprietary), Secure Boot, the NVIDIA devices
    on the PCI bus (GPUs and NVSwitches) and whether nouveau is loaded.
  - Decides, from those facts and the policy given, the C(problems) a reboot cannot fix (branch too old
    for the CUDA major, proprietary modules on capability >= 10.0, GPUs on the PCI bus the driver does
    not see, an unsigned module under Secure Boot) and the C(reboot_reasons) a reboot (or module reload)
    fixes (loaded module differs from the installed one or from the user-space driver, nothing loaded,
    nouveau loaded).
  - Never changes anything.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  cuda_version:
    description: CUDA version the host must run (the profile's), for example V("13.0").
    type: str
    required: true
  min_branch:
    description: Minimum driver branch per CUDA major version.
    type: dict
    default: {"11": 450, "12": 525, "13": 580}
  branch:
    description: Branch that must be installed (after an install of that branch); empty means any
      branch new enough.
    type: str
    default: ""
  open_from:
    description: GPUs of this compute capability and newer need the open kernel modules.
    type: str
    default: "10.0"
  nvidia_smi:
    description: Path of nvidia-smi; default is found on PATH or in the usual install directories.
    type: path
  timeout:
    description: Seconds each external command (nvidia-smi, modinfo, mokutil) may take.
    type: int
    default: 30
  kernel_module_version_files:
    description: Files to read the loaded module's version from, first readable wins.
    type: list
    elements: path
    default: [/sys/module/nvidia/version, /proc/driver/nvidia/version]
  proc_version:
    description: File that names the loaded module's flavour ("Open Kernel Module" or not).
    type: path
    default: /proc/driver/nvidia/version
  modinfo:
    description: modinfo to run; default is found on PATH, /usr/sbin or /sbin.
    type: path
  efi_dir:
    description: EFI firmware directory; absent means legacy boot (no Secure Boot).
    type: path
    default: /sys/firmware/efi
  secure_boot_efivar:
    description: EFI variable holding the Secure Boot state.
    type: path
    default: /sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-e0a9f4c4a1d0
  pci_devices:
    description: Directory of PCI devices to scan for NVIDIA GPUs and NVSwitches.
    type: path
    default: /sys/bus/pci/devices
  nouveau_module:
    description: Directory that exists while nouveau is loaded.
    type: path
    default: /sys/module/nouveau
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
notes:
  - Supports check mode; the result is the same.
  - NVSwitches of HGX H100/H200/B200 baseboards are reached through NVLink management NICs and may not
    enumerate as NVIDIA PCI bridges; declare them in the inventory there (role nvidia_driver).
seealso:
  - module: gpu_facts
"""

EXAMPLES = r"""
- name: Check the driver for CUDA 13
  nvidia_driver_facts:
    cuda_version: "13.0"
  register: driver

- name: Stop when something is wrong
  ansible.builtin.assert:
    that: driver.problems | length == 0
    fail_msg: "{{ driver.problems | map(attribute='message') | join('; ') }}"
"""

RETURN = r"""
ok:
  description: No problem and no reboot needed.
  returned: always
  type: bool
problems:
  description: What is wrong and cannot be fixed by a reboot, with what to do.
  returned: always
  type: list
  elements: dict
  contains:
    code:
      description: One of no_driver, branch_too_old, branch_mismatch, proprietary_on_blackwell,
        secure_boot_unsigned, gpus_missing.
      type: str
    message:
      description: What is wrong and what to do.
      type: str
reboot_required:
  description: A reboot (or nvidia module reload) is needed before the driver is usable as installed.
  returned: always
  type: bool
reboot_reasons:
  description: Why a reboot is needed.
  returned: always
  type: list
  elements: str
driver_installed:
  description: Whether any NVIDIA driver (nvidia-smi or the kernel module) is present.
  returned: always
  type: bool
installed_version:
  description: Version the next boot runs (module on disk, else the user-space driver, else the loaded one).
  returned: always
  type: str
  sample: 580.95.05
installed_branch:
  description: Branch of C(installed_version).
  returned: always
  type: int
  sample: 580
installed_flavor:
  description: open or proprietary (module on disk, else the loaded one); null when unknown.
  returned: always
  type: str
loaded_version:
  description: Version of the loaded nvidia module; null when none is loaded.
  returned: always
  type: str
loaded_branch:
  description: Branch of C(loaded_version).
  returned: always
  type: int
loaded_flavor:
  description: open or proprietary, from /proc/driver/nvidia/version; null when none is loaded.
  returned: always
  type: str
user_space_version:
  description: Version of the user-space driver (nvidia-smi).
  returned: always
  type: str
required_branch:
  description: Minimum branch for C(cuda_version).
  returned: always
  type: int
  sample: 580
open_required_for:
  description: Capabilities on this host that need the open modules.
  returned: always
  type: list
  elements: str
secure_boot:
  description: Secure Boot state and where it was read.
  returned: always
  type: dict
  contains:
    enabled:
      description: true, false, or null when it cannot be read.
      type: bool
    source:
      description: Where the state was read.
      type: str
secure_boot_action:
  description: What to do about Secure Boot (sign, enrol with mokutil), else null.
  returned: always
  type: str
installed_module:
  description: The nvidia module on disk (modinfo), or null.
  returned: always
  type: dict
  contains:
    filename:
      description: Module file.
      type: str
    version:
      description: Module version.
      type: str
    flavor:
      description: open or proprietary, from its license.
      type: str
    signer:
      description: Signer of the module, null when unsigned.
      type: str
nouveau_loaded:
  description: Whether nouveau is loaded.
  returned: always
  type: bool
pci:
  description: NVIDIA devices on the PCI bus.
  returned: always
  type: dict
  contains:
    gpus:
      description: PCI addresses of NVIDIA GPUs (VGA or 3D controllers).
      type: list
      elements: str
    nvswitches:
      description: PCI addresses of NVIDIA bridges (NVSwitch).
      type: list
      elements: str
gpu:
  description: The C(gpu_facts) result (GPUs, driver versions, loaded module check).
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.nvidia_driver import (
    EFI_DIR,
    MIN_BRANCH_BY_CUDA_MAJOR,
    NOUVEAU_MODULE,
    OPEN_MODULES_FROM,
    PCI_DEVICES,
    PROC_VERSION,
    SECURE_BOOT_EFIVAR,
    DriverPolicyError,
    decide,
    installed_module,
    pci_inventory,
    read_loaded_flavor,
    secure_boot,
)
from ansible.module_utils.nvidia_smi import KERNEL_MODULE_VERSION_FILES, NvidiaSmiError, gpu_facts


def main():
    module = AnsibleModule(
        argument_spec={
            "cuda_version": {"type": "str", "required": True},
            "min_branch": {"type": "dict", "default": dict(MIN_BRANCH_BY_CUDA_MAJOR)},
            "branch": {"type": "str", "default": ""},
            "open_from": {"type": "str", "default": OPEN_MODULES_FROM},
            "nvidia_smi": {"type": "path"},
            "timeout": {"type": "int", "default": 30},
            "kernel_module_version_files": {"type": "list", "elements": "path",
                                            "default": list(KERNEL_MODULE_VERSION_FILES)},
            "proc_version": {"type": "path", "default": PROC_VERSION},
            "modinfo": {"type": "path"},
            "efi_dir": {"type": "path", "default": EFI_DIR},
            "secure_boot_efivar": {"type": "path", "default": SECURE_BOOT_EFIVAR},
            "pci_devices": {"type": "path", "default": PCI_DEVICES},
            "nouveau_module": {"type": "path", "default": NOUVEAU_MODULE},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["timeout"] <= 0:
        module.fail_json(msg=f"timeout must be a positive number of seconds, got {p['timeout']}")
    if p["branch"] and not p["branch"].isdigit():
        module.fail_json(msg=f"branch must be a driver branch number such as 580, got {p['branch']!r}")
    try:
        state = {
            "gpu": gpu_facts(p["nvidia_smi"], p["timeout"], p["kernel_module_version_files"]),
            "loaded_flavor": read_loaded_flavor(p["proc_version"]),
            "installed": installed_module(p["modinfo"], p["timeout"]),
            "secure_boot": secure_boot(p["secure_boot_efivar"], p["efi_dir"], timeout=p["timeout"]),
            "nouveau_loaded": os.path.isdir(p["nouveau_module"]),
            "pci": pci_inventory(p["pci_devices"]),
        }
        result = decide(state, {"cuda_version": p["cuda_version"], "min_branch": p["min_branch"],
                                "branch": p["branch"] or None, "open_from": p["open_from"]})
    except DriverPolicyError as exc:
        module.fail_json(msg=str(exc))
    except NvidiaSmiError as exc:
        module.fail_json(msg=f"{exc}; please report this output with the driver version")
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"nvidia_driver_facts failed unexpectedly: {type(exc).__name__}: {exc}")
    module.exit_json(changed=False, gpu=state["gpu"], installed_module=state["installed"],
                     secure_boot=state["secure_boot"], nouveau_loaded=state["nouveau_loaded"],
                     pci=state["pci"], **result)


if __name__ == "__main__":
    main()
