"""Find sgl_kernel in a Python environment without importing it, and (on a GPU host) import it for real.

Finding uses ``importlib.util.find_spec`` in the environment's own interpreter: for a top-level package
that reads the import path only, so no torch and no CUDA library is loaded. The import check does the
opposite on purpose: ``import torch`` then ``import sgl_kernel`` exactly as SGLang does, and reports which
``common_ops`` file the loader actually loaded or why it failed.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import os
import sys

from ansible.module_utils.cuda_arch import (
    ArchError,
    parse_capabilities,
    unknown_capability_warnings,
)
from ansible.module_utils.nvidia_smi import NvidiaSmiError, first_capability, gpu_facts
from ansible.module_utils.python_probe import ProbeError, run_probe
from ansible.module_utils.sgl_kernel_layout import LayoutError, inspect_layout, loader_choice

FIND_PROBE = r"""
import importlib.util
spec = importlib.util.find_spec("sgl_kernel")
if spec is None:
    answer({"found": False, "executable": sys.executable})
answer({"found": True, "executable": sys.executable, "origin": spec.origin,
        "locations": list(spec.submodule_search_locations or [])})
"""

# argv[1]: a directory to put first on sys.path ("" for none), so a given package_dir is what imports.
IMPORT_PROBE = r"""
if sys.argv[1]:
    sys.path.insert(0, sys.argv[1])
result = {"stage": "torch"}
try:
    import torch
    result["torch_version"] = str(torch.__version__)
    result["torch_cuda_version"] = getattr(torch.version, "cuda", None)
    result["cuda_available"] = bool(torch.cuda.is_available())
    if result["cuda_available"]:
        major, minor = torch.cuda.get_device_capability(torch.cuda.current_device())
        result["torch_capability"] = "%d.%d" % (major, minor)
    result["stage"] = "sgl_kernel"
    import sgl_kernel
    result["sgl_kernel_file"] = sgl_kernel.__file__
    result["loaded_file"] = getattr(getattr(sgl_kernel, "common_ops", None), "__file__", None)
    result["stage"] = "done"
except BaseException as exc:
    result["error"] = "%s: %s" % (type(exc).__name__, exc)
answer(result)
"""

# Substrings of import errors and what they mean, most specific first.
_DIAGNOSES = (
    ("undefined symbol", "torch ABI mismatch: sgl_kernel was built against a different torch than the "
                         "{torch} installed here; install the sglang-kernel release that pins this torch "
                         "(or the torch it pins), or rebuild sgl_kernel against this torch"),
    ("libcuda.so", "the NVIDIA driver library libcuda.so.1 is not loadable: install or repair the driver"),
    ("libcudart.so", "the CUDA runtime (libcudart) is not found: install torch's CUDA build, which brings "
                     "the nvidia-cuda-runtime wheel, or a CUDA toolkit"),
    ("libnvrtc", "the CUDA NVRTC library is not found: torch here lacks its CUDA libraries (a CPU build, "
                 "or the nvidia-cuda-nvrtc wheel is missing): install torch's CUDA build"),
    ("libnuma", "libnuma is missing: install the libnuma1 package"),
    ("Could not load any common_ops", "no common_ops variant could be loaded (see the error)"),
)


class SglKernelProbeError(Exception):
    """sgl_kernel cannot be located in that environment; the message says what to do."""


def locate_package(python, timeout=120):
    """(package_dir, interpreter) of sgl_kernel as the environment's import system would find it."""
    try:
        found = run_probe(python, FIND_PROBE, timeout=timeout, what="the sgl_kernel lookup")
    except ProbeError as exc:
        raise SglKernelProbeError(str(exc)) from None
    if not found["found"]:
        raise SglKernelProbeError(
            f"sgl_kernel is not installed for {found['executable']}; install sglang-kernel in that "
            "environment, or give package_dir to inspect an unpacked package")
    if not found["locations"]:
        raise SglKernelProbeError(f"sgl_kernel for {found['executable']} is a module ({found['origin']}), "
                                  "not the sglang-kernel package")
    return found["locations"][0], found["executable"]


def diagnose(error, torch_version, torch_cuda_version=None):
    if torch_version and not torch_cuda_version:
        return (f"torch {torch_version} here is not a CUDA build; sgl_kernel needs the CUDA build of the "
                "torch it pins")
    for needle, hint in _DIAGNOSES:
        if needle in error:
            return hint.format(torch=torch_version or "torch")
    return None


