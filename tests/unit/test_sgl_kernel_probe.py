"""module_utils/sgl_kernel_probe.py: what an import failure means, and the package lookup.

The import check itself runs against real torch and the real wheel in
tests/integration/test_sgl_kernel_variants.py (on this GPU-less machine it fails on libcuda.so.1).
An ABI mismatch needs a loadable libcuda, so that diagnosis is checked here on the loader's text.
"""

import sys

import pytest
from ansible.module_utils.sgl_kernel_probe import SglKernelProbeError, diagnose, locate_package

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
