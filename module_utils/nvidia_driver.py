"""NVIDIA driver state and the decision on it: branch rules, kernel module flavour, loaded vs installed,
Secure Boot, NVSwitch, every GPU visible.

The GPU and loaded-module facts come from ``nvidia_smi.gpu_facts`` (which already compares the loaded
module with the user-space driver); this module adds what is on disk (``modinfo nvidia``), the module
flavour (open or proprietary), the host's firmware and PCI view, and ``decide()``: a pure function from
that state and a policy to problems (what a reboot cannot fix) and reboot reasons (what it can).

Rules (sources in roles/nvidia_driver/README.md):
- minimum driver branch per CUDA major (CUDA minor version compatibility): 11 -> 450, 12 -> 525, 13 -> 580;
- GPUs of capability >= 10.0 (Blackwell) run only with the open kernel modules.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import os
import re
import shutil

from ansible.module_utils.bounded_run import RunTimeout, run_bounded
from ansible.module_utils.cuda_arch import capability_tuple

MIN_BRANCH_BY_CUDA_MAJOR = {"11": 450, "12": 525, "13": 580}
OPEN_MODULES_FROM = "10.0"
PROC_VERSION = "/proc/driver/nvidia/version"
EFI_DIR = "/sys/firmware/efi"
# EFI global variable GUID; the file holds 4 bytes of attributes, then the value (1 = enabled).
SECURE_BOOT_EFIVAR = EFI_DIR + "/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-e0a9f4c4a1d0"
PCI_DEVICES = "/sys/bus/pci/devices"
NOUVEAU_MODULE = "/sys/module/nouveau"
NVIDIA_VENDOR = "0x10de"
# PCI class codes (class, subclass): 03 00 VGA, 03 02 3D controller (data-centre GPUs); 06 80 "other
# bridge" is how NVSwitch chips enumerate on HGX A100/H100-era baseboards.
GPU_CLASSES = ("0x0300", "0x0302")
NVSWITCH_CLASS = "0x0680"

_BRANCH_RE = re.compile(r"^(\d{3,})\.")
_MODINFO_RE = re.compile(r"^(filename|version|license|signer|sig_key):\s*(.*)$")


class DriverPolicyError(Exception):
    """The policy asked for is not one this module can apply (a wrong input, not a host state)."""


def branch_of(version):
    """580 for "580.95.05"; None for None or an unparsable version."""
    match = _BRANCH_RE.match(version or "")
    return int(match.group(1)) if match else None


def flavor_from_proc(text):
    """'open' or 'proprietary' from /proc/driver/nvidia/version, None when it names neither.

    Open:        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build ..."
    Proprietary: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 ..."
    """
    first = (text or "").splitlines()[0] if text else ""
    if "NVRM" not in first:
        return None
    return "open" if "Open Kernel Module" in first else "proprietary"


def flavor_from_license(license_text):
    """The open modules are dual MIT/GPL; the proprietary ones say "NVIDIA"."""
    if not license_text:
        return None
    return "open" if "GPL" in license_text else "proprietary"


def read_loaded_flavor(path=PROC_VERSION):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return flavor_from_proc(handle.read())
    except OSError:
        return None


def parse_modinfo(text):
    """{filename, version, flavor, signer} of ``modinfo nvidia`` output."""
    fields = {}
    for line in (text or "").splitlines():
        match = _MODINFO_RE.match(line.strip())
        if match and match.group(1) not in fields:
            fields[match.group(1)] = match.group(2).strip()
    if not fields.get("version"):
        return None
    return {"filename": fields.get("filename"), "version": fields["version"],
            "flavor": flavor_from_license(fields.get("license")), "signer": fields.get("signer") or None}


def installed_module(modinfo=None, timeout=30):
    """The nvidia module the next boot (or modprobe) loads, from ``modinfo nvidia``; None when there is
    none or modinfo cannot tell (no kmod, a distribution that keeps modules elsewhere)."""
    binary = modinfo or shutil.which("modinfo") or next(
        (p for p in ("/usr/sbin/modinfo", "/sbin/modinfo") if os.access(p, os.X_OK)), None)
    if not binary:
        return None
    try:
        returncode, output, _stderr = run_bounded([binary, "nvidia"], timeout)
    except (RunTimeout, OSError):
        return None
    if returncode != 0:
        return None
    return parse_modinfo(output.decode("utf-8", "replace"))


def secure_boot(efivar=SECURE_BOOT_EFIVAR, efi_dir=EFI_DIR, mokutil=None, timeout=10):
    """{enabled: bool or None, source}: the EFI variable first (no tool needed), then mokutil."""
    if not os.path.isdir(efi_dir):
        return {"enabled": False, "source": "no EFI firmware (legacy boot has no Secure Boot)"}
    try:
        with open(efivar, "rb") as handle:
            data = handle.read()
        if len(data) >= 5:
            return {"enabled": data[4] == 1, "source": efivar}
    except OSError:
        pass
    binary = mokutil or shutil.which("mokutil")
    if binary:
        try:
            _rc, output, _stderr = run_bounded([binary, "--sb-state"], timeout, merge_stderr=True)
            text = output.decode("utf-8", "replace")
            if "SecureBoot enabled" in text:
                return {"enabled": True, "source": "mokutil --sb-state"}
            if "SecureBoot disabled" in text or "doesn't support Secure Boot" in text:
                return {"enabled": False, "source": "mokutil --sb-state"}
        except (RunTimeout, OSError):
            pass
    return {"enabled": None, "source": "unknown (no readable SecureBoot EFI variable, no mokutil)"}


def _read(path):
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return ""


def pci_inventory(root=PCI_DEVICES):
    """{gpus: [bus ids], nvswitches: [bus ids]}: NVIDIA devices as the PCI bus sees them, driver or not."""
    found = {"gpus": [], "nvswitches": []}
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return found
    for entry in entries:
        if _read(os.path.join(root, entry, "vendor")).lower() != NVIDIA_VENDOR:
            continue
        device_class = _read(os.path.join(root, entry, "class")).lower()[:6]
        if device_class in GPU_CLASSES:
            found["gpus"].append(entry)
        elif device_class == NVSWITCH_CLASS:
            found["nvswitches"].append(entry)
    return found


def required_branch(cuda_version, minimums=None):
    """Minimum driver branch for a CUDA version ("13.0" -> 580)."""
    table = {str(k): int(v) for k, v in (minimums or MIN_BRANCH_BY_CUDA_MAJOR).items()}
    major = str(cuda_version or "").split(".")[0]
    if major not in table:
        raise DriverPolicyError(f"no minimum driver branch known for CUDA {cuda_version!r} (known majors: "
                                f"{', '.join(sorted(table))}); add it to nvidia_driver_min_branch")
    return table[major]


def _problem(code, message):
    return {"code": code, "message": message}


def decide(state, policy):
    """What the driver needs on this host. Pure: ``state`` and ``policy`` dicts in, a dict out.

    state: gpu (a gpu_facts dict), loaded_flavor, installed (parse_modinfo dict or None),
           secure_boot ({enabled}), nouveau_loaded (bool), pci ({gpus, nvswitches}).
    policy: cuda_version, min_branch (dict, optional), branch (the branch that must be installed, or
            None for "any new enough"), open_from (capability string).
    """
    gpu = state.get("gpu") or {}
    installed = state.get("installed") or {}
    pci = state.get("pci") or {"gpus": [], "nvswitches": []}
    loaded_version = gpu.get("kernel_module_version")
    user_space = gpu.get("user_space_driver_version") or gpu.get("driver_version")
    # What the next boot runs: the module on disk when modinfo sees one, else what runs now.
    installed_version = installed.get("version") or user_space or loaded_version
    installed_flavor = installed.get("flavor") or state.get("loaded_flavor")
    need = required_branch(policy.get("cuda_version"), policy.get("min_branch"))
    wanted = policy.get("branch")
    open_from = policy.get("open_from") or OPEN_MODULES_FROM
    blackwell = sorted({c for c in gpu.get("capabilities") or []
                        if capability_tuple(c) >= capability_tuple(open_from)}, key=capability_tuple)
    problems, reboot = [], []
    out = {"installed_version": installed_version, "installed_branch": branch_of(installed_version),
           "installed_flavor": installed_flavor, "loaded_version": loaded_version,
           "loaded_branch": branch_of(loaded_version), "loaded_flavor": state.get("loaded_flavor"),
           "user_space_version": user_space, "required_branch": need, "open_required_for": blackwell,
           "driver_installed": bool(installed_version or gpu.get("nvidia_smi"))}

    if not out["driver_installed"]:
        problems.append(_problem("no_driver", "no NVIDIA driver is installed (no nvidia-smi, no nvidia "
                                 "kernel module): install it with nvidia_driver_method: apt"))
    elif out["installed_branch"] is None:
        pass  # no version readable: nvidia-smi installed, no module loaded (a reboot reason below)
    elif out["installed_branch"] < need:
        problems.append(_problem("branch_too_old", (
            f"driver {installed_version} (branch {out['installed_branch']}) is too old for CUDA "
            f"{policy.get('cuda_version')}, which needs branch >= {need}: install a newer branch "
            f"(nvidia_driver_method: apt, nvidia_driver_branch >= {need})")))
    if wanted and out["installed_branch"] is not None and out["installed_branch"] != int(wanted):
        problems.append(_problem("branch_mismatch", (
            f"driver {installed_version} is installed but nvidia_driver_branch is {wanted}")))
    if blackwell and installed_flavor == "proprietary":
        problems.append(_problem("proprietary_on_blackwell", (
            f"the proprietary nvidia kernel modules are installed but GPUs of capability "
            f"{', '.join(blackwell)} (Blackwell) run only with the open modules: install the open "
            f"flavour (nvidia_driver_method: apt installs it)")))

    if gpu.get("reload_required"):
        reboot.append(gpu.get("reload_reason") or "the loaded module differs from the user-space driver")
    if installed.get("version") and loaded_version and installed["version"] != loaded_version \
            and not gpu.get("reload_required"):
        reboot.append(f"kernel module {installed['version']} is installed but {loaded_version} is loaded")
    loaded_flavor = state.get("loaded_flavor")
    if installed.get("flavor") and loaded_flavor and installed["flavor"] != loaded_flavor:
        reboot.append(f"the {installed['flavor']} kernel modules are installed but the "
                      f"{loaded_flavor} ones are loaded")
    if out["driver_installed"] and not loaded_version:
        what = f"kernel module {installed['version']}" if installed.get("version") else "nvidia-smi"
        reboot.append(f"{what} is installed but no nvidia kernel module is loaded")
    if state.get("nouveau_loaded") and out["driver_installed"]:
        reboot.append("nouveau is loaded (blacklisted for the next boot)")

    sb = (state.get("secure_boot") or {}).get("enabled")
    out["secure_boot_action"] = None
    if sb and installed and not installed.get("signer") and not loaded_version:
        out["secure_boot_action"] = (
            "Secure Boot is on and the installed nvidia module is not signed, so the kernel will refuse "
            "it: sign it (DKMS signs with /var/lib/dkms/mok.key when that key exists: reinstall the "
            "driver's dkms package after creating it) and enrol the key with `mokutil --import "
            "/var/lib/dkms/mok.pub`, then confirm the enrolment in the MOK manager on the console at the "
            "next boot; or turn Secure Boot off in the firmware")
        problems.append(_problem("secure_boot_unsigned", out["secure_boot_action"]))
    elif sb and not loaded_version:
        out["secure_boot_action"] = (
            "Secure Boot is on: the nvidia module loads only if its signing key is enrolled (mokutil "
            "--list-enrolled); a new DKMS key needs `mokutil --import /var/lib/dkms/mok.pub` and a "
            "confirmation on the console at the next boot")

    visible = len(gpu.get("gpus") or [])
    if loaded_version and not gpu.get("reload_required") and len(pci["gpus"]) > visible:
        problems.append(_problem("gpus_missing", (
            f"the PCI bus has {len(pci['gpus'])} NVIDIA GPU(s) ({', '.join(pci['gpus'])}) but the driver "
            f"sees {visible}" + (f" ({gpu.get('reason')})" if gpu.get("reason") else "")
            + ": check dmesg for Xid/RmInit errors, and fabric manager on NVSwitch systems")))
    out.update(problems=problems, reboot_required=bool(reboot), reboot_reasons=reboot,
               ok=not problems and not reboot)
    return out
