"""sgl_kernel_variants on the released sglang-kernel wheel and on nvcc-built fixture trees.

The wheel is downloaded and its sgl_kernel/ package unpacked once into the test cache (tests/sglkernel.py).
Fixture trees lay real nvcc-compiled shared objects (tests/cudabuild.py) out as sm90/, sm100/ and
package-root common_ops.
"""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.module_utils.cuda_arch import KNOWN_CAPABILITIES, sorted_archs
from ansible.module_utils.sgl_kernel_probe import check_sgl_kernel
from ansible_run import run_module
from cudabuild import compiled_fixtures
from cuobjdump import as_cuobjdump_lists, cuobjdump_listing
from documented import assert_documented
from prereq import require
from sglkernel import SGLANG_KERNEL_VERSION, unpacked_package
from torchenv import torch_python
from venvs import make_venv, purelib

pytestmark = pytest.mark.integration
cuda_fixtures = compiled_fixtures  # the session fixture, under the name the tests ask for

STAND_INS = Path(__file__).resolve().parent.parent / "stand_ins"
WHEEL_ARCHES = ["sm_80", "sm_89", "sm_90", "sm_90a", "sm_100f", "sm_120a"]


@pytest.fixture(scope="session")
def wheel_package():
    """The sgl_kernel/ directory of the real sglang-kernel wheel, unpacked once into the cache."""
    return str(unpacked_package())


def tree(tmp_path, cuda_fixtures, layout):
    """An sgl_kernel package whose files are {relative path: compiled fixture name}."""
    package = tmp_path / "sgl_kernel"
    for relative, fixture in layout.items():
        target = package / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(cuda_fixtures[fixture][0], target)
    return str(package)


@pytest.mark.parametrize(("capability", "selected", "covers"), [
    ("9.0", "sm90", True), ("10.0", "sm100", True), ("10.3", "sm100", True), ("12.0", "sm100", True),
    ("12.1", "sm100", False), ("8.6", "sm100", True), (None, "sm100", None),
])
def test_released_wheel(wheel_package, capability, selected, covers):
    result = check_sgl_kernel(package_dir=wheel_package, capability=capability)
    assert result["package_version"] == SGLANG_KERNEL_VERSION
    assert sorted(result["variants"]) == ["sm100", "sm90"]
    for variant in result["variants"].values():
        # Both variants are the same sources and gencodes: no PTX, 12.0 only as sm_120a.
        assert variant["sass"] == WHEEL_ARCHES
        assert variant["ptx"] == []
    assert result["selected_variant"] == selected
    assert result["selected_path"] == f"{wheel_package}/{selected}/common_ops.abi3.so"
    assert result["selected_covers"] is covers
    assert result["capability_source"] == ("param" if capability else "none")


@pytest.mark.parametrize("variant", ["sm90", "sm100"])
def test_released_wheel_agrees_with_cuobjdump(wheel_package, variant):
    # WHEEL_ARCHES is what the shared upstream facts say; cuobjdump is the independent oracle.
    result = check_sgl_kernel(package_dir=wheel_package, capability="9.0")["variants"][variant]
    oracle = cuobjdump_listing(result["path"])
    assert as_cuobjdump_lists(result["sass"], result["ptx"]) == oracle
    assert oracle.sass  # the oracle saw code: the comparison is not between two empty sets


def test_released_wheel_on_12_1_explains_the_miss(wheel_package):
    result = check_sgl_kernel(package_dir=wheel_package, capability="121")
    assert result["message"] == (
        "sm100/common_ops.abi3.so has no code for 12.1: sm_80, sm_89, sm_90, sm_90a, sm_100f, sm_120a (the "
        "loader picks sm100/ for capability 12.1); install an sglang-kernel build whose sm100/common_ops "
        "has code for 12.1 (sm_120f, sm_121a, sm_121 or compute_121 PTX) or build it from source for "
        "that target")


