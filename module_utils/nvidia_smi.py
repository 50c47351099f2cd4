"""GPU facts from nvidia-smi and the loaded NVIDIA kernel module.

A host without nvidia-smi, without a loaded driver, or with a driver that cannot talk to its GPUs is a
normal answer here (``present: False`` plus ``reason``), not an error: callers decide whether they need a
GPU. The kernel-module check catches the classic state after a driver upgrade without reboot, where the
user-space libraries (and nvidia-smi) are newer than the module the kernel still runs.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import csv
import os
import re
import shutil

from ansible.module_utils.bounded_run import RunTimeout, run_bounded
from ansible.module_utils.cuda_arch import ArchError, capability_tuple, parse_capability

QUERY_FIELDS = ("index", "name", "uuid", "compute_cap", "memory.total", "pci.bus_id", "driver_version")
QUERY_ARGS = ("--format=csv,noheader,nounits",)
# The loaded module's version: /sys for every module flavour, /proc as the older, always-present place.
KERNEL_MODULE_VERSION_FILES = ("/sys/module/nvidia/version", "/proc/driver/nvidia/version")
# Where distributions and the .run installer put nvidia-smi when PATH (e.g. Ansible's) lacks it.
FALLBACK_DIRS = ("/usr/bin", "/usr/local/bin", "/usr/local/nvidia/bin", "/opt/nvidia/bin")

_VERSION_RE = re.compile(r"\b(\d{3,}\.\d+(?:\.\d+)?)\b")
_CUDA_RE = re.compile(r"CUDA Version\s*:\s*(\d+\.\d+)")
_NVML_LIB_RE = re.compile(r"NVML library version:\s*(\d+\.\d+(?:\.\d+)?)")
_SMI_RE = re.compile(r"NVIDIA-SMI(?: version)?\s*:?\s*(\d+\.\d+(?:\.\d+)?)")
_NOT_AVAILABLE = ("[N/A]", "N/A", "[Not Supported]", "[Unknown Error]", "")


class NvidiaSmiError(Exception):
    """nvidia-smi answered with something this module cannot parse (a bug to report, not a state)."""


def find_nvidia_smi(path=None):
    """Path of nvidia-smi: ``path`` itself when given (a bare name is looked up on PATH; None if it is not
    an executable), else nvidia-smi on PATH, then in the usual install directories."""
    if path and os.sep not in path:
        return shutil.which(path)
    if path:
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else None
    found = shutil.which("nvidia-smi")
    if found:
        return found
    for directory in FALLBACK_DIRS:
        candidate = os.path.join(directory, "nvidia-smi")
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def read_kernel_module_version(paths=KERNEL_MODULE_VERSION_FILES):
    """(version, path) of the loaded nvidia kernel module, or (None, None) when none is loaded."""
    for path in paths:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            continue
        # /sys: "580.95.05"; /proc: "NVRM version: NVIDIA UNIX ... Kernel Module  580.95.05  <date>".
        if "NVRM" in text:
            text = text.split("Kernel Module", 1)[-1]
        match = _VERSION_RE.search(text)
        if match:
            return match.group(1), path
    return None, None


def _value(text):
    text = text.strip()
    return None if text in _NOT_AVAILABLE else text


def _capability(text):
    text = _value(text)
    if text is None:
        return None
    try:
        return parse_capability(text, known_only=False)
    except ArchError as exc:
        raise NvidiaSmiError(f"nvidia-smi reported compute capability {text!r}: {exc}") from None


def parse_query(text, fields=QUERY_FIELDS):
    """GPU dicts from ``--query-gpu=<fields> --format=csv,noheader,nounits`` output."""
    gpus = []
    for row in csv.reader(text.splitlines(), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(fields):
            raise NvidiaSmiError(f"unexpected nvidia-smi line (want {len(fields)} fields "
                                 f"{','.join(fields)}): {','.join(row)!r}")
        raw = dict(zip(fields, row))
        memory = _value(raw["memory.total"])
        try:
            gpus.append({
                "index": int(raw["index"]),
                "name": _value(raw["name"]),
                "uuid": _value(raw["uuid"]),
                "capability": _capability(raw["compute_cap"]) if "compute_cap" in raw else None,
                "memory_total_mib": int(float(memory)) if memory is not None else None,
                "pci_bus_id": _value(raw["pci.bus_id"]),
                "driver_version": _value(raw["driver_version"]),
            })
        except ValueError as exc:
            raise NvidiaSmiError(f"unexpected nvidia-smi line {','.join(row)!r}: {exc}") from None
    return gpus


def parse_banner(text):
    """(user-space version, CUDA driver version) from the banner of plain ``nvidia-smi``.

    "| NVIDIA-SMI 580.95.05    Driver Version: 580.95.05    CUDA Version: 13.0 |": NVIDIA-SMI is the
    user-space tools' version, Driver Version the kernel module's, CUDA Version the newest CUDA runtime
    this driver supports.
    """
    smi, cuda = _SMI_RE.search(text), _CUDA_RE.search(text)
    return (smi.group(1) if smi else None), (cuda.group(1) if cuda else None)


def _run(argv, timeout):
    """(rc, combined output) or (None, reason) when it could not run in time."""
    try:
        returncode, output, _stderr = run_bounded(argv, timeout, merge_stderr=True)
    except RunTimeout as exc:
        return None, (f"{argv[0]} did not answer within {timeout} s (a hung GPU or driver? check dmesg "
                      "for Xid errors)" + (f"; {exc.leftover}" if exc.leftover else ""))
    except OSError as exc:
        return None, f"cannot run {argv[0]}: {exc}"
    return returncode, output.decode("utf-8", "replace").strip()


def _failure(output, rc):
    """(reason, whether the loaded kernel module differs from the user-space driver) of a failed call."""
    first = output.splitlines()[0] if output else f"exit status {rc}"
    if "couldn't communicate with the NVIDIA driver" in output:
        return f"the NVIDIA driver is not loaded: {first}", False
    if "Driver/library version mismatch" in output:
        return ("the loaded NVIDIA kernel module does not match the user-space driver (Driver/library "
                "version mismatch): reboot or reload the nvidia modules"), True
    if "No devices were found" in output:
        return "the NVIDIA driver is loaded but sees no GPU (No devices were found)", False
    return f"nvidia-smi failed (exit status {rc}): {output[-500:] if output else 'no output'}", False


def gpu_facts(nvidia_smi=None, timeout=30, module_version_files=KERNEL_MODULE_VERSION_FILES):
    """Facts dict: present, reason, gpus, capabilities, driver versions, kernel module check."""
    module_version, module_version_file = read_kernel_module_version(module_version_files)
    facts = {"present": False, "reason": None, "gpus": [], "capabilities": [], "nvidia_smi": None,
             "driver_version": None, "user_space_driver_version": None, "cuda_driver_version": None,
             "kernel_module_version": module_version, "kernel_module_version_file": module_version_file,
             "kernel_module_mismatch": None, "reload_required": False, "reload_reason": None}
    binary = find_nvidia_smi(nvidia_smi)
    if binary is None:
        if not nvidia_smi:
            facts["reason"] = "nvidia-smi not found on PATH (no NVIDIA driver installed)"
        elif os.sep in nvidia_smi:
            facts["reason"] = f"nvidia-smi not found at {nvidia_smi}"
        else:
            facts["reason"] = f"{nvidia_smi} not found on PATH"
        return facts
    facts["nvidia_smi"] = binary
    fields = QUERY_FIELDS
    rc, output = _run([binary, "--query-gpu=" + ",".join(fields), *QUERY_ARGS], timeout)
    if rc is not None and rc != 0 and "compute_cap" in output and "valid field" in output:
        # Drivers before 510 cannot report compute_cap; keep the other facts.
        fields = tuple(f for f in QUERY_FIELDS if f != "compute_cap")
        rc, output = _run([binary, "--query-gpu=" + ",".join(fields), *QUERY_ARGS], timeout)
    if rc is None:
        facts["reason"] = output
        return facts
    if rc != 0:
        facts["reason"], mismatch = _failure(output, rc)
        if mismatch:
            library = _NVML_LIB_RE.search(output)
            facts["user_space_driver_version"] = library.group(1) if library else None
            facts["kernel_module_mismatch"] = True
            facts["reload_required"] = True
            facts["reload_reason"] = facts["reason"]
        return facts
    gpus = parse_query(output, fields)
    if not gpus:
        facts["reason"] = "nvidia-smi lists no GPU"
        return facts
    facts.update(present=True, gpus=gpus, driver_version=gpus[0]["driver_version"])
    facts["capabilities"] = sorted({g["capability"] for g in gpus if g["capability"]}, key=capability_tuple)
    rc, banner = _run([binary], timeout)
    if rc == 0:
        facts["user_space_driver_version"], facts["cuda_driver_version"] = parse_banner(banner)
    user_space = facts["user_space_driver_version"] or facts["driver_version"]
    if module_version and user_space:
        facts["kernel_module_mismatch"] = module_version != user_space
        facts["reload_required"] = facts["kernel_module_mismatch"]
        if facts["reload_required"]:
            facts["reload_reason"] = (f"kernel module {module_version} is loaded but the user-space "
                                      f"driver is {user_space}: reboot or reload the nvidia modules")
    return facts


def first_capability(facts):
    """Capability of the first GPU (nvidia-smi index order), or None."""
    for gpu in sorted(facts.get("gpus") or [], key=lambda g: g["index"]):
        if gpu.get("capability"):
            return gpu["capability"]
    return None
