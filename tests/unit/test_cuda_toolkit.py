"""The minimum-CUDA rule (cuda_arch) and the reading of nvcc's answers (cuda_toolkit), without nvcc."""

from pathlib import Path

import pytest
from ansible.module_utils.cuda_arch import (
    ArchError,
    cuda_requirements,
    cuda_version_tuple,
    kernel_target,
    min_cuda_for_target,
)
from ansible.module_utils.cuda_toolkit import (
    ToolkitError,
    check_toolkit,
    find_nvcc,
    inspect_toolkit,
    parse_gpu_arch_list,
    parse_nvcc_version,
    parse_toolkit_root,
    toolkit_env,
)

STAND_IN = Path(__file__).resolve().parents[1] / "stand_ins" / "nvcc-12.6"

# Captured from this machine's nvcc 13.0 (/usr/local/cuda-13.0/bin/nvcc).
NVCC_13_VERSION = """nvcc: NVIDIA (R) Cuda compiler driver
Copyright (c) 2005-2025 NVIDIA Corporation
Built on Wed_Aug_20_01:58:59_PM_PDT_2025
Cuda compilation tools, release 13.0, V13.0.88
Build cuda_13.0.r13.0/compiler.36424714_0
"""
NVCC_13_ARCHS = ("compute_75\ncompute_80\ncompute_86\ncompute_87\ncompute_88\ncompute_89\ncompute_90\n"
                 "compute_100\ncompute_110\ncompute_103\ncompute_120\ncompute_121\n")
NVCC_13_DRYRUN = """#$ _NVVM_BRANCH_=nvvm
#$ _HERE_=/usr/local/cuda-13.0/bin
#$ _THERE_=/usr/local/cuda-13.0/bin
#$ TOP=/usr/local/cuda-13.0/bin/..
#$ cudafe++ --c++17 ...
"""
NVCC_13_FACTS = {"nvcc": "/usr/local/cuda-13.0/bin/nvcc", "home": "/usr/local/cuda-13.0", "version": "13.0",
                 "version_full": "13.0.88", "gpu_archs": parse_gpu_arch_list(NVCC_13_ARCHS)}


@pytest.mark.parametrize(("target", "version"), [
    ("sm_120a", "12.8"), ("sm_120f", "12.9"), ("sm_120", "12.8"), ("compute_120", "12.8"),
    ("sm_121a", "12.9"), ("sm_100a", "12.8"), ("sm_100f", "12.9"), ("sm_103a", "12.9"),
    ("sm_110a", "13.0"), ("sm_90a", "12.0"), ("sm_90", "11.8"), ("sm_89", "11.8"), ("sm_88", "13.0"),
    ("sm_80", "11.0"), ("86", "11.1"), ("7.5", "10.0"), ("sm_130a", None),
])
def test_first_cuda_release_of_each_target(target, version):
    assert min_cuda_for_target(target) == version


@pytest.mark.parametrize("target", ["sm_80a", "sm_90f", "compute_89a"])
def test_targets_that_do_not_exist(target):
    with pytest.raises(ArchError, match="is not a CUDA target"):
        min_cuda_for_target(target)


@pytest.mark.parametrize(("capability", "target"), [("12.0", "sm_120a"), ("9.0", "sm_90a"), ("8.9", "sm_89")])
def test_kernel_target_is_arch_specific_from_hopper_on(capability, target):
    assert kernel_target(capability) == target


@pytest.mark.parametrize(("capabilities", "extra", "expected"), [
    (["12.0", "10.0"], [], ("12.8", "sm_120a needs CUDA >= 12.8", ["compute_100", "compute_120"], None)),
    (["12.0"], ["sm_120f"], ("12.9", "sm_120f needs CUDA >= 12.9", ["compute_120"], None)),
    (["12.1"], [], ("12.9", "sm_121a needs CUDA >= 12.9", ["compute_121"], None)),
    (["9.0", "8.0"], [], ("12.0", "sm_90a needs CUDA >= 12.0", ["compute_80", "compute_90"], None)),
    (["11.0"], [], ("13.0", "sm_110a needs CUDA >= 13.0", ["compute_110"], None)),
    (["7.0", "9.0"], [], ("12.0", "sm_90a needs CUDA >= 12.0", ["compute_70", "compute_90"], 12)),
    (["13.0"], [], (None, None, ["compute_130"], None)),  # newer than the table: nvcc's list decides
])
def test_cuda_requirements(capabilities, extra, expected):
    min_version, reason, compute, max_major = expected
    needs = cuda_requirements(capabilities, extra)
    assert (needs["min_version"], needs["min_version_reason"]) == (min_version, reason)
    assert needs["compute_archs"] == compute
    assert needs["max_major"] == max_major


