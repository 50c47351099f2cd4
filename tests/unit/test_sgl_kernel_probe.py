"""module_utils/sgl_kernel_probe.py: what an import failure means, and the package lookup.

The import check itself runs against real torch and the real wheel in
tests/integration/test_sgl_kernel_variants.py (on this GPU-less machine it fails on libcuda.so.1).
An ABI mismatch needs a loadable libcuda, so that diagnosis is checked here on the loader's text.
"""

import os
import sys
from pathlib import Path

import pytest
from ansible.module_utils import sgl_kernel_probe
from ansible.module_utils.nvidia_smi import NvidiaSmiError
from ansible.module_utils.sgl_kernel_probe import (
    SglKernelProbeError,
    check_sgl_kernel,
    compare_with_loader,
    diagnose,
    locate_package,
    run_import_check,
)

ABI_MISMATCH = (
    "ImportError: \n[sgl_kernel] CRITICAL: Could not load any common_ops library!\n...\nError details from "
    "previous import attempts:\n- ImportError: /venv/lib/python3.12/site-packages/sgl_kernel/sm100/"
    "common_ops.abi3.so: undefined symbol: _ZN3c1017RegisterOperatorsD1Ev\n"
    "- ModuleNotFoundError: No module named 'common_ops'\n")


def test_undefined_symbol_is_a_torch_abi_mismatch():
    assert diagnose(ABI_MISMATCH, "2.11.0+cu130", "13.0") == (
        "torch ABI mismatch: sgl_kernel was built against a different torch than the 2.11.0+cu130 installed "
        "here; install the sglang-kernel release that pins this torch (or the torch it pins), or rebuild "
        "sgl_kernel against this torch")


@pytest.mark.parametrize(("error", "needle"), [
    ("ImportError: libcuda.so.1: cannot open shared object file", "libcuda.so.1 is not loadable"),
    ("ImportError: libcudart.so.13: cannot open shared object file", "CUDA runtime (libcudart)"),
    ("ImportError: libnvrtc.so.13: cannot open shared object file", "CUDA NVRTC library is not found"),
    ("ImportError: libnuma.so.1: cannot open shared object file", "install the libnuma1 package"),
])
def test_missing_libraries(error, needle):
    assert needle in diagnose(error, "2.14.1+cu130", "13.0")


def test_cpu_torch_and_unknown_errors():
    assert diagnose("anything", "2.13.0+cpu", None).startswith("torch 2.13.0+cpu here is not a CUDA build")
    assert diagnose("RuntimeError: something new", "2.14.1+cu130", "13.0") is None


def test_locate_package_in_an_environment_without_it():
    with pytest.raises(SglKernelProbeError, match="sgl_kernel is not installed for "):
        locate_package(sys.executable)


# check_sgl_kernel end to end, fast: the interpreter is this one, with the stand-in torch of
# tests/stand_ins/torch-on-a-gpu and a tiny sgl_kernel package on PYTHONPATH, and nvidia-smi is the
# recorded-answer stand-in. The real upstream loader runs in
# tests/integration/test_sgl_kernel_import_check.py.
STAND_INS = Path(__file__).resolve().parent.parent / "stand_ins"
NVIDIA_SMI = str(STAND_INS / "nvidia-smi")
RECORDINGS = STAND_INS / "nvidia-smi-recordings"
LOADS_SM90 = "from sgl_kernel.sm90 import common_ops\n"


def package(root, init=LOADS_SM90, files=("sm90/common_ops.py", "sm100/common_ops.py")):
    pkg = root / "site" / "sgl_kernel"
    for name in files:
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text("# STAND-IN for a common_ops library\n")
    (pkg / "__init__.py").write_text(init)
    (pkg / "version.py").write_text('__version__ = "0.3.21"\n')
    return pkg


@pytest.fixture
def host(monkeypatch, tmp_path):
    """An nvidia-smi recording to answer with, and PYTHONPATH = stand-in torch + tmp site."""
    def use(recording, torch=True, torch_capability="9.0"):
        monkeypatch.setenv("NVIDIA_SMI_RECORDING", str(RECORDINGS / recording))
        paths = [str(tmp_path / "site"), *([str(STAND_INS / "torch-on-a-gpu")] if torch else [])]
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(paths))
        monkeypatch.setenv("STAND_IN_TORCH_CAPABILITY", torch_capability)
    return use


@pytest.mark.parametrize("given", [{}, {"python": sys.executable, "package_dir": "/x/sgl_kernel"}])
def test_exactly_one_of_python_and_package_dir(given):
    with pytest.raises(SglKernelProbeError) as caught:
        check_sgl_kernel(**given)
    assert str(caught.value) == ("give exactly one of python (the environment's interpreter) and package_dir "
                                 "(an sgl_kernel directory)")


