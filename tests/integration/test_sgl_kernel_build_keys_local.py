"""The profile's sgl_kernel.build keys through the real module (library/sgl_kernel_build.py, run as Ansible
runs it on a host): state=prepare with the values the role passes, then state=run, which builds the test
package (tests/kernel_pkg, shaped like sglang-kernel, same option names) with the real nvcc. Built twice,
once as the stable profile has them and once with enable_below_sm90=false and an extra_cmake_args entry
that turns an upstream option off: CMake's own cache, nvcc's command lines and the device code in the
wheel (read from the fatbins, no cuobjdump) show each change. Not narrowed, so that the old gencodes
would be built if nothing removed them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.sgl_kernel_wheel import scan_wheel
from cache import cache_dir
from kernelpkg import build_env, make_source, write_mirror
from module_direct import run_module_directly
from prereq import require
from torchenv import torch_python

pytestmark = pytest.mark.integration
NVCC_BIN = "/usr/local/cuda/bin"
TORCH = "2.14.1"
SM80 = "-gencode=arch=compute_80,code=sm_80"
SM89 = "-gencode=arch=compute_89,code=sm_89"
BUILT_ALWAYS = ["-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_100f,code=sm_100f",
                "-gencode=arch=compute_120a,code=sm_120a"]  # CUDA 13, FA3 off


@pytest.fixture(scope="module")
def build_python():
    require(shutil.which("nvcc") is not None or Path(NVCC_BIN, "nvcc").exists(), "nvcc is needed")
    return build_env(cache_dir("sgl-kernel-test-buildenv", f"torch-{TORCH}"), torch_python(TORCH))


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    root = tmp_path_factory.mktemp("mirror")
    write_mirror(root / "gh")
    server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory",
                               str(root)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = re.search(r"port (\d+)", server.stdout.readline()).group(1)
        yield f"http://127.0.0.1:{port}/gh"
    finally:
        server.terminate()
        server.wait()


def build(tmp_path, python, mirror, **keys):
    """prepare + run through the module; (plan, CMakeCache.txt text, nvcc compile lines, wheel scan)."""
    package = make_source(tmp_path / "src", "new", torch_pin=TORCH)
    rc, plan, err = run_module_directly("sgl_kernel_build", {
        "state": "prepare", "source_dir": str(package), "capabilities": ["12.0"], "cuda_version": "13.0",
        "torch_version": TORCH, "source_commit": "test", "narrow": False, "enable_fa3": "off",
        "mirror_url": mirror, "cores": 2, "memory_mb": 8192, "jobs": 2, "threads": 3, **keys})
    assert rc == 0, (plan, err)
    rc, run, err = run_module_directly("sgl_kernel_build", {
        "state": "run", "python": str(python), "source_dir": str(package), "wheel_dir": str(tmp_path / "out"),
        "build_dir": str(tmp_path / "b"), "cmake_defines": plan["cmake_defines"], "jobs": plan["jobs"],
        "memory_limit_mb": 6144, "limit_mechanisms": ["watchdog"], "timeout": 280,
        "environment": {"PATH": f"{NVCC_BIN}:{os.environ['PATH']}"},
        "log": str(tmp_path / "build.log"), "status_file": str(tmp_path / "status.json")})
    log = (tmp_path / "build.log").read_text()
    assert rc == 0, (run, log[-3000:], err)
    nvcc = [line for line in log.splitlines() if "nvcc" in line and " -c " in line]
    assert len(nvcc) == 8, log[-3000:]  # 4 units x 2 variants
    cache = (tmp_path / "b" / "CMakeCache.txt").read_text()
    return plan, cache, nvcc, scan_wheel(run["wheel"], ["12.0"], TORCH)


def cached(cache, name):
    """The value CMake's cache holds for ``name`` (any type), or None."""
    match = re.search(rf"^{re.escape(name)}:\w+=(.*)$", cache, re.M)
    return match.group(1) if match else None


def test_below_sm90_and_extra_cmake_args_change_what_cmake_and_nvcc_build(tmp_path, build_python, mirror):
    plan, cache, nvcc, scan = build(tmp_path / "stable", build_python, mirror,
                                    enable_below_sm90=True, extra_cmake_args=[])
    assert plan["cmake_defines"] == {"SGL_KERNEL_ENABLE_FA3": "OFF", "ENABLE_BELOW_SM90": "ON",
                                     "SGL_KERNEL_COMPILE_THREADS": "3"}
    assert cached(cache, "ENABLE_BELOW_SM90") == "ON"
    assert cached(cache, "SGL_KERNEL_ENABLE_BF16") == "ON"  # the option's default
    assert all("-DFLASHINFER_ENABLE_BF16" in line for line in nvcc)
    assert all(sorted(re.findall(r"-gencode[= ]arch=\S+", line)) == sorted([*BUILT_ALWAYS, SM80, SM89])
               for line in nvcc)
    for variant in ("sm90", "sm100"):
        assert scan["variants"][variant]["sass"] == ["sm_80", "sm_89", "sm_90", "sm_100f", "sm_120a"]

    plan, cache, nvcc, scan = build(tmp_path / "changed", build_python, mirror, enable_below_sm90=False,
                                    extra_cmake_args=["-DSGL_KERNEL_ENABLE_BF16=OFF"])
    assert plan["cmake_defines"] == {"SGL_KERNEL_ENABLE_FA3": "OFF", "ENABLE_BELOW_SM90": "OFF",
                                     "SGL_KERNEL_ENABLE_BF16": "OFF", "SGL_KERNEL_COMPILE_THREADS": "3"}
    assert SM80 in plan["gencodes_default"]
    assert SM80 not in plan["gencodes"]
    assert cached(cache, "ENABLE_BELOW_SM90") == "OFF"
    assert cached(cache, "SGL_KERNEL_ENABLE_BF16") == "OFF"
    assert not any("-DFLASHINFER_ENABLE_BF16" in line for line in nvcc)
    assert all(sorted(re.findall(r"-gencode[= ]arch=\S+", line)) == sorted(BUILT_ALWAYS) for line in nvcc)
    for variant in ("sm90", "sm100"):
        assert scan["variants"][variant]["sass"] == ["sm_90", "sm_100f", "sm_120a"]
    assert scan["fits"], scan["problems"]