def test_sm100_without_12_0_code(tmp_path, cuda_fixtures):
    package = tree(tmp_path, cuda_fixtures, {"sm90/common_ops.abi3.so": "sm_90.so",
                                             "sm100/common_ops.abi3.so": "sm_100a.so"})
    on_10 = check_sgl_kernel(package_dir=package, capability="10.0")
    assert on_10["selected_covers"] is True
    assert on_10["variants"]["sm100"]["runs_on"] == "sass"
    on_12 = check_sgl_kernel(package_dir=package, capability="12.0")
    assert on_12["selected_variant"] == "sm100"
    assert on_12["selected_covers"] is False
    assert on_12["variants"]["sm90"]["runs_on"] == "ptx-jit"  # compute_90 JIT-compiles for 12.0
    assert on_12["message"] == (
        "sm100/common_ops.abi3.so has no code for 12.0: sm_100a, compute_100a (the loader picks sm100/ for "
        "capability 12.0); install an sglang-kernel build whose sm100/common_ops has code for 12.0 "
        "(sm_120f, sm_120a, sm_120 or compute_120 PTX) or build it from source for that target; "
        "sm90/common_ops.abi3.so has code for 12.0 but the loader does not pick it for this capability")
    on_9 = check_sgl_kernel(package_dir=package, capability="9.0")
    assert on_9["selected_variant"] == "sm90"
    assert on_9["selected_covers"] is True


@pytest.mark.parametrize(("fixture", "capability", "runs_on"), [
    ("multi.so", "12.1", "sass"),       # sm_120f covers the 12.x family
    ("multi.so", "8.6", "sass"),        # sm_80 runs on 8.6
    ("multi.so", "10.3", False),        # sm_100a is 10.0 only; compute_120 is newer than 10.3
    ("ptx_only.so", "12.0", "ptx-jit"),
    ("sm_120a.so", "12.1", False),
    ("host_only.so", "12.0", False),
])
def test_sm100_variants(tmp_path, cuda_fixtures, fixture, capability, runs_on):
    package = tree(tmp_path, cuda_fixtures, {"sm100/common_ops.abi3.so": fixture})
    result = check_sgl_kernel(package_dir=package, capability=capability)
    variant = result["variants"]["sm100"]
    requested = cuda_fixtures[fixture][1]  # what nvcc was asked to build
    assert variant["sass"] == sorted_archs(requested.sass)
    assert variant["ptx"] == sorted_archs(requested.ptx)
    assert variant["runs_on"] == runs_on
    assert result["selected_variant"] == "sm100"
    assert result["selected_covers"] is bool(runs_on)


def test_root_fallback_with_code_is_not_what_the_loader_tries_first(tmp_path, cuda_fixtures):
    package = tree(tmp_path, cuda_fixtures, {"sm100/common_ops.abi3.so": "sm_100a.so",
                                             "common_ops.abi3.so": "sm_120a.so"})
    result = check_sgl_kernel(package_dir=package, capability="12.0")
    assert result["selected_variant"] == "sm100"
    assert result["selected_covers"] is False
    assert result["variants"]["root"]["runs_on"] == "sass"
    assert result["message"].endswith(
        "; common_ops.abi3.so has code for 12.0, but the loader falls back to it only when "
        "sm100/common_ops.abi3.so fails to load")


def test_root_only_tree(tmp_path, cuda_fixtures):
    package = tree(tmp_path, cuda_fixtures, {"common_ops.abi3.so": "sm_120a.so"})
    on_12 = check_sgl_kernel(package_dir=package, capability="12.0")
    assert list(on_12["variants"]) == ["root"]
    assert on_12["selected_variant"] == "root"
    assert on_12["selected_covers"] is True
    assert on_12["message"] == ("sm100/common_ops.* is missing, so the loader falls back to the package-root "
                                "common_ops: common_ops.abi3.so runs on 12.0 (native SASS)")
    on_9 = check_sgl_kernel(package_dir=package, capability="9.0")
    assert on_9["selected_variant"] == "root"
    assert on_9["selected_covers"] is False
    assert on_9["message"].startswith("common_ops.abi3.so has no code for 9.0: sm_120a, compute_120a (sm90/")


# --- through Ansible -------------------------------------------------------------------------------

def env_python(tmp_path, *paths):
    """A real venv whose import path also holds ``paths``."""
    return str(make_venv(tmp_path / "venv", *paths))