def test_a_bad_capability_names_the_parameter(tmp_path):
    with pytest.raises(SglKernelProbeError, match=r"^capability: 'nine' is not a CUDA architecture"):
        check_sgl_kernel(package_dir=str(package(tmp_path)), capability="nine")


def test_a_missing_package_dir(tmp_path):
    with pytest.raises(SglKernelProbeError, match=r"^package_dir .*absent is not a directory"):
        check_sgl_kernel(package_dir=str(tmp_path / "absent"), capability="9.0")


def test_capability_given_asks_no_nvidia_smi(tmp_path):
    pkg = package(tmp_path)
    result = check_sgl_kernel(package_dir=str(pkg), capability="12.0", nvidia_smi=str(tmp_path / "absent"))
    assert result["python"] is None
    assert result["warnings"] == []
    assert result["capability"] == "12.0"
    assert result["capability_source"] == "param"
    assert result["gpu_reason"] is None
    assert result["selected_variant"] == "sm100"
    assert result["package_version"] == "0.3.21"
    assert "import_check" not in result


def test_an_unknown_capability_is_a_warning(tmp_path):
    result = check_sgl_kernel(package_dir=str(package(tmp_path)), capability="13.7")
    assert result["capability"] == "13.7"
    assert len(result["warnings"]) == 1
    assert "13.7" in result["warnings"][0]


def test_capability_from_nvidia_smis_first_gpu(tmp_path, host):
    host("h200-x8")
    result = check_sgl_kernel(package_dir=str(package(tmp_path)), nvidia_smi=NVIDIA_SMI)
    assert (result["capability"], result["capability_source"]) == ("9.0", "nvidia-smi")
    assert result["gpu_reason"] is None
    assert result["selected_variant"] == "sm90"


def test_no_gpu_means_no_capability(tmp_path, host):
    host("no-devices")
    result = check_sgl_kernel(package_dir=str(package(tmp_path)), nvidia_smi=NVIDIA_SMI)
    assert (result["capability"], result["capability_source"]) == (None, "none")
    assert result["gpu_reason"] == "the NVIDIA driver is loaded but sees no GPU (No devices were found)"


def test_gpus_without_a_capability_ask_for_one(tmp_path, host):
    host("a100-driver-470")
    result = check_sgl_kernel(package_dir=str(package(tmp_path)), nvidia_smi=NVIDIA_SMI)
    assert result["capability_source"] == "none"
    assert result["gpu_reason"] == ("nvidia-smi lists 2 GPU(s) but no compute capability (drivers before 510 "
                                    "cannot report it); give capability")


def test_a_failing_nvidia_smi_is_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(sgl_kernel_probe, "gpu_facts",
                        lambda *_, **__: (_ for _ in ()).throw(NvidiaSmiError("garbled output")))
    with pytest.raises(SglKernelProbeError) as caught:
        check_sgl_kernel(package_dir=str(package(tmp_path)))
    assert str(caught.value) == "garbled output; please report this output with the driver version"


def test_nvidia_smi_timeout_is_at_most_30_s(tmp_path, monkeypatch):
    seen = []
    no_gpu = {"present": False, "reason": "r", "gpus": []}
    monkeypatch.setattr(sgl_kernel_probe, "gpu_facts", lambda path, timeout: seen.append(timeout) or no_gpu)
    for timeout in (5, 30, 31, 120):
        check_sgl_kernel(package_dir=str(package(tmp_path)), timeout=timeout)
    assert seen == [5, 30, 30, 30]


def test_import_check_without_a_gpu_is_skipped(tmp_path, host):
    host("no-devices")
    result = check_sgl_kernel(package_dir=str(package(tmp_path)), capability="9.0", import_check=True,
                              nvidia_smi=NVIDIA_SMI)
    assert result["import_check"] == {
        "status": "skipped",
        "reason": "no usable GPU on this host (the NVIDIA driver is loaded but sees no GPU (No devices were "
                  "found)); sgl_kernel cannot be imported "
                  "without the driver"}


def test_import_check_of_a_package_dir(tmp_path, host):
    host("h200-x8")
    pkg = package(tmp_path)
    result = check_sgl_kernel(package_dir=str(pkg), capability="12.0", import_check=True,
                              nvidia_smi=NVIDIA_SMI, import_python=sys.executable)
    assert result["selected_variant"] == "sm100"  # for the capability asked about
    assert result["import_check"] == {
        "status": "ok", "python": sys.executable, "torch_version": "0.0.0+stand-in",
        "torch_cuda_version": "13.0", "cuda_available": True, "torch_capability": "9.0",
        "sgl_kernel_file": str(pkg / "__init__.py"), "loaded_file": str(pkg / "sm90" / "common_ops.py"),
        "expected_path": str(pkg / "sm90" / "common_ops.py"), "loaded_expected": True}


