"""torch build classification (module_utils/torch_probe.probe_torch + rate + check_requirements) for CPU,
CUDA and ROCm builds, end to end through the real probe in a child interpreter.

STAND-IN: a few-line ``torch`` package written per test (no real torch is light enough for the unit
suite; tests/integration/test_torch_cuda_archs.py runs real CPU and CUDA torch builds). It answers the
attributes the probe reads, with the values each kind of build has.
"""

from __future__ import annotations

import os
import sys

import pytest
from ansible.module_utils.torch_probe import TorchProbeError, check_requirements, inspect_torch, rate

VERSION = "2.14.1"


def fake_torch(root, *, cuda, hip, arch_flags, arch_list=(), devices=(), cuda_raises=None):
    package = root / "torch"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("from . import _C, cuda, version\n"
                                         f"__version__ = {VERSION + '+x'!r}\n")
    (package / "version.py").write_text(f"cuda = {cuda!r}\nhip = {hip!r}\ngit_version = 'abc123'\n")
    (package / "_C.py").write_text("" if arch_flags is None else f"def _cuda_getArchFlags():\n"
                                                                  f"    return {arch_flags!r}\n")
    (package / "cuda.py").write_text(
        "import warnings\n"
        f"DEVICES = {list(devices)!r}\n"
        "def is_available():\n"
        + (f"    raise RuntimeError({cuda_raises!r})\n" if cuda_raises else
           "    warnings.warn('CUDA initialization: a warning')\n    return bool(DEVICES)\n")
        + "def device_count():\n    return len(DEVICES)\n"
        "def get_device_capability(index):\n    return DEVICES[index][1]\n"
        "def get_device_name(index):\n    return DEVICES[index][0]\n"
        f"def get_arch_list():\n    return {list(arch_list)!r}\n")
    return root


@pytest.fixture
def torch_at(tmp_path, monkeypatch):
    def make(**kwargs):
        monkeypatch.setenv("PYTHONPATH", str(fake_torch(tmp_path / "site", **kwargs)))
        return sys.executable
    return make


def test_cpu_build(torch_at):
    python = torch_at(cuda=None, hip=None, arch_flags=None)
    facts = inspect_torch(python, require=["12.0"])
    assert facts["build"] == "cpu"
    assert facts["torch_version"] == "2.14.1+x"
    assert facts["arch_list"] == []
    assert facts["arch_list_source"] == "torch.cuda.get_arch_list"
    assert facts["missing"] == ["12.0"]
    assert facts["cuda_available"] is False
    assert facts["devices"] == []
    assert facts["python"] == sys.executable
    assert check_requirements(facts).startswith(f"torch 2.14.1+x in {sys.executable} is a CPU build")


def test_cuda_build_with_devices(torch_at):
    python = torch_at(cuda="13.0", hip=None, arch_flags="sm_80 sm_90 sm_120",
                      devices=[("NVIDIA H200", (9, 0)), ("NVIDIA B200", (10, 0)), ("RTX PRO 6000", (12, 0))])
    facts = inspect_torch(python, require=["9.0", "10.0", "12.0"])
    assert facts["build"] == "cuda"
    assert facts["cuda_version"] == "13.0"
    assert facts["hip_version"] is None
    assert facts["git_version"] == "abc123"
    assert facts["arch_list"] == ["sm_80", "sm_90", "sm_120"]
    assert facts["arch_list_source"] == "torch._C._cuda_getArchFlags"
    assert facts["missing"] == ["10.0"]
    assert facts["cuda_available"] is True
    assert facts["cuda_error"] is None
    assert facts["cuda_warnings"] == ["CUDA initialization: a warning"]
    assert [(d["index"], d["name"], d["capability"], d["covered"]) for d in facts["devices"]] == [
        (0, "NVIDIA H200", "9.0", True), (1, "NVIDIA B200", "10.0", False), (2, "RTX PRO 6000", "12.0", True)]
    assert check_requirements(facts).startswith(f"torch 2.14.1+x in {sys.executable} (CUDA 13.0) has no code "
                                                "for capability 10.0: its arch list is sm_80 sm_90 sm_120.")


def test_cuda_build_whose_cuda_fails(torch_at):
    python = torch_at(cuda="13.0", hip=None, arch_flags="", cuda_raises="no driver")
    facts = inspect_torch(python, require=["9.0"])
    assert facts["build"] == "cuda"
    assert facts["arch_list"] == []
    assert facts["cuda_available"] is False
    assert facts["cuda_error"] == "RuntimeError: no driver"
    assert facts["missing"] == ["9.0"]
    assert "its arch list is (empty)" in check_requirements(facts)


