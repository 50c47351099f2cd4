"""module_utils/sgl_kernel_build.py in detail: the plan's messages and boundaries, gencode parsing and
the narrowing error (test_sgl_kernel_build.py has the main cases on an upstream-shaped CMakeLists)."""

import hashlib
import json
import re

import pytest
from ansible.module_utils.sgl_kernel_build import (
    BuildPlanError,
    build_fingerprint,
    capability_sort,
    cuda_can_compile,
    gencode_flag,
    gencode_for_target,
    narrow_gencodes,
    parse_gencode,
    plan_parallelism,
)

SM90 = "-gencode=arch=compute_90,code=sm_90"
SM90A = "-gencode=arch=compute_90a,code=sm_90a"
SM120A = "-gencode=arch=compute_120a,code=sm_120a"


def test_plan_limited_by_memory_in_full():
    assert plan_parallelism(cores=64, memory_mb=16384, per_compile_mb=3000, budget_mb=12000, gencodes=6) == {
        "jobs": 1, "threads": 4, "budget_mb": 12000, "estimated_peak_mb": 12000, "slots": 4,
        "reason": "4 compile slot(s) limited by memory budget (64 cores, 16384 MiB memory, budget 12000 MiB, "
                  "3000 MiB per device compile, 6 gencode(s) per unit): 1 unit(s) at once x 4 nvcc "
                  "thread(s), estimated peak 12000 MiB"}


def test_plan_limited_by_cores_in_full():
    plan = plan_parallelism(cores=16, memory_mb=131072, per_compile_mb=2048, gencodes=2)
    assert plan == {
        "jobs": 8, "threads": 2, "budget_mb": 129024, "estimated_peak_mb": 32768, "slots": 16,
        "reason": "16 compile slot(s) limited by cores (16 cores, 131072 MiB memory, budget 129024 MiB, "
                  "2048 MiB per device compile, 2 gencode(s) per unit): 8 unit(s) at once x 2 nvcc "
                  "thread(s), estimated peak 32768 MiB"}


@pytest.mark.parametrize(("cores", "limit"), [(4, "cores"), (5, "memory budget")])
def test_cores_equal_to_the_memory_slots_is_limited_by_cores(cores, limit):
    plan = plan_parallelism(cores=cores, memory_mb=64000, per_compile_mb=1000, budget_mb=4000)
    assert plan["slots"] == 4
    assert f"limited by {limit} " in plan["reason"]


def test_plan_budget_defaults_to_memory_minus_reserve_but_one_compile_at_least():
    assert plan_parallelism(cores=8, memory_mb=10000, per_compile_mb=1000)["budget_mb"] == 10000 - 2048
    plan = plan_parallelism(cores=8, memory_mb=10000, per_compile_mb=1000, reserve_mb=1000)
    assert plan["budget_mb"] == 9000
    assert plan_parallelism(cores=8, memory_mb=1024, per_compile_mb=4096)["budget_mb"] == 4096
    assert plan_parallelism(cores=8, memory_mb=6144, per_compile_mb=4096)["budget_mb"] == 4096


def test_one_gencode_per_unit_by_default():
    plan = plan_parallelism(cores=8, memory_mb=64000, per_compile_mb=1000)
    assert (plan["threads"], plan["jobs"]) == (1, 8)


def test_plan_threads_never_exceed_the_gencodes_and_jobs_use_the_rest():
    plan = plan_parallelism(cores=12, memory_mb=64000, per_compile_mb=1000, budget_mb=12000, gencodes=3)
    assert (plan["slots"], plan["threads"], plan["jobs"], plan["estimated_peak_mb"]) == (12, 3, 4, 12000)


@pytest.mark.parametrize(("override", "given", "peak", "verdict"), [
    ({"jobs": 2}, "jobs=2", 2 * 2 * 1000, "within the budget"),  # exactly the budget
    ({"threads": 3}, "threads=3", 1 * 3 * 1000, "within the budget"),
    ({"jobs": 4, "threads": 1}, "jobs=4, threads=1", 4000, "within the budget"),
    ({"jobs": 5, "threads": 1}, "jobs=5, threads=1", 5000,
     "OVER; the memory limit stops the build if it really uses that much: the budget"),
])
def test_user_override_reason_in_full(override, given, peak, verdict):
    plan = plan_parallelism(cores=2, memory_mb=64000, per_compile_mb=1000, budget_mb=4000, gencodes=3,
                            **override)
    assert plan["estimated_peak_mb"] == peak
    assert plan["reason"] == (f"user override ({given}); estimated peak {peak} MiB is {verdict} (2 cores, "
                              "64000 MiB memory, budget 4000 MiB, 1000 MiB per device compile, 3 gencode(s) "
                              "per unit)")


@pytest.mark.parametrize(("field", "value", "message"), [
    ("cores", None, "cores is required"),
    ("memory_mb", "", "memory_mb is required"),
    ("per_compile_mb", True, "per_compile_mb must be a whole number, not a boolean"),
    ("gencodes", "many", "gencodes must be a whole number (got 'many')"),
    ("gencodes", None, "gencodes is required"),
    ("per_compile_mb", None, "per_compile_mb is required"),
    ("jobs", 0, "sgl_kernel_build_jobs must be at least 1 (got 0)"),
    ("threads", [2], "sgl_kernel_compile_threads must be a whole number (got [2])"),
    ("budget_mb", -5, "sgl_kernel_build_memory_mb must be at least 1 (got -5)"),
])
def test_plan_input_errors_in_full(field, value, message):
    args = {"cores": 2, "memory_mb": 4096, "per_compile_mb": 1000, field: value}
    with pytest.raises(BuildPlanError) as caught:
        plan_parallelism(**args)
    assert str(caught.value) == message


