"""sgl_kernel_variants' import check against the real upstream loader, with torch on a GPU stood in
(and torch_cuda_archs on the same stand-in, for a visible device).

The loader picks the common_ops variant from torch's current device, which can differ from the
capability the check was asked about, or from nvidia-smi's first GPU (mixed GPUs, CUDA_VISIBLE_DEVICES):
what the import loaded must be compared with the loader's choice for torch's device.

The package is the released wheel's loader (load_utils.py) and version.py with an __init__.py that runs
only the loader, and Python common_ops files in place of the CUDA libraries (loading those needs the
driver). torch is the stand-in of tests/stand_ins/torch-on-a-gpu; nvidia-smi the recorded-answer one.
"""

import shutil
from pathlib import Path

import pytest
from ansible.module_utils.sgl_kernel_probe import check_sgl_kernel
from ansible_run import run_module
from documented import assert_documented
from sglkernel import unpacked_package
from venvs import make_venv

pytestmark = pytest.mark.integration

STAND_INS = Path(__file__).resolve().parent.parent / "stand_ins"
STAND_IN_TORCH = STAND_INS / "torch-on-a-gpu"
NVIDIA_SMI = str(STAND_INS / "nvidia-smi")
H200_HOST = str(STAND_INS / "nvidia-smi-recordings" / "h200-x8")
LOADER_ONLY_INIT = ("# STAND-IN for sgl_kernel/__init__.py: only its first step, the upstream loader.\n"
                    "from sgl_kernel.load_utils import _load_architecture_specific_ops\n\n"
                    "common_ops = _load_architecture_specific_ops()\n")
LOADABLE = "# STAND-IN for a common_ops library: loads without a driver\n"


def make_package(root, files):
    """sgl_kernel/ under ``root`` with the wheel's loader and ``files`` ({relative path: text})."""
    package = root / "sgl_kernel"
    package.mkdir(parents=True)
    for name in ("load_utils.py", "version.py"):
        shutil.copyfile(unpacked_package() / name, package / name)
    (package / "__init__.py").write_text(LOADER_ONLY_INIT)
    for relative, text in files.items():
        (package / relative).parent.mkdir(parents=True, exist_ok=True)
        (package / relative).write_text(text)
    return package


@pytest.fixture
def gpu_host(monkeypatch, tmp_path):
    """(package maker, interpreter) on an H200 host (nvidia-smi) whose torch device is set per test."""
    monkeypatch.setenv("NVIDIA_SMI_RECORDING", H200_HOST)
    python = str(make_venv(tmp_path / "venv", STAND_IN_TORCH))
    return (lambda files: make_package(tmp_path / "site", files)), python


def check(package, python, monkeypatch, torch_capability, capability=None):
    monkeypatch.setenv("STAND_IN_TORCH_CAPABILITY", torch_capability)
    return check_sgl_kernel(package_dir=str(package), capability=capability, import_check=True,
                            nvidia_smi=NVIDIA_SMI, import_python=python)


def test_expectation_follows_torchs_device_not_the_requested_capability(gpu_host, monkeypatch):
    make, python = gpu_host
    package = make({"sm90/common_ops.py": LOADABLE, "sm100/common_ops.py": LOADABLE})
    result = check(package, python, monkeypatch, torch_capability="9.0", capability="12.0")
    assert result["selected_variant"] == "sm100"  # the static answer is for the capability asked about
    imported = result["import_check"]
    assert imported["status"] == "ok", imported
    assert imported["torch_capability"] == "9.0"
    assert imported["loaded_file"] == str(package / "sm90" / "common_ops.py")
    assert imported["expected_path"] == str(package / "sm90" / "common_ops.py")
    assert imported["loaded_expected"] is True


def test_expectation_follows_torchs_device_not_nvidia_smis_first_gpu(gpu_host, monkeypatch):
    # nvidia-smi's GPU 0 is an H200 (9.0); torch's current device is a 12.0 GPU.
    make, python = gpu_host
    package = make({"sm90/common_ops.py": LOADABLE, "sm100/common_ops.py": LOADABLE})
    result = check(package, python, monkeypatch, torch_capability="12.0")
    assert result["capability"] == "9.0"
    assert result["capability_source"] == "nvidia-smi"
    assert result["selected_variant"] == "sm90"
    imported = result["import_check"]
    assert imported["loaded_file"] == imported["expected_path"] == str(package / "sm100" / "common_ops.py")
    assert imported["loaded_expected"] is True


def test_a_variant_that_fails_to_load_is_not_what_was_expected(gpu_host, monkeypatch):
    # The loader falls back to the package-root common_ops when the variant file does not load.
    make, python = gpu_host
    package = make({"sm90/common_ops.py": "raise ImportError('undefined symbol: stand-in')\n",
                    "common_ops.py": LOADABLE})
    imported = check(package, python, monkeypatch, torch_capability="9.0")["import_check"]
    assert imported["status"] == "ok", imported
    assert imported["expected_path"] == str(package / "sm90" / "common_ops.py")
    assert imported["loaded_file"] == str(package / "common_ops.py")
    assert imported["loaded_expected"] is False


def test_module_reports_the_expected_file(tmp_path):
    package = make_package(tmp_path / "site", {"sm90/common_ops.py": LOADABLE,
                                               "sm100/common_ops.py": LOADABLE})
    python = str(make_venv(tmp_path / "venv", STAND_IN_TORCH, package.parent))
    args = {"python": python, "capability": "12.0", "import_check": True, "nvidia_smi": NVIDIA_SMI}
    result = run_module("sgl_kernel_variants", args,
                        envvars={"NVIDIA_SMI_RECORDING": H200_HOST, "STAND_IN_TORCH_CAPABILITY": "9.0"})
    assert result["event"] == "runner_on_ok", result.get("msg")
    imported = result["import_check"]
    assert imported["python"] == python
    assert imported["expected_path"] == imported["loaded_file"] == str(package / "sm90" / "common_ops.py")
    assert imported["loaded_expected"] is True
    assert_documented("sgl_kernel_variants", result)


def test_torch_cuda_archs_reports_the_visible_device(tmp_path):
    python = str(make_venv(tmp_path / "venv", STAND_IN_TORCH))
    result = run_module("torch_cuda_archs", {"python": python, "require": ["12.0"]},
                        envvars={"STAND_IN_TORCH_CAPABILITY": "10.3"})
    assert result["event"] == "runner_on_ok", result.get("msg")
    assert result["cuda_available"] is True
    assert result["devices"] == [{"index": 0, "name": "stand-in GPU", "capability": "10.3", "covered": True}]
    assert result["arch_list"] == ["sm_80", "sm_90", "sm_100", "sm_120"]
    assert_documented("torch_cuda_archs", result)
