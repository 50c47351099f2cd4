"""module_utils/sgl_kernel_build.py: parallelism plan, arch narrowing, fingerprint, offline dependencies.

The CMakeLists text below is written here in upstream's shape (sglang-kernel 0.4.x: a flag list with
gencodes hard-coded by CUDA version, FetchContent tarballs under ${GITHUB_ARTIFACTORY}); the real
build of the same shape is tests/kernel_pkg, exercised by the integration tests.
"""

import pytest
from ansible.module_utils.sgl_kernel_build import (
    BuildPlanError,
    build_fingerprint,
    cuda_can_compile,
    narrow_gencodes,
    needed_variants,
    plan_parallelism,
)
from ansible.module_utils.sgl_kernel_source import (
    cmake_gencodes,
    fetchcontent_dependencies,
    fetchcontent_source_var,
    narrow_cmake_gencodes,
    offline_cmake_defines,
    resolve_url,
)

CMAKE = """
FetchContent_Declare(
    repo-cutlass
    URL      https://${GITHUB_ARTIFACTORY}/NVIDIA/cutlass/archive/57e3cfb4.tar.gz
    URL_HASH SHA256=09237099A70F80BFF1DC8BB80C843A674BB4FDCB46E43CC6993E711C5CA89BB5
)
FetchContent_Populate(repo-cutlass)
# fmt (a comment with URL words in it)
FetchContent_Declare(repo-fmt GIT_REPOSITORY https://github.com/fmtlib/fmt GIT_TAG 11.1.4 GIT_SHALLOW TRUE)
set(SGL_KERNEL_CUDA_FLAGS
    "-O3"
    "-gencode=arch=compute_90,code=sm_90"
    "--expt-relaxed-constexpr"
)
if (ENABLE_BELOW_SM90)
    list(APPEND SGL_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_80,code=sm_80"
        "-gencode=arch=compute_89,code=sm_89"
    )
endif()
if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.8")
    list(APPEND SGL_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_100f,code=sm_100f"
        "-gencode=arch=compute_120a,code=sm_120a"
    )
endif()
if (SGL_KERNEL_ENABLE_FA3)
    list(APPEND SGL_KERNEL_CUDA_FLAGS "-gencode=arch=compute_90a,code=sm_90a")
endif()
set(FLASH_FLAGS
    "-gencode=arch=compute_90a,code=sm_90a"
)
"""
DEFAULT = ["-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_80,code=sm_80",
           "-gencode=arch=compute_89,code=sm_89", "-gencode=arch=compute_100f,code=sm_100f",
           "-gencode=arch=compute_120a,code=sm_120a", "-gencode=arch=compute_90a,code=sm_90a"]


def test_cmake_gencodes_reads_every_list_in_order():
    assert cmake_gencodes(CMAKE) == DEFAULT


@pytest.mark.parametrize(("capabilities", "kept", "extra"), [
    (["12.0"], ["-gencode=arch=compute_120a,code=sm_120a"], []),
    (["10.0", "10.3"], ["-gencode=arch=compute_100f,code=sm_100f"], []),
    (["9.0"], ["-gencode=arch=compute_90,code=sm_90", "-gencode=arch=compute_90a,code=sm_90a"], []),
    (["8.6"], ["-gencode=arch=compute_80,code=sm_80"], []),
    # 12.1 (GB10): sm_120a is 12.0 only, so the family target is added.
    (["12.1"], [], ["-gencode=arch=compute_120f,code=sm_120f"]),
    (["12.0", "12.1"], ["-gencode=arch=compute_120a,code=sm_120a"],
     ["-gencode=arch=compute_120f,code=sm_120f"]),
])
def test_narrow_gencodes(capabilities, kept, extra):
    assert narrow_gencodes(capabilities, DEFAULT, cuda_version="13.0") == (kept, extra)


def test_narrow_gencodes_fails_when_cuda_cannot_add_the_target():
    with pytest.raises(BuildPlanError, match=r"capability 12\.1 .* CUDA 12\.4 cannot add one"):
        narrow_gencodes(["12.1"], DEFAULT, cuda_version="12.4")


@pytest.mark.parametrize(("target", "cuda", "ok"), [
    ("sm_120f", "12.9", True), ("sm_120f", "12.8", False), ("sm_120a", "12.8", True),
    ("sm_100a", "12.4", False), ("sm_90a", "12.4", True), ("sm_90", None, False)])
def test_cuda_can_compile(target, cuda, ok):
    assert cuda_can_compile(target, cuda) is ok


@pytest.mark.parametrize(("capabilities", "variants"), [
    (["12.0"], ["sm100"]), (["9.0"], ["sm90"]), (["9.0", "10.0", "12.1"], ["sm100", "sm90"]), ([], [])])
def test_needed_variants_follow_the_loader(capabilities, variants):
    assert needed_variants(capabilities) == variants


def test_narrow_cmake_comments_out_dropped_gencodes_only():
    keep = ["-gencode=arch=compute_120a,code=sm_120a"]
    text, removed = narrow_cmake_gencodes(CMAKE, keep)
    assert cmake_gencodes(text) == keep
    assert set(removed) == set(DEFAULT) - set(keep)
    assert '    "--expt-relaxed-constexpr"\n' in text  # other flags untouched
    assert "# sgl_kernel narrowed: \"-gencode=arch=compute_80,code=sm_80\"" in text
    # a one-line list(APPEND ...) loses the flag and keeps its syntax
    assert "list(APPEND SGL_KERNEL_CUDA_FLAGS )" in text