def test_plan_takes_numbers_as_text_and_empty_overrides_as_none():
    plan = plan_parallelism(cores="4", memory_mb="8192", per_compile_mb="1000", gencodes="1", jobs="",
                            threads=None, budget_mb="")
    assert (plan["jobs"], plan["threads"], plan["budget_mb"]) == (4, 1, 6144)
    assert plan["reason"].startswith("4 compile slot(s) limited by cores")


@pytest.mark.parametrize(("flag", "parsed"), [
    ("-gencode=arch=compute_90a,code=sm_90a", ("compute_90a", "sm_90a")),
    ("  -gencode arch=compute_90a,code=[sm_90a,compute_90a] ", ("compute_90a", "sm_90a,compute_90a")),
    ("-gencode=arch=compute_80,code=compute_80", ("compute_80", "compute_80")),
    ("--expt-relaxed-constexpr", None),
    ("-gencode=arch=sm_80,code=sm_80", None),
    ("x-gencode=arch=compute_80,code=sm_80", None),
    ("-gencode=arch=compute_80,code=sm_80 -O3", None),
])
def test_parse_gencode(flag, parsed):
    assert parse_gencode(flag) == parsed


@pytest.mark.parametrize(("target", "flag"), [
    ("sm_120f", "-gencode=arch=compute_120f,code=sm_120f"),
    ("sm_90a", "-gencode=arch=compute_90a,code=sm_90a"),
    ("compute_90", "-gencode=arch=compute_90,code=compute_90"),
])
def test_gencode_for_target(target, flag):
    assert gencode_for_target(target) == flag
    assert gencode_flag("compute_90", "sm_90") == SM90


@pytest.mark.parametrize(("target", "cuda", "ok"), [
    ("sm_100f", "12.9", True), ("sm_100f", "12.8", False), ("sm_100a", "12.8", True),
    ("sm_100", "12.7", False),
    ("sm_90a", "11.8", True), ("sm_89", "11.7", False), ("sm_120a", 13.0, True), ("sm_80", "", False)])
def test_cuda_can_compile_boundaries(target, cuda, ok):
    assert cuda_can_compile(target, cuda) is ok


def test_ptx_in_the_list_covers_newer_capabilities():
    ptx = "-gencode=arch=compute_90,code=compute_90"
    assert narrow_gencodes(["12.0"], [SM90, ptx, SM120A], cuda_version="13.0") == ([ptx, SM120A], [])


def test_kept_flags_follow_the_builds_order_and_extras_come_once():
    assert narrow_gencodes(["9.0", "12.0"], [SM120A, "--other", SM90A, SM90], cuda_version="13.0") == (
        [SM120A, SM90A, SM90], [])
    assert narrow_gencodes(["12.1", "12.7"], [SM90], cuda_version="13.0") == (
        [], ["-gencode=arch=compute_120f,code=sm_120f"])


def test_narrowing_error_in_full():
    with pytest.raises(BuildPlanError) as caught:
        narrow_gencodes(["9.0", "12.1", "10.0"], [SM120A, SM90], cuda_version="12.4")
    assert str(caught.value) == (
        "no gencode of this build runs on capability 12.1, 10.0 (it compiles sm_90, sm_120a) and CUDA 12.4 "
        "cannot add one (sm_120f, sm_121a, sm_121, compute_121); use a newer CUDA toolkit")
    with pytest.raises(BuildPlanError) as caught:
        narrow_gencodes(["8.0"], ["--no-gencode"], cuda_version=None)
    assert str(caught.value) == (
        "no gencode of this build runs on capability 8.0 (it compiles none) and CUDA of unknown version "
        "cannot add one (sm_80, compute_80); use a newer CUDA toolkit")


def test_fingerprint_inputs_are_canonical():
    digest, inputs = build_fingerprint(1234, 13.0, "2.9.1", gencodes=[SM90A, SM90, SM90A], variants=["sm90"],
                                       flags=["-DB=2", "-DA=1", 3], python_tag="cp312")
    assert inputs == {"source_commit": "1234", "cuda": "13.0", "torch": "2.9.1", "gencodes": [SM90, SM90A],
                      "variants": ["sm90"], "flags": ["-DB=2", "-DA=1", "3"], "python_tag": "cp312"}
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()
    assert digest == hashlib.sha256(blob).hexdigest()
    assert build_fingerprint(1234, 13.0, "2.9.1", gencodes=[], variants=[], flags=[])[1]["python_tag"] == ""


def test_fingerprint_without_a_commit_says_what_to_give():
    with pytest.raises(BuildPlanError) as caught:
        build_fingerprint(None, "13.0", "2.9.1", gencodes=[], variants=[], flags=[])
    assert str(caught.value) == ("the source commit is unknown; give sgl_kernel_source_ref as a commit or an "
                                 "archive whose sha256 identifies it")


def test_capability_sort():
    assert capability_sort(["12.0", "9.0", "10.0", "9.0", "8.6"]) == ["8.6", "9.0", "10.0", "12.0"]


def test_a_gencode_with_several_codes():
    multi = "-gencode=arch=compute_90a,code=[sm_90a,compute_90a]"
    assert narrow_gencodes(["9.0"], [multi, SM120A], cuda_version="13.0") == ([multi], [])
    with pytest.raises(BuildPlanError) as caught:
        narrow_gencodes(["8.0"], [multi, SM120A], cuda_version=None)
    # sm_90a and compute_90a sort equal, so either may come first
    assert re.search(r"\(it compiles (sm_90a, compute_90a|compute_90a, sm_90a), sm_120a\)", str(caught.value))
