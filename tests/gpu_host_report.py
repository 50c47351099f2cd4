#!/usr/bin/env python3
"""Run the gpu_facts, torch_cuda_archs and sgl_kernel_variants logic on a real GPU host, beside
nvidia-smi's and torch's own answers, and print one JSON report.

Needs only python3 (and torch in the inspected interpreter): no Ansible, no network. The module_utils
are imported straight from this checkout, the code the modules ship.

  python3 tests/gpu_host_report.py [--python PY] [--package-dir DIR/sgl_kernel] [--record DIR]

--record DIR also writes DIR in the layout of tests/stand_ins/nvidia-smi-recordings/ (nvidia-smi's raw
answers, /proc/driver/nvidia/version, torch's devices) so the capture can be replayed by the tests.

On this machine, --stage DIR unpacks what --package-dir needs from the cached sglang-kernel wheel
(python files and the sm90/sm100 common_ops, ~25 MB) into DIR, for carrying to the GPU host.
"""

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
import types
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TORCH_OWN = r"""
import json, torch
devices = []
if torch.cuda.is_available():
    for i in range(torch.cuda.device_count()):
        major, minor = torch.cuda.get_device_capability(i)
        devices.append({"index": i, "name": torch.cuda.get_device_name(i), "capability": f"{major}.{minor}"})
flags = getattr(torch._C, "_cuda_getArchFlags", None)
print(json.dumps({
    "torch.__version__": torch.__version__, "torch.version.cuda": torch.version.cuda,
    "torch.version.git_version": torch.version.git_version,
    "torch.cuda.is_available()": torch.cuda.is_available(),
    "torch.cuda.get_arch_list()": torch.cuda.get_arch_list(),
    "torch._C._cuda_getArchFlags()": flags() if flags else None,
    "torch.cuda.current_device()": torch.cuda.current_device() if torch.cuda.is_available() else None,
    "devices": devices,
}))
"""


def import_module_utils():
    """Make ``ansible.module_utils.<name>`` resolve to this checkout's module_utils/, Ansible or not."""
    try:
        from ansible import module_utils  # noqa: PLC0415
    except ImportError:
        ansible = types.ModuleType("ansible")
        ansible.__path__ = []
        module_utils = types.ModuleType("ansible.module_utils")
        module_utils.__path__ = []
        ansible.module_utils = module_utils
        sys.modules.update({"ansible": ansible, "ansible.module_utils": module_utils})
    if str(REPO / "module_utils") not in module_utils.__path__:
        module_utils.__path__.append(str(REPO / "module_utils"))


def section(report, name, func):
    """Run one part; a failure is recorded in the report, never the end of it."""
    started = time.monotonic()
    try:
        report[name] = func()
    except Exception as exc:
        report[name] = {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    report.setdefault("seconds", {})[name] = round(time.monotonic() - started, 3)


def run(argv, timeout=120):
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"argv": argv, "rc": None, "error": str(exc)}
    return {"argv": argv, "rc": done.returncode, "stdout": done.stdout, "stderr": done.stderr}


def nvidia_smi_own():
    """nvidia-smi's raw answers to the calls gpu_facts makes (the query with its own constants)."""
    from ansible.module_utils.nvidia_smi import QUERY_ARGS, QUERY_FIELDS  # noqa: PLC0415

    smi = shutil.which("nvidia-smi")
    if not smi:
        return {"error": "nvidia-smi not on PATH"}
    query = [smi, "--query-gpu=" + ",".join(QUERY_FIELDS), *QUERY_ARGS]
    return {"query": run(query), "banner": run([smi]), "version": run([smi, "--version"])}


def torch_own(python):
    answer = run([python, "-c", TORCH_OWN], timeout=300)
    if answer.get("rc") != 0:
        return answer
    return json.loads(answer["stdout"].strip().splitlines()[-1])