@pytest.mark.parametrize(("text", "expected"), [("13.0", (13, 0)), ("12.8", (12, 8)), ("13.0.88", (13, 0))])
def test_cuda_version_tuple(text, expected):
    assert cuda_version_tuple(text) == expected


@pytest.mark.parametrize("bad", ["13", "13.x", 13.0, "", True])
def test_cuda_version_tuple_rejects(bad):
    with pytest.raises(ArchError, match="is not a CUDA version"):
        cuda_version_tuple(bad)


def test_parse_nvcc_13():
    assert parse_nvcc_version(NVCC_13_VERSION) == ("13.0", "13.0.88")
    assert parse_gpu_arch_list(NVCC_13_ARCHS) == [
        "compute_75", "compute_80", "compute_86", "compute_87", "compute_88", "compute_89", "compute_90",
        "compute_100", "compute_103", "compute_110", "compute_120", "compute_121"]
    assert parse_toolkit_root(NVCC_13_DRYRUN) == "/usr/local/cuda-13.0"


@pytest.mark.parametrize(("parse", "text"), [
    (parse_nvcc_version, "gcc (Debian 12.2.0-14) 12.2.0"), (parse_nvcc_version, ""),
    (parse_gpu_arch_list, "nvcc fatal   : Unknown option '--list-gpu-arch'"),
])
def test_parse_rejects_what_is_not_nvcc(parse, text):
    with pytest.raises(ToolkitError):
        parse(text)


def test_toolkit_13_fits_blackwell():
    problems, needs, missing = check_toolkit(NVCC_13_FACTS, ["12.0", "10.0"], version="13.0")
    assert (problems, missing) == ([], [])
    assert needs["min_version"] == "12.8"


def test_toolkit_13_cannot_target_volta():
    problems, _needs, missing = check_toolkit(NVCC_13_FACTS, ["7.0"])
    assert missing == ["compute_70"]
    assert "CUDA 13.0 cannot target capability 7.0" in problems[0]
    assert "cannot target compute_70" in problems[1]


def test_a_different_release_than_the_stack_asks_for():
    problems, _needs, _missing = check_toolkit(NVCC_13_FACTS, ["12.0"], version="12.9")
    assert problems == ["the stack asks for CUDA 12.9 but the toolkit is CUDA 13.0"]


def test_a_release_alone_is_checked_before_installing():
    problems, _needs, missing = check_toolkit({"version": "12.6"}, ["12.0"])
    assert problems == [
        "CUDA 12.6 is older than the targets need: sm_120a needs CUDA >= 12.8 (targets sm_120a)"]
    assert missing == []
    assert check_toolkit({"version": "12.8"}, ["12.0"], ["sm_120f"])[0] == [
        "CUDA 12.8 is older than the targets need: sm_120f needs CUDA >= 12.9 (targets sm_120a, sm_120f)"]


def test_the_too_old_stand_in_is_read_like_nvcc():
    facts = inspect_toolkit(str(STAND_IN / "bin" / "nvcc"), timeout=10)
    assert (facts["version"], facts["version_full"], facts["home"]) == ("12.6", "12.6.85", str(STAND_IN))
    problems, _needs, missing = check_toolkit(facts, ["12.0"], version="13.0")
    assert missing == ["compute_120"]
    assert [p.split(":")[0] for p in problems] == [
        "the stack asks for CUDA 13.0 but the toolkit is CUDA 12.6",
        "CUDA 12.6 is older than the targets need",
        f"nvcc 12.6.85 ({STAND_IN}/bin/nvcc) cannot target compute_120"]


def test_find_nvcc_order(tmp_path):
    for name in ("a", "b", "onpath"):
        nvcc = tmp_path / name / "bin" / "nvcc"
        nvcc.parent.mkdir(parents=True)
        nvcc.write_text("#!/bin/sh\n")
        nvcc.chmod(0o755)
    assert find_nvcc(search=[str(tmp_path / "none"), str(tmp_path / "b"), str(tmp_path / "a")],
                     path_env="") == str(tmp_path / "b" / "bin" / "nvcc")
    assert find_nvcc(search=[str(tmp_path / "none")], path_env=str(tmp_path / "onpath" / "bin")) == str(
        tmp_path / "onpath" / "bin" / "nvcc")
    assert find_nvcc(search=[], path_env=str(tmp_path)) is None
    with pytest.raises(ToolkitError, match="has no executable bin/nvcc"):
        find_nvcc(home=str(tmp_path / "none"))


def test_toolkit_env_puts_the_toolkit_first_once():
    env = toolkit_env("/opt/cuda", "/opt/cuda/bin/nvcc", path_env="/usr/bin:/opt/cuda/bin:/bin")
    assert env == {"CUDA_HOME": "/opt/cuda", "CUDA_PATH": "/opt/cuda", "CUDACXX": "/opt/cuda/bin/nvcc",
                   "PATH": "/opt/cuda/bin:/usr/bin:/bin"}