def test_narrow_cmake_adds_extras_once_per_flag_variable():
    extra = ["-gencode=arch=compute_120f,code=sm_120f"]
    text, _removed = narrow_cmake_gencodes(CMAKE, [], extra)
    assert text.count('"-gencode=arch=compute_120f,code=sm_120f"') == 2  # SGL_KERNEL_CUDA_FLAGS, FLASH_FLAGS
    assert cmake_gencodes(text) == extra


def test_plan_is_limited_by_memory_on_a_small_host():
    plan = plan_parallelism(cores=64, memory_mb=16384, per_compile_mb=3000, budget_mb=12000, gencodes=6)
    assert (plan["jobs"], plan["threads"]) == (1, 4)
    assert plan["estimated_peak_mb"] <= 12000
    assert "limited by memory budget" in plan["reason"]


def test_plan_is_limited_by_cores_on_a_big_host():
    plan = plan_parallelism(cores=16, memory_mb=131072, per_compile_mb=2048, gencodes=2)
    assert plan["budget_mb"] == 131072 - 2048
    assert (plan["jobs"], plan["threads"]) == (8, 2)
    assert "limited by cores" in plan["reason"]


def test_plan_never_goes_below_one():
    plan = plan_parallelism(cores=2, memory_mb=1024, per_compile_mb=4096, gencodes=6)
    assert (plan["jobs"], plan["threads"]) == (1, 1)


def test_user_override_wins_and_is_flagged_when_over_budget():
    plan = plan_parallelism(cores=2, memory_mb=24000, per_compile_mb=2000, budget_mb=3000, gencodes=6,
                            jobs=4, threads=8)
    assert (plan["jobs"], plan["threads"]) == (4, 8)
    assert plan["estimated_peak_mb"] == 4 * 6 * 2000
    assert "user override (jobs=4, threads=8)" in plan["reason"]
    assert "OVER" in plan["reason"]


@pytest.mark.parametrize(("field", "value"), [("jobs", 0), ("threads", "many"), ("budget_mb", True)])
def test_plan_rejects_bad_numbers(field, value):
    with pytest.raises(BuildPlanError, match=r"whole number|at least 1"):
        plan_parallelism(cores=2, memory_mb=4096, per_compile_mb=1000, **{field: value})


def test_fingerprint_is_stable_and_covers_each_input():
    base = dict(source_commit="abc", cuda_version="13.0", torch_version="2.14.1",
                gencodes=["-gencode=arch=compute_120a,code=sm_120a"], variants=["sm100"], flags=["-DX=1"])
    first, inputs = build_fingerprint(**base)
    assert build_fingerprint(**dict(base, variants=["sm100", "sm100"]))[0] == first
    assert inputs["torch"] == "2.14.1"
    for key, value in [("source_commit", "abd"), ("cuda_version", "12.9"), ("torch_version", "2.15.0"),
                       ("gencodes", []), ("variants", ["sm90"]), ("flags", [])]:
        assert build_fingerprint(**dict(base, **{key: value}))[0] != first, key
    with pytest.raises(BuildPlanError, match="source commit is unknown"):
        build_fingerprint(**dict(base, source_commit=""))


def test_fetchcontent_dependencies_are_read_from_the_cmakelists():
    deps = fetchcontent_dependencies(CMAKE)
    assert deps == [
        {"name": "repo-cutlass", "url": "https://${GITHUB_ARTIFACTORY}/NVIDIA/cutlass/archive/57e3cfb4.tar.gz",
         "sha256": "09237099a70f80bff1dc8bb80c843a674bb4fdcb46e43cc6993e711c5ca89bb5",
         "git_repository": None, "git_tag": None},
        {"name": "repo-fmt", "url": None, "sha256": None, "git_repository": "https://github.com/fmtlib/fmt",
         "git_tag": "11.1.4"}]
    assert resolve_url(deps[0]["url"], {"GITHUB_ARTIFACTORY": "10.0.0.1:8000/gh"}) == \
        "https://10.0.0.1:8000/gh/NVIDIA/cutlass/archive/57e3cfb4.tar.gz"
    assert fetchcontent_source_var("repo-flash-attention") == "FETCHCONTENT_SOURCE_DIR_REPO-FLASH-ATTENTION"


def test_offline_defines_use_mirror_and_prefetched_dirs():
    deps = fetchcontent_dependencies(CMAKE)
    assert offline_cmake_defines(deps, "mirror.local/gh/", {"repo-fmt": "/srv/fmt"}) == [
        "-DGITHUB_ARTIFACTORY=mirror.local/gh", "-DFETCHCONTENT_SOURCE_DIR_REPO-FMT=/srv/fmt"]
    # a git dependency cannot come from the tarball mirror: it must be named
    with pytest.raises(BuildPlanError, match="repo-fmt would be downloaded"):
        offline_cmake_defines(deps, "mirror.local/gh")
