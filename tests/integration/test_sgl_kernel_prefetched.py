"""sgl_kernel_prefetched_sources with the real CMake: the define prepare_source plans for a pre-fetched
dependency is the one FetchContent reads, so CMake takes the directory and downloads nothing.

FetchContent upper-cases the dependency's name and nothing else (FETCHCONTENT_SOURCE_DIR_REPO-TINYDEP for
repo-tinydep): a variable with ``_`` for ``-`` is ignored and CMake goes online. That was this project's
bug until mutation testing found it; the second test pins the CMake behaviour it rests on (cmake 3.25
here; the FetchContent module of 3.31 does the same)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from ansible.module_utils.sgl_kernel_source import prepare_source
from prereq import require

pytestmark = pytest.mark.integration

# ${GITHUB_ARTIFACTORY} as upstream writes it; .invalid never resolves, so a download fails at once
CMAKELISTS = """cmake_minimum_required(VERSION 3.18)
project(prefetch_probe NONE)
include(FetchContent)
set(SGL_KERNEL_CUDA_FLAGS "-gencode=arch=compute_90,code=sm_90")
FetchContent_Declare(
    repo-tinydep
    URL      https://${GITHUB_ARTIFACTORY}/fleet-test/tinydep/archive/v1.tar.gz
    URL_HASH SHA256=0000000000000000000000000000000000000000000000000000000000000000
)
FetchContent_Populate(repo-tinydep)
file(READ "${repo-tinydep_SOURCE_DIR}/marker.txt" MARKER)
message(STATUS "tinydep marker: ${MARKER}")
"""


@pytest.fixture
def package(tmp_path):
    require(shutil.which("cmake") is not None, "cmake is needed")
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "CMakeLists.txt").write_text(CMAKELISTS)
    (pkg / "pyproject.toml").write_text('[project]\nname = "probe"\ndependencies = ["torch==2.13.0"]\n')
    fetched = tmp_path / "tinydep"
    fetched.mkdir()
    (fetched / "marker.txt").write_text("prefetched")
    return pkg, fetched


def configure(pkg, build, defines):
    args = [f"-D{name}={value}" for name, value in defines.items()]
    return subprocess.run(["cmake", "-S", str(pkg), "-B", str(build), "-DGITHUB_ARTIFACTORY=example.invalid",
                           *args], capture_output=True, text=True, timeout=120, check=False)


def test_the_planned_define_makes_cmake_use_the_prefetched_directory(tmp_path, package):
    pkg, fetched = package
    plan = prepare_source(str(pkg), ["9.0"], "13.0", "2.13.0", "test", narrow=False,
                          prefetched={"repo-tinydep": str(fetched)})
    assert plan["cmake_defines"]["FETCHCONTENT_SOURCE_DIR_REPO-TINYDEP"] == str(fetched)
    proc = configure(pkg, tmp_path / "build", plan["cmake_defines"])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "tinydep marker: prefetched" in proc.stdout


def test_cmake_ignores_the_name_with_underscores(tmp_path, package):
    # fully disconnected, so that the ignored variable shows without waiting for a download's retries:
    # FetchContent then takes its own empty source directory instead of the prefetched one
    pkg, fetched = package
    proc = configure(pkg, tmp_path / "build", {"FETCHCONTENT_SOURCE_DIR_REPO_TINYDEP": str(fetched),
                                               "FETCHCONTENT_FULLY_DISCONNECTED": "ON"})
    assert proc.returncode != 0
    assert "tinydep marker: prefetched" not in proc.stdout
    assert "_deps/repo-tinydep-src/marker.txt" in proc.stderr, proc.stderr[-3000:]
    # the same with the planned name: the prefetched directory, still nothing downloaded
    proc = configure(pkg, tmp_path / "build2", {"FETCHCONTENT_SOURCE_DIR_REPO-TINYDEP": str(fetched),
                                                "FETCHCONTENT_FULLY_DISCONNECTED": "ON"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "tinydep marker: prefetched" in proc.stdout