def gpu_host(recording):
    """Module args and environment that make nvidia-smi the stand-in replaying ``recording``."""
    return ({"nvidia_smi": str(STAND_INS / "nvidia-smi")},
            {"NVIDIA_SMI_RECORDING": str(STAND_INS / "nvidia-smi-recordings" / recording)})


def test_module_on_the_wheel(wheel_package):
    args = {"package_dir": wheel_package, "capability": "12.1"}
    result = run_module("sgl_kernel_variants", args, check=True)
    assert result["event"] == "runner_on_ok", result.get("msg")
    assert result["changed"] is False
    assert result["selected_variant"] == "sm100"
    assert result["selected_covers"] is False
    assert result["message"].startswith("sm100/common_ops.abi3.so has no code for 12.1: sm_80, sm_89, sm_90")
    assert "import_check" not in result


def test_module_on_a_capability_newer_than_the_known_gpus(wheel_package):
    # A GPU newer than KNOWN_CAPABILITIES is rated by the same rules, with a warning, not refused.
    result = run_module("sgl_kernel_variants", {"package_dir": wheel_package, "capability": "12.2"})
    assert result["event"] == "runner_on_ok", result.get("msg")
    assert result["capability"] == "12.2"
    assert result["selected_variant"] == "sm100"
    assert result["selected_covers"] is False  # sm_120a is 12.0 only
    assert result["warnings"] == [
        f"capability 12.2 is not one of the known NVIDIA GPU capabilities ({', '.join(KNOWN_CAPABILITIES)}); "
        "it was rated with the same rules, which a new architecture may not follow"]


def test_module_finds_the_package_and_the_gpu(tmp_path, wheel_package):
    python = env_python(tmp_path, Path(wheel_package).parent)
    args, env = gpu_host("rtx-pro-6000-x2")
    result = run_module("sgl_kernel_variants", {"python": python, **args}, envvars=env)
    assert result["event"] == "runner_on_ok", result.get("msg")
    assert result["python"] == python
    assert result["package_dir"] == wheel_package
    assert result["capability"] == "12.0"
    assert result["capability_source"] == "nvidia-smi"
    assert result["selected_variant"] == "sm100"
    assert result["selected_covers"] is True
    assert result["variants"]["sm100"]["runs_on"] == "sass"


def test_module_import_check_without_gpu(wheel_package):
    require(not shutil.which("nvidia-smi"), "this machine has nvidia-smi (the test is of a GPU-less host)")
    result = run_module("sgl_kernel_variants", {"package_dir": wheel_package, "import_check": True})
    assert result["event"] == "runner_on_ok"
    assert result["capability"] is None
    assert result["selected_covers"] is None
    assert result["import_check"]["status"] == "skipped"
    assert result["import_check"]["reason"].startswith("no usable GPU on this host (nvidia-smi not found")
    assert_documented("sgl_kernel_variants", result)


def test_module_on_a_driver_without_compute_capability(wheel_package):
    args, env = gpu_host("a100-driver-470")
    result = run_module("sgl_kernel_variants", {"package_dir": wheel_package, **args}, envvars=env)
    assert result["event"] == "runner_on_ok", result.get("msg")
    assert result["capability"] is None
    assert result["capability_source"] == "none"
    assert result["gpu_reason"] == ("nvidia-smi lists 2 GPU(s) but no compute capability (drivers before "
                                    "510 cannot report it); give capability")
    assert result["selected_covers"] is None


def test_module_import_check_imports_for_real(tmp_path, wheel_package):
    # nvidia-smi is the stand-in (a B200 host); torch 2.14.1 and sgl_kernel are real, so the import runs
    # the upstream loader, which fails here on the missing driver library, as on a driver-less host.
    torch_site = purelib(torch_python("2.14.1"))
    python = env_python(tmp_path, torch_site, Path(wheel_package).parent)
    args, env = gpu_host("b200-x8")
    args.update(python=python, import_check=True)
    result = run_module("sgl_kernel_variants", args, envvars=env)
    assert result["event"] == "runner_on_ok", result.get("msg")
    assert result["capability"] == "10.0"
    assert result["selected_covers"] is True
    check = result["import_check"]
    assert check["status"] == "failed"
    assert check["failed_at"] == "import sgl_kernel"
    assert check["torch_version"] == "2.14.1+cu130"
    assert "Could not load any common_ops library" in check["error"]
    assert "libcuda.so.1: cannot open shared object file" in check["error"]
    assert_documented("sgl_kernel_variants", result)
    assert check["hint"] == ("the NVIDIA driver library libcuda.so.1 is not loadable: install or repair "
                             "the driver")