def agreement(report):
    """Our modules' answers against torch's and nvidia-smi's own: True/False, None when there is nothing
    independent to compare (no GPU seen by either; an empty get_arch_list())."""
    facts, torch = report.get("gpu_facts", {}), report.get("torch_own", {})
    archs, variants = report.get("torch_cuda_archs", {}), report.get("sgl_kernel_variants", {})
    ours = sorted((g["name"], g["capability"]) for g in facts.get("gpus", []))
    theirs = sorted((d["name"], d["capability"]) for d in torch.get("devices", []))
    # get_arch_list() is the public API, a different path from the _cuda_getArchFlags() our probe reads;
    # it answers on GPU hosts (and without a GPU from torch 2.13), else [].
    torch_list = torch.get("torch.cuda.get_arch_list()")
    return {
        "gpu_facts_devices_equal_torch_devices": ours == theirs if ours or theirs else None,
        "torch_cuda_archs_arch_list_equals_torch":
            archs.get("arch_list") == torch_list if torch_list else None,
        # the file the loader picks for torch's current device (import_check.expected_path)
        "sgl_kernel_loaded_the_expected_file": variants.get("import_check", {}).get("loaded_expected"),
    }


def record(directory, report):
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    own = report.get("nvidia_smi_own", {})
    for call in ("query", "banner"):
        if call in own and own[call].get("rc") is not None:
            (directory / f"{call}.txt").write_text(own[call]["stdout"] + own[call]["stderr"])
            if own[call]["rc"]:
                (directory / f"{call}.rc").write_text(f"{own[call]['rc']}\n")
    if os.path.exists("/proc/driver/nvidia/version"):
        shutil.copyfile("/proc/driver/nvidia/version", directory / "proc-driver-nvidia-version.txt")
    if report.get("torch_own", {}).get("devices"):
        devices = json.dumps(report["torch_own"]["devices"], indent=1)
        (directory / "torch-devices.json").write_text(devices + "\n")
    (directory / "provenance.txt").write_text(
        f"captured by tests/gpu_host_report.py on {platform.node()} at "
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}; "
        f"torch {report.get('torch_own', {}).get('torch.__version__')}\n")


def stage(directory):
    """Unpack the sglang-kernel wheel's python files and common_ops variants (tests' wheel cache)."""
    sys.path.insert(0, str(REPO / "tests"))
    from sglkernel import extract  # noqa: PLC0415

    members = extract(Path(directory), lambda m: m.endswith(".py") or "/common_ops." in m
                      or m.endswith("spatial_ops.abi3.so"))
    size = sum(f.stat().st_size for f in Path(directory).rglob("*") if f.is_file())
    print(f"staged {len(members)} files, {size / 2**20:.1f} MiB: {Path(directory) / 'sgl_kernel'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter with torch (default: this one)")
    parser.add_argument("--package-dir", help="an sgl_kernel directory to check (e.g. carried)")
    parser.add_argument("--record", metavar="DIR", help="also write a replayable nvidia-smi recording")
    parser.add_argument("--stage", metavar="DIR", help="(build machine) unpack the wheel parts to carry")
    args = parser.parse_args()
    if args.stage:
        stage(args.stage)
        return
    import_module_utils()
    from ansible.module_utils.nvidia_smi import gpu_facts  # noqa: PLC0415
    from ansible.module_utils.sgl_kernel_probe import check_sgl_kernel  # noqa: PLC0415
    from ansible.module_utils.torch_probe import check_requirements, inspect_torch  # noqa: PLC0415

    report = {"host": {"node": platform.node(), "python": args.python, "report_python": sys.version}}
    section(report, "nvidia_smi_own", nvidia_smi_own)
    section(report, "gpu_facts", gpu_facts)
    section(report, "torch_own", lambda: torch_own(args.python))
    capabilities = report["gpu_facts"].get("capabilities") or []

    def torch_archs():
        facts = inspect_torch(args.python, capabilities)
        facts["problem"] = check_requirements(facts)
        return facts

    section(report, "torch_cuda_archs", torch_archs)
    if args.package_dir:
        section(report, "sgl_kernel_variants", lambda: check_sgl_kernel(
            package_dir=os.path.abspath(args.package_dir), import_check=True, import_python=args.python,
            timeout=300))
    section(report, "sgl_kernel_variants_installed",
            lambda: check_sgl_kernel(python=args.python, import_check=True, timeout=300))
    report["agreement"] = agreement(report)
    if args.record:
        record(args.record, report)
    print(json.dumps(report, indent=1, default=str))


if __name__ == "__main__":
    main()
