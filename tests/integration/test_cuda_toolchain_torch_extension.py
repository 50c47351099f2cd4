"""The pip method's toolkit (NVIDIA's CUDA wheels, laid out by the role) builds a CUDA torch extension with
CMake, the shape of the later kernel build: CMake finds nvcc, the CUDA toolkit and torch (2.14.1, cu130)
from the role's published environment alone, and the module it links holds sm_120a code and imports.

Run on the controller (the role against localhost into a temporary prefix): the torch venv is here
already, and the fleet hosts would need several GB of torch copied in for the same answer.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.cuda_binaries import inspect_binaries
from ansible_run import run_playbook
from cache import pip_download
from prereq import require
from torchenv import torch_python

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "tests" / "fixtures" / "cuda_torch_extension"
DEFAULTS = yaml.safe_load((REPO / "roles" / "cuda_toolchain" / "defaults" / "main.yml").read_text())
PIP_PINS = DEFAULTS["cuda_toolchain_pip_packages_by_version"]["13.0"]
# The kernel build's own build tools (scikit-build-core pulls them as wheels; CMake >= 3.26 is needed).
BUILD_TOOLS = ["cmake==3.31.10", "ninja==1.13.2"]


@pytest.fixture(scope="module")
def pip_toolkit(tmp_path_factory):
    wheelhouse = pip_download([f"{name}=={version}" for name, version in PIP_PINS.items()])
    prefix = tmp_path_factory.mktemp("cuda-pip") / "prefix"
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"stack_profile_data": {"cuda": {"version": "13.0"}},
                      "stack_target_capabilities": ["12.0"]},
             "roles": [{"role": "cuda_toolchain",
                        "vars": {"cuda_toolchain_method": "pip", "cuda_toolchain_pip_prefix": str(prefix),
                                 "cuda_toolchain_pip_python": sys.executable,
                                 "cuda_toolchain_pip_find_links": str(wheelhouse),
                                 "cuda_toolchain_pip_extra_args": "--no-index"}}]}]
    result = run_playbook(play, envvars={"ANSIBLE_CACHE_PLUGIN": "memory"})
    assert result.rc == 0, result.stdout
    facts = result.task("localhost", "Publish the toolkit (cuda_toolchain_home, _nvcc, _version, _env)")
    return facts["ansible_facts"]


@pytest.fixture(scope="module")
def build_tools(tmp_path_factory):
    wheelhouse = pip_download(BUILD_TOOLS)
    venv = tmp_path_factory.mktemp("build-tools")
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                    "--no-index", "--find-links", str(wheelhouse), *BUILD_TOOLS], check=True)
    return venv / "bin"


def test_pip_toolkit_builds_a_torch_extension_with_cmake(pip_toolkit, build_tools, tmp_path):
    require(subprocess.run(["g++", "--version"], capture_output=True, check=False).returncode == 0,
            "g++ missing: apt-get install -y g++")
    torch = torch_python("2.14.1")
    home = pip_toolkit["cuda_toolchain_home"]
    assert home.endswith("/site-packages/nvidia/cu13")
    env = {**os.environ, **pip_toolkit["cuda_toolchain_env"], "TORCH_CUDA_ARCH_LIST": "12.0a"}
    env["PATH"] = f"{build_tools}{os.pathsep}{env['PATH']}"
    build = tmp_path / "build"
    configure = subprocess.run([str(build_tools / "cmake"), "-S", str(SOURCE), "-B", str(build), "-G",
                                "Ninja", f"-DPython_EXECUTABLE={torch}"], env=env, capture_output=True,
                               text=True, check=False, timeout=600)
    assert configure.returncode == 0, configure.stdout + configure.stderr
    cache = (build / "CMakeCache.txt").read_text()
    # CMake took the toolkit from the published environment, not the machine's /usr/local/cuda
    assert re.search(rf"^CMAKE_CUDA_COMPILER:\w+={re.escape(home)}/bin/nvcc$", cache, re.MULTILINE), cache
    assert re.search(rf"^CUDA_nvrtc_LIBRARY:\w+={re.escape(home)}/lib/libnvrtc.so$", cache, re.MULTILINE)
    assert "-gencode;arch=compute_120a,code=sm_120a" in configure.stdout
    compile_ = subprocess.run([str(build_tools / "cmake"), "--build", str(build)], env=env,
                              capture_output=True, text=True, check=False, timeout=900)
    assert compile_.returncode == 0, compile_.stdout + compile_.stderr
    [module] = build.glob("scale_ext*.so")
    report = inspect_binaries([str(module)], ["12.0"])
    assert report["files"][0]["sass"] == ["sm_120a"]
    assert report["missing"] == {"12.0": []}
    # it links against this torch and loads (no GPU: the op is not called)
    loaded = subprocess.run([str(torch), "-c", "import torch, scale_ext; print(scale_ext.scale.__doc__)"],
                            cwd=build, capture_output=True, text=True, check=False, timeout=300)
    assert loaded.returncode == 0, loaded.stderr
    assert "multiply a float32 CUDA tensor by a factor" in loaded.stdout