def test_import_check_of_an_environment(tmp_path, host):
    host("h200-x8", torch_capability="12.0")
    pkg = package(tmp_path)
    result = check_sgl_kernel(python=sys.executable, import_check=True, nvidia_smi=NVIDIA_SMI)
    assert result["python"] == sys.executable
    assert result["package_dir"] == str(pkg)
    assert result["capability"] == "9.0"
    imported = result["import_check"]
    assert imported["python"] == sys.executable
    assert imported["torch_capability"] == "12.0"
    # the loader would pick sm100 for torch's device; this package loaded sm90
    assert imported["expected_path"] == str(pkg / "sm100" / "common_ops.py")
    assert imported["loaded_expected"] is False


def test_locate_package(tmp_path, host):
    host("no-devices", torch=False)
    pkg = package(tmp_path)
    assert locate_package(sys.executable) == (str(pkg), sys.executable)


def test_locate_package_that_is_a_module(tmp_path, host):
    host("no-devices", torch=False)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sgl_kernel.py").write_text("")
    with pytest.raises(SglKernelProbeError) as caught:
        locate_package(sys.executable)
    assert str(caught.value) == (f"sgl_kernel for {sys.executable} is a module "
                                 f"({tmp_path}/site/sgl_kernel.py), not the sglang-kernel package")


def test_locate_package_message_when_absent():
    with pytest.raises(SglKernelProbeError) as caught:
        locate_package(sys.executable)
    assert str(caught.value) == (f"sgl_kernel is not installed for {sys.executable}; install sglang-kernel "
                                 "in that environment, or give package_dir to inspect an unpacked package")


def test_locate_package_with_a_broken_interpreter(tmp_path):
    with pytest.raises(SglKernelProbeError, match=r"^python .*absent does not exist"):
        locate_package(str(tmp_path / "absent"))


def test_import_check_of_a_directory_not_named_sgl_kernel(tmp_path):
    assert run_import_check(sys.executable, str(tmp_path / "kernels")) == {
        "status": "skipped", "reason": f"package_dir {tmp_path}/kernels is not named sgl_kernel, so Python "
                                       "cannot import it as sgl_kernel"}


def test_import_failing_at_torch(tmp_path, host):
    host("h200-x8", torch=False)
    (tmp_path / "site" / "torch").mkdir(parents=True)
    (tmp_path / "site" / "torch" / "__init__.py").write_text("raise ImportError('libcudart.so.13: no')\n")
    result = run_import_check(sys.executable, str(package(tmp_path)))
    assert result == {"status": "failed", "python": sys.executable, "failed_at": "import torch",
                      "error": "ImportError: libcudart.so.13: no",
                      "hint": "the CUDA runtime (libcudart) is not found: install torch's CUDA build, which "
                              "brings the nvidia-cuda-runtime wheel, or a CUDA toolkit"}


def test_import_failing_at_sgl_kernel(tmp_path, host):
    host("h200-x8")
    pkg = package(tmp_path, init="raise ImportError('libnuma.so.1: cannot open')\n")
    result = run_import_check(sys.executable, str(pkg), timeout=30)
    assert result["status"] == "failed"
    assert result["failed_at"] == "import sgl_kernel"
    assert result["error"] == "ImportError: libnuma.so.1: cannot open"
    assert result["hint"] == "libnuma is missing: install the libnuma1 package"
    assert result["torch_version"] == "0.0.0+stand-in"
    assert "loaded_file" not in result


def test_import_probe_that_cannot_run(tmp_path):
    result = run_import_check(str(tmp_path / "absent"), None)
    assert result == {"status": "failed", "python": str(tmp_path / "absent"), "hint": None,
                      "error": f"python {tmp_path}/absent does not exist; give the interpreter of the "
                               "environment to inspect (e.g. <venv>/bin/python)"}


def test_no_comparison_before_torch_imported():
    check = {"status": "failed", "error": "x"}
    compare_with_loader(check, {"sm90": {"path": "/p/sm90/common_ops.abi3.so"}})
    assert check == {"status": "failed", "error": "x"}


def test_comparison_without_a_loaded_file_or_an_expected_one():
    check = {"torch_version": "2.9.1", "torch_capability": "9.0"}
    compare_with_loader(check, {"sm90": {"path": "/p/sm90/common_ops.abi3.so"}})
    assert check == {"torch_version": "2.9.1", "torch_capability": "9.0",
                     "expected_path": "/p/sm90/common_ops.abi3.so"}
    check = {"torch_version": "2.9.1", "torch_capability": "9.0", "loaded_file": "/elsewhere/common_ops.so"}
    compare_with_loader(check, {})
    assert check["expected_path"] is None
    assert check["loaded_expected"] is False