def run_import_check(python, package_dir=None, timeout=120):
    """Import torch then sgl_kernel in ``python``; report the loaded common_ops file or the failure.

    With ``package_dir`` its parent goes first on sys.path, so that directory is what gets imported.
    """
    parent = ""
    if package_dir:
        if os.path.basename(os.path.normpath(package_dir)) != "sgl_kernel":
            return {"status": "skipped", "reason": f"package_dir {package_dir} is not named sgl_kernel, so "
                    "Python cannot import it as sgl_kernel"}
        parent = os.path.dirname(os.path.normpath(package_dir))
    try:
        result = run_probe(python, IMPORT_PROBE, args=[parent], timeout=timeout,
                           what="import torch, sgl_kernel")
    except ProbeError as exc:
        return {"status": "failed", "python": python, "error": str(exc), "hint": None}
    result["python"] = python
    stage = result.pop("stage")
    result["status"] = "ok" if stage == "done" else "failed"
    if stage != "done":
        result["failed_at"] = "import torch" if stage == "torch" else "import sgl_kernel"
        result["hint"] = diagnose(result.get("error", ""), result.get("torch_version"),
                                  result.get("torch_cuda_version"))
    return result


def compare_with_loader(check, variants):
    """Add ``expected_path`` and ``loaded_expected`` to an import check that got past ``import torch``.

    The loader picks by torch's current device (no GPU: None), which need not be the capability that
    was checked statically (a parameter, or nvidia-smi's first GPU); so the expectation is recomputed.
    """
    if "torch_version" not in check:
        return
    expected, _why = loader_choice(variants, check.get("torch_capability"))
    check["expected_path"] = variants[expected]["path"] if expected else None
    loaded = check.get("loaded_file")
    if loaded:
        check["loaded_expected"] = bool(check["expected_path"]) and (
            os.path.realpath(loaded) == os.path.realpath(check["expected_path"]))


def check_sgl_kernel(*, python=None, package_dir=None, capability=None, import_check=False,
                     nvidia_smi=None, timeout=120, import_python=None):
    """Everything sgl_kernel_variants returns; raises SglKernelProbeError for bad input.

    ``import_python`` is the interpreter for the import check when only ``package_dir`` is given
    (default: the interpreter running this code).
    """
    if bool(python) == bool(package_dir):
        raise SglKernelProbeError("give exactly one of python (the environment's interpreter) and "
                                  "package_dir (an sgl_kernel directory)")
    source = "param"
    result = {"python": None, "warnings": []}
    if capability is not None:
        try:
            (capability,) = parse_capabilities([capability], known_only=False, param="capability")
        except ArchError as exc:
            raise SglKernelProbeError(str(exc)) from None
        result["warnings"] = unknown_capability_warnings([capability])
    if python:
        package_dir, result["python"] = locate_package(python, timeout)
    gpu = None
    if capability is None or import_check:  # nvidia-smi only when needed
        try:
            gpu = gpu_facts(nvidia_smi, timeout=min(timeout, 30))
        except NvidiaSmiError as exc:
            raise SglKernelProbeError(f"{exc}; please report this output with the driver version") from None
    if capability is None:
        capability = first_capability(gpu)
        source = "nvidia-smi" if capability else "none"
    try:
        result.update(inspect_layout(package_dir, capability))
    except LayoutError as exc:
        raise SglKernelProbeError(str(exc)) from None
    result["capability_source"] = source
    result["gpu_reason"] = gpu["reason"] if gpu else None
    if source == "none" and gpu["present"]:
        result["gpu_reason"] = (f"nvidia-smi lists {len(gpu['gpus'])} GPU(s) but no compute capability "
                                "(drivers before 510 cannot report it); give capability")
    if import_check:
        if not gpu["present"]:
            result["import_check"] = {"status": "skipped",
                                      "reason": f"no usable GPU on this host ({gpu['reason']}); "
                                                "sgl_kernel cannot be imported without the driver"}
        else:
            check = run_import_check(result["python"] or import_python or sys.executable,
                                     None if python else package_dir, timeout)
            compare_with_loader(check, result["variants"])
            result["import_check"] = check
    return result
