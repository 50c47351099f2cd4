"""What a host runs right now, in the shape of a lock (module_utils/stack_lock.py).

Read from the host itself, never from what a playbook meant to install: the stack ``current`` points to
and its manifest (``stack.json``, written by the stack role), the CUDA toolkit's ``nvcc --version``, the
driver (nvidia_smi), torch as the stack's interpreter reports it (torch_probe), every installed
distribution (python_dists) and the model unit file's sha256. snapshot.yml turns this into a lock;
verify.yml compares it with one.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import glob
import hashlib
import json
import os
import re

from ansible.module_utils.bounded_run import RunTimeout, run_bounded
from ansible.module_utils.nvidia_smi import gpu_facts
from ansible.module_utils.python_dists import DistributionsError, probe_distributions
from ansible.module_utils.torch_probe import TorchProbeError, probe_torch

KERNEL_PACKAGES = ("sglang-kernel", "sgl-kernel")
_NVCC_RELEASE = re.compile(r"release (\d+\.\d+), V([0-9.]+)")


class StackFactsError(Exception):
    """The stack in use cannot be read; the message says what to do."""


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def nvcc_version(nvcc, timeout=30):
    """{"toolkit_version": "13.0", "nvcc_version": "13.0.88", "nvcc": path}, versions None when absent."""
    result = {"toolkit_version": None, "nvcc_version": None, "nvcc": nvcc}
    if not nvcc or not os.access(nvcc, os.X_OK):
        return result
    try:
        returncode, stdout, _stderr = run_bounded([nvcc, "--version"], timeout)
    except (OSError, RunTimeout):
        return result
    match = _NVCC_RELEASE.search(stdout.decode("utf-8", "replace")) if returncode == 0 else None
    if match:
        result.update(toolkit_version=match.group(1), nvcc_version=match.group(2))
    return result


def read_manifest(stack_dir, name="stack.json"):
    """A JSON file of the stack (``stack.json``, written by the stack role; ``sgl_kernel.json``, the
    sgl_kernel role's record of the installed build) as a dict ({} when the stack has none)."""
    path = os.path.join(stack_dir, name)
    try:
        with open(path) as handle:
            return json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise StackFactsError(f"cannot read {path}: {exc}; the stack is damaged: rebuild it") from None


def current_stack(stack_root):
    """(name, directory) of the stack ``<root>/current`` points to, or (None, None)."""
    link = os.path.join(stack_root, "current")
    if not os.path.islink(link):
        return None, None
    directory = os.path.realpath(link)
    if not os.path.isdir(directory):
        raise StackFactsError(f"{link} points to {os.readlink(link)}, which does not exist; re-run "
                              "playbooks/site.yml or roll back to a stack that exists")
    return os.path.basename(directory), directory


def unit_facts(patterns):
    """{"path", "sha256"} of the model units: the first pattern (a path or a glob) that matches a file
    wins. One file: its path and sha256. Several (one unit per model): the pattern, and the sha256 of the
    sorted "<name> <sha256>" lines, so adding, removing or changing any model's unit changes it."""
    for pattern in patterns or ():
        files = sorted(path for path in glob.glob(pattern) if os.path.isfile(path))
        if len(files) == 1:
            return {"path": files[0], "sha256": file_sha256(files[0])}
        if files:
            lines = "".join(f"{os.path.basename(path)} {file_sha256(path)}\n" for path in files)
            return {"path": pattern, "sha256": hashlib.sha256(lines.encode()).hexdigest()}
    return {"path": None, "sha256": None}


def read(stack_root, nvcc=None, unit_paths=(), nvidia_smi=None, timeout=120):
    """(lock-shaped facts of the stack in use on this host, see the module's RETURN; the torch probe's
    whole answer, None when there is no stack or it has no torch): the answer (arch list, devices) lets a
    caller rate torch (torch_probe.rate_answer) without importing it again."""
    name, directory = current_stack(stack_root)
    manifest = read_manifest(directory) if directory else {}
    kernel_record = read_manifest(directory, "sgl_kernel.json") if directory else {}
    inputs = manifest.get("fingerprint_inputs") or {}
    gpu = gpu_facts(nvidia_smi)
    facts = {
        "stack": {"root": stack_root, "name": name, "path": directory,
                  "fingerprint": manifest.get("fingerprint"), "python": None},
        "profile": manifest.get("profile_name"),
        "target_capabilities": manifest.get("targets") or [],
        "cuda": nvcc_version(nvcc),
        "driver": {"version": gpu["driver_version"], "cuda_driver_version": gpu["cuda_driver_version"],
                   "capabilities": gpu["capabilities"]},
        "torch": {"version": None, "git_version": None, "cuda_version": None,
                  "index_url": (inputs.get("torch") or {}).get("index_url")},
        "sgl_kernel": {"package": None, "version": None,
                       "build_fingerprint": kernel_record.get("fingerprint")},
        "sglang": {"version": None},
        "unit": unit_facts(unit_paths),
        "distributions": [],
    }
    if not directory:
        return facts, None
    python = os.path.join(directory, "bin", "python")
    try:
        listing = probe_distributions(python, timeout=timeout)
    except DistributionsError as exc:
        raise StackFactsError(f"stack {name}: {exc}") from None
    facts["distributions"] = listing["distributions"]
    facts["stack"]["python"] = listing["python_version"]
    versions = {d["name"]: d["version"] for d in listing["distributions"]}
    for package in KERNEL_PACKAGES:
        if package in versions:
            facts["sgl_kernel"].update(package=package, version=versions[package])
            break
    facts["sglang"]["version"] = versions.get("sglang")
    if "torch" not in versions:
        return facts, None
    try:
        torch = probe_torch(python, timeout=timeout)
    except TorchProbeError as exc:
        raise StackFactsError(f"stack {name}: {exc}") from None
    facts["torch"].update(version=torch["torch_version"].split("+", 1)[0],
                          git_version=torch["git_version"], cuda_version=torch["cuda_version"])
    return facts, torch