def test_diagnoses_in_order_and_the_torch_named():
    assert diagnose("Could not load any common_ops library", "2.9.1", "12.8") == (
        "no common_ops variant could be loaded (see the error)")
    # a more specific cause named in the same error wins
    assert diagnose("Could not load any common_ops library: libnuma.so.1", "2.9.1", "12.8") == (
        "libnuma is missing: install the libnuma1 package")
    assert diagnose("undefined symbol: x", None).startswith(
        "torch ABI mismatch: sgl_kernel was built against a different torch than the torch installed here")
    assert diagnose("undefined symbol: x", "", None).startswith("torch ABI mismatch")


@pytest.fixture
def not_python(tmp_path):
    """An executable that runs no probe: a shell script that exits 1 with a message."""
    path = tmp_path / "bin" / "python"
    path.parent.mkdir()
    path.write_text("#!/bin/sh\necho 'no python here' >&2\nexit 1\n")
    path.chmod(0o755)
    return str(path)


def test_a_lookup_that_gives_no_answer_names_the_lookup(not_python):
    with pytest.raises(SglKernelProbeError) as caught:
        locate_package(not_python)
    assert str(caught.value) == (f"the sgl_kernel lookup in {not_python} exited with status 1 without an "
                                 "answer (is it a Python 3 interpreter?); output: no python here")


def test_an_import_check_that_gives_no_answer_names_the_imports(tmp_path, not_python):
    assert run_import_check(not_python, str(tmp_path / "sgl_kernel")) == {
        "status": "failed", "python": not_python, "hint": None,
        "error": f"import torch, sgl_kernel in {not_python} exited with status 1 without an answer (is it a "
                 "Python 3 interpreter?); output: no python here"}


def test_import_check_of_a_package_dir_runs_in_this_interpreter_by_default(tmp_path, host):
    host("h200-x8")
    pkg = package(tmp_path)
    result = check_sgl_kernel(package_dir=str(pkg), capability="9.0", import_check=True,
                              nvidia_smi=NVIDIA_SMI)
    assert result["import_check"]["python"] == sys.executable
    assert result["import_check"]["status"] == "ok"
    assert result["import_check"]["loaded_expected"] is True


def test_import_check_of_a_package_dir_that_is_not_on_the_path(tmp_path, host):
    host("h200-x8")
    pkg = package(tmp_path / "elsewhere")  # PYTHONPATH has tmp_path/site, which stays empty
    result = check_sgl_kernel(package_dir=str(pkg), capability="9.0", import_check=True,
                              nvidia_smi=NVIDIA_SMI)
    assert result["import_check"]["sgl_kernel_file"] == str(pkg / "__init__.py")
    assert result["import_check"]["loaded_expected"] is True


def test_an_environment_is_import_checked_in_its_own_interpreter(tmp_path, host):
    host("h200-x8")
    package(tmp_path)
    result = check_sgl_kernel(python=sys.executable, import_check=True, nvidia_smi=NVIDIA_SMI,
                              import_python=str(tmp_path / "not-this-one"))
    assert result["import_check"]["python"] == sys.executable
    assert result["import_check"]["status"] == "ok"
    assert result["warnings"] == []


def test_the_timeout_reaches_every_probe(tmp_path, host, monkeypatch):
    host("h200-x8")
    package(tmp_path)
    timeouts = []
    real_run_probe = sgl_kernel_probe.run_probe

    def recording(*args, **kwargs):
        timeouts.append(kwargs["timeout"])
        return real_run_probe(*args, **kwargs)

    monkeypatch.setattr(sgl_kernel_probe, "run_probe", recording)
    check_sgl_kernel(python=sys.executable, import_check=True, nvidia_smi=NVIDIA_SMI, timeout=17)
    check_sgl_kernel(package_dir=str(tmp_path / "site" / "sgl_kernel"), import_check=True,
                     nvidia_smi=NVIDIA_SMI, timeout=19)
    assert timeouts == [17, 17, 19]


def test_an_abi_mismatch_at_import_names_the_torch_installed(tmp_path, host):
    host("h200-x8")
    pkg = package(tmp_path, init="raise ImportError('common_ops.abi3.so: undefined symbol: _ZN3c10')\n")
    result = run_import_check(sys.executable, str(pkg))
    assert result["hint"] == (
        "torch ABI mismatch: sgl_kernel was built against a different torch than the 0.0.0+stand-in "
        "installed here; install the sglang-kernel release that pins this torch (or the torch it pins), or "
        "rebuild sgl_kernel against this torch")


def test_cpu_torch_diagnosis_in_full():
    assert diagnose("anything", "2.13.0+cpu", None) == (
        "torch 2.13.0+cpu here is not a CUDA build; sgl_kernel needs the CUDA build of the torch it pins")