@pytest.mark.parametrize(("args", "message"), [
    ({"python": "python3", "package_dir": "/tmp"}, "parameters are mutually exclusive: python|package_dir"),
    ({}, "one of the following is required: python, package_dir"),
    ({"package_dir": "/nonexistent/sgl_kernel", "capability": "9.0"},
     "package_dir /nonexistent/sgl_kernel is not a directory"),
    ({"package_dir": "/tmp", "capability": "blackwell"},
     "capability: 'blackwell' is not a CUDA architecture"),
    ({"package_dir": "/tmp", "capability": 12.0}, "capability: capability 12.0 is a number"),
    ({"python": "/nonexistent/bin/python"}, "python /nonexistent/bin/python does not exist"),
])
def test_module_bad_input(args, message):
    failed = run_module("sgl_kernel_variants", args)
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"].startswith(message)


def test_module_python_without_sgl_kernel(tmp_path):
    python = env_python(tmp_path)
    failed = run_module("sgl_kernel_variants", {"python": python})
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"] == (f"sgl_kernel is not installed for {python}; install sglang-kernel in that "
                             "environment, or give package_dir to inspect an unpacked package")


def test_module_python_path_with_tilde_is_expanded(tmp_path):
    make_venv(tmp_path / "venv")
    failed = run_module("sgl_kernel_variants", {"python": "~/venv/bin/python"},
                        envvars={"HOME": str(tmp_path)})
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"].startswith(f"sgl_kernel is not installed for {tmp_path}/venv/bin/python;")


def test_module_truncated_library(tmp_path, cuda_fixtures):
    package = tree(tmp_path, cuda_fixtures, {"sm100/common_ops.abi3.so": "sm_120a.so"})
    library = Path(package, "sm100", "common_ops.abi3.so")
    library.write_bytes(library.read_bytes()[:2000])
    failed = run_module("sgl_kernel_variants", {"package_dir": package, "capability": "12.0"})
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"].startswith(
        f"sm100/common_ops.abi3.so in {package} is not a readable shared object (")
    assert failed["msg"].endswith("); reinstall sglang-kernel")


def test_gpu_host_report_runs_without_ansible(tmp_path, wheel_package):
    """The lead's command for a GPU host, run as there: by a python3 with torch and without Ansible."""
    torch = str(torch_python("2.14.1"))
    has_ansible = subprocess.run([torch, "-c", "import ansible"], capture_output=True, check=False)
    assert has_ansible.returncode != 0, "the torch venv unexpectedly has Ansible"
    report_script = Path(__file__).resolve().parent.parent / "gpu_host_report.py"
    done = subprocess.run([torch, str(report_script), "--package-dir", wheel_package,
                           "--record", str(tmp_path / "capture")],
                          capture_output=True, text=True, timeout=600, check=True)
    report = json.loads(done.stdout)
    assert report["host"]["python"] == torch
    assert report["torch_own"]["torch.__version__"] == report["torch_cuda_archs"]["torch_version"]
    assert report["agreement"]["torch_cuda_archs_arch_list_equals_torch"] is True
    if not shutil.which("nvidia-smi"):
        assert report["agreement"]["gpu_facts_devices_equal_torch_devices"] is None
    assert report["sgl_kernel_variants"]["selected_variant"] == "sm100"
    assert sorted(report["sgl_kernel_variants"]["variants"]) == ["sm100", "sm90"]
    assert report["gpu_facts"]["present"] is bool(shutil.which("nvidia-smi"))
    assert (tmp_path / "capture" / "provenance.txt").exists()
