"""The test package (tests/kernel_pkg) built on this machine with the real nvcc, through the same
prepare + limited-run code the role uses: narrowing and the planned parallelism seen in the build's own
command lines, and the memory limit where a cgroup enforces it (root on this machine: the v1 memory
controller; fleet hosts cannot, see tests/integration/fleet/test_sgl_kernel_role.py for the watchdog)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from ansible.module_utils.sgl_kernel_runner import MIB, run_limited, setup_cgroup_v1
from ansible.module_utils.sgl_kernel_source import prepare_source
from ansible.module_utils.sgl_kernel_wheel import scan_wheel
from cache import cache_dir
from kernelpkg import build_env, make_source, write_mirror
from prereq import require
from torchenv import torch_python

pytestmark = pytest.mark.integration
NVCC_BIN = "/usr/local/cuda/bin"


@pytest.fixture(scope="module")
def build_python():
    require(shutil.which("nvcc") is not None or Path(NVCC_BIN, "nvcc").exists(), "nvcc is needed")
    return build_env(cache_dir("sgl-kernel-test-buildenv", "torch-2.13.0"), torch_python("2.13.0"))


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    root = tmp_path_factory.mktemp("mirror")
    write_mirror(root / "gh")
    server = subprocess.Popen(["python3", "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory",
                               str(root)], stdout=subprocess.PIPE, text=True)
    try:
        port = re.search(r"port (\d+)", server.stdout.readline()).group(1)
        yield f"http://127.0.0.1:{port}/gh"
    finally:
        server.terminate()
        server.wait()


def require_cgroup_v1():
    path, why = setup_cgroup_v1(f"pytest-probe-{os.getpid()}", 1 << 30)
    if path:
        os.rmdir(path)
    require(path is not None, f"needs a writable v1 memory cgroup (root): {why}")


def build(python, tmp_path, mirror, capabilities, *, limit_mb, jobs=2, threads=1, mechanisms=("cgroup-v1",)):
    package = make_source(tmp_path / "src", "old", torch_pin="2.13.0")
    plan = prepare_source(str(package), capabilities, "13.0", "2.13.0", "test", mirror_url=mirror)
    defines = dict(plan["cmake_defines"], SGL_KERNEL_COMPILE_THREADS=str(threads))
    argv = [str(python), "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "--no-index",
            "--wheel-dir", str(tmp_path / "out"), str(package),
            f"--config-settings=build-dir={tmp_path / 'b'}", "--config-settings=build.verbose=true",
            *(f"--config-settings=cmake.define.{k}={v}" for k, v in sorted(defines.items()))]
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(jobs), PATH=f"{NVCC_BIN}:{os.environ['PATH']}")
    status = run_limited(argv, log_path=str(tmp_path / "build.log"), status_path=str(tmp_path / "s.json"),
                         limit_bytes=limit_mb * MIB, timeout=900, env=env, name="pytest",
                         mechanisms=mechanisms)
    return status, (tmp_path / "build.log").read_text(), sorted((tmp_path / "out").glob("*.whl"))


def test_narrowed_build_for_12_0_under_a_cgroup(build_python, mirror, tmp_path):
    require_cgroup_v1()
    status, log, wheels = build(build_python, tmp_path, mirror, ["12.0"], limit_mb=4096)
    assert status["rc"] == 0, log[-3000:]
    assert status["mechanism"] == "cgroup-v1"
    assert 0 < status["peak_bytes"] <= 4096 * MIB
    nvcc = [line for line in log.splitlines() if "nvcc" in line and " -c " in line]
    assert len(nvcc) == 4  # 4 units, one variant
    assert all("--threads=1" in line for line in nvcc)
    assert all(re.findall(r"-gencode[= ]arch=\S+", line) == ["-gencode=arch=compute_120a,code=sm_120a"]
               for line in nvcc)
    scan = scan_wheel(str(wheels[0]), ["12.0"], "2.13.0")
    assert scan["fits"], scan["problems"]
    assert scan["variants"] == {"sm100": {"member": "sgl_kernel/sm100/common_ops.abi3.so",
                                          "sass": ["sm_120a"], "ptx": []}}


def test_cgroup_v1_limit_stops_a_build_past_its_budget(build_python, mirror, tmp_path):
    require_cgroup_v1()
    neighbour = subprocess.Popen(["sleep", "300"])  # another process of this host
    try:
        status, log, wheels = build(build_python, tmp_path, mirror, ["9.0", "12.0"], limit_mb=120)
        assert status["mechanism"] == "cgroup-v1"
        assert status["rc"] != 0
        assert wheels == []
        assert status["killed_by"] == "cgroup-v1 memory limit (OOM kill in the cgroup)", log[-2000:]
        assert neighbour.poll() is None
    finally:
        neighbour.kill()
        neighbour.wait()