def test_rocm_build(torch_at):
    python = torch_at(cuda=None, hip="6.4.2", arch_flags=None, arch_list=["gfx942", "gfx90a"],
                      devices=[("AMD Instinct MI300X", (9, 4))])
    facts = inspect_torch(python, require=["9.0"])
    assert facts["build"] == "rocm"
    assert facts["hip_version"] == "6.4.2"
    assert facts["arch_list"] == ["gfx942", "gfx90a"]
    assert facts["missing"] == ["9.0"]  # a ROCm build runs on no NVIDIA GPU, whatever its list says
    assert facts["devices"][0]["covered"] is False
    assert check_requirements(facts).startswith(f"torch 2.14.1+x in {sys.executable} is a ROCm build (HIP "
                                                "6.4.2): it cannot run on NVIDIA GPUs of capability 9.0.")


def test_a_build_with_both_versions_is_rocm(torch_at):
    python = torch_at(cuda="12.4", hip="6.2", arch_flags="sm_90")
    facts = inspect_torch(python, require=["9.0"])
    assert facts["build"] == "rocm"
    assert facts["missing"] == ["9.0"]


def test_torch_not_installed(tmp_path, monkeypatch):
    # Given as a bare name: the message names the interpreter that answered, by its full path.
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable))
    with pytest.raises(TorchProbeError) as caught:
        inspect_torch(os.path.basename(sys.executable))
    assert str(caught.value) == (
        f"torch is not installed for {sys.executable} (No module named 'torch'); point python at the "
        "interpreter of the environment that has torch (e.g. <venv>/bin/python) or install torch there")


def test_torch_that_fails_to_import(tmp_path, monkeypatch):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("raise ImportError('libcudart.so.13: cannot open')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(TorchProbeError) as caught:
        inspect_torch(sys.executable)
    assert str(caught.value) == (
        f"import torch failed in {sys.executable}: ImportError: libcudart.so.13: cannot open; the install "
        "is broken or incomplete: reinstall torch in that environment")


def test_torch_that_crashes_or_hangs_the_interpreter(tmp_path, monkeypatch):
    (tmp_path / "torch").mkdir()
    init = tmp_path / "torch" / "__init__.py"
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    init.write_text("import os\nos.abort()\n")
    with pytest.raises(TorchProbeError, match=rf"^the torch probe in {sys.executable} was killed by signal 6 "
                                              "without an answer"):
        inspect_torch(sys.executable)
    init.write_text("import time\ntime.sleep(600)\n")
    with pytest.raises(TorchProbeError, match=rf"^the torch probe in {sys.executable} did not finish within "
                                              r"0\.5 s and was killed"):
        inspect_torch(sys.executable, timeout=0.5)


def test_a_rocm_build_covers_no_device_whatever_its_arch_list():
    rated = rate({"build": "rocm", "arch_list": ["sm_90"], "devices": [{"index": 0, "capability": "9.0"}]},
                 ["9.0"])
    assert rated["missing"] == ["9.0"]
    assert rated["devices"][0]["covered"] is False


def test_a_device_capability_that_is_no_capability_is_not_rated():
    device = {"index": 0, "capability": "x.y"}
    rated = rate({"build": "cuda", "arch_list": ["sm_90"], "devices": [device]}, [])
    assert rated["devices"] == [{"index": 0, "capability": "x.y", "covered": None}]


def test_requirement_messages_in_full():
    base = {"python": "/v/bin/python", "cuda_version": "13.0", "hip_version": "6.4"}
    cpu = {**base, "torch_version": "2.15.0.dev20260101+cpu+local", "build": "cpu",
           "require": ["9.0", "12.0"]}
    assert check_requirements(cpu, "https://mirror.example/cu130") == (
        "torch 2.15.0.dev20260101+cpu+local in /v/bin/python is a CPU build (torch.version.cuda is None): it "
        "cannot run on GPUs of capability 9.0, 12.0. Install a CUDA build from https://mirror.example/cu130, "
        "e.g. `pip install --index-url https://mirror.example/cu130 torch==2.15.0.dev20260101`")
    rocm = {**cpu, "build": "rocm", "torch_version": "2.9.0+rocm6.4"}
    assert check_requirements(rocm, "https://m/cu130") == (
        "torch 2.9.0+rocm6.4 in /v/bin/python is a ROCm build (HIP 6.4): it cannot run on NVIDIA GPUs of "
        "capability 9.0, 12.0. Install a CUDA build from https://m/cu130, e.g. `pip install --index-url "
        "https://m/cu130 torch==2.9.0`")
    cuda = {**base, "torch_version": "2.14.1", "build": "cuda", "require": ["10.3", "11.0", "12.0"],
            "missing": ["10.3", "11.0"], "arch_list": ["sm_90", "sm_120"]}
    assert check_requirements(cuda) == (
        "torch 2.14.1 in /v/bin/python (CUDA 13.0) has no code for capability 10.3, 11.0: its arch list is "
        "sm_90 sm_120. Install a torch build whose arch list covers it (newer torch/CUDA, or a build with "
        "TORCH_CUDA_ARCH_LIST including it)")
