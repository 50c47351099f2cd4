"""module_utils/nvidia_smi.py: every answer in full, for the calls and failures the recordings do not show.

Each test writes a small nvidia-smi of its own (a STAND-IN, as tests/stand_ins/nvidia-smi is): the code
under test runs it as a real process and parses what it prints.
"""

from __future__ import annotations

import pytest
from ansible.module_utils import nvidia_smi
from ansible.module_utils.nvidia_smi import NvidiaSmiError, find_nvidia_smi, gpu_facts, parse_query

FIELDS = "index,name,uuid,compute_cap,memory.total,pci.bus_id,driver_version"
ROW = "0, NVIDIA H200, GPU-1, 9.0, 143771, 00000000:18:00.0, 580.95.05"
NOTHING = {"present": False, "reason": None, "gpus": [], "capabilities": [], "nvidia_smi": None,
           "driver_version": None, "user_space_driver_version": None, "cuda_driver_version": None,
           "kernel_module_version": None, "kernel_module_version_file": None, "kernel_module_mismatch": None,
           "reload_required": False, "reload_reason": None}


def smi(tmp_path, script: str, name: str = "nvidia-smi"):
    path = tmp_path / name
    path.write_bytes(b"#!/bin/sh\n" + script.encode("utf-8", "surrogateescape"))
    path.chmod(0o755)
    return str(path)


def test_not_found_is_the_full_empty_answer(tmp_path):
    assert gpu_facts(str(tmp_path / "nvidia-smi"), module_version_files=[]) == {
        **NOTHING, "reason": f"nvidia-smi not found at {tmp_path}/nvidia-smi"}


def test_a_binary_that_cannot_start(tmp_path):
    path = tmp_path / "nvidia-smi"
    path.write_text("#!/nonexistent/interpreter\n")
    path.chmod(0o755)
    facts = gpu_facts(str(path), module_version_files=[])
    assert facts["reason"].startswith(f"cannot run {path}: [Errno 2] No such file or directory")
    assert facts["nvidia_smi"] == str(path)


@pytest.mark.parametrize(("script", "reason"), [
    ("echo 'No devices were found' >&2; exit 6",
     "the NVIDIA driver is loaded but sees no GPU (No devices were found)"),
    ("echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\" >&2; exit 9",
     "the NVIDIA driver is not loaded: NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA "
     "driver."),
    ("exit 3", "nvidia-smi failed (exit status 3): no output"),
    ("printf 'first\\nUnknown Error' >&2; exit 15",
     "nvidia-smi failed (exit status 15): first\nUnknown Error"),
])
def test_failures_read_from_stderr_too(tmp_path, script, reason):
    facts = gpu_facts(smi(tmp_path, script), module_version_files=[])
    assert facts["reason"] == reason
    assert facts["present"] is False
    assert facts["kernel_module_mismatch"] is None
    assert facts["reload_required"] is False


def test_a_long_failure_keeps_its_last_500_characters(tmp_path):
    facts = gpu_facts(smi(tmp_path, "printf 'x%.0s' $(seq 600); printf END; exit 4"), module_version_files=[])
    assert facts["reason"] == "nvidia-smi failed (exit status 4): " + "x" * 497 + "END"


def test_legacy_driver_fallback_needs_the_invalid_field_error(tmp_path):
    # exit 1 (not only 2) with the invalid-field error: ask again without compute_cap
    legacy = smi(tmp_path, f'case "$1" in\n  --query-gpu={FIELDS}) '
                           "echo 'Field \"compute_cap\" is not a valid field to query.'; exit 1;;\n"
                           "  --query-gpu=*) echo '0, NVIDIA A100, GPU-1, 81920, 00000000:07:00.0, "
                           "470.256.02';;\n"
                           "  *) echo 'NVIDIA-SMI 470.256.02  Driver Version: 470.256.02  CUDA Version: "
                           "11.4';;\n"
                           "esac\n")
    facts = gpu_facts(legacy, module_version_files=[])
    assert facts["present"] is True
    assert facts["gpus"][0]["capability"] is None
    # any other failure is reported as it is, never retried with fewer fields
    other = smi(tmp_path, f'case "$1" in\n  --query-gpu={FIELDS}) echo "Unknown Error"; exit 2;;\n'
                          f"  --query-gpu=*) echo '{ROW}' | cut -d, -f1-3,5-;;\nesac\n", "other-smi")
    assert gpu_facts(other, module_version_files=[])["reason"] == (
        "nvidia-smi failed (exit status 2): Unknown Error")
    valid = smi(tmp_path, f'case "$1" in\n  --query-gpu={FIELDS}) echo "is not a valid field"; exit 2;;\n'
                          f"  --query-gpu=*) echo '{ROW}' | cut -d, -f1-3,5-;;\nesac\n", "valid-smi")
    assert gpu_facts(valid, module_version_files=[])["reason"] == (
        "nvidia-smi failed (exit status 2): is not a valid field")


def test_output_that_is_not_utf8_is_replaced_not_an_error(tmp_path):
    path = smi(tmp_path, "printf '0, NVIDIA \\377H200, GPU-1, 9.0, 143771, 00000000:18:00.0, 580.95.05\\n'")
    facts = gpu_facts(path, module_version_files=[])
    assert facts["gpus"][0]["name"] == "NVIDIA \ufffdH200"


def test_a_capability_newer_than_the_known_gpus_is_kept():
    assert parse_query(ROW.replace(" 9.0,", " 13.0,"))[0]["capability"] == "13.0"


def test_blank_lines_anywhere_are_skipped():
    assert [g["index"] for g in parse_query(f"\n{ROW}\n   \n, ,\n{ROW.replace('0,', '1,', 1)}\n\n")] == [0, 1]


def test_a_quoted_name_with_a_comma():
    row = '0, "NVIDIA H200, special", GPU-1, 9.0, 143771, 00000000:18:00.0, 580.95.05'
    assert parse_query(row)[0]["name"] == "NVIDIA H200, special"


def test_parse_errors_in_full():
    with pytest.raises(NvidiaSmiError) as caught:
        parse_query("0, NVIDIA H200, 9.0")
    assert str(caught.value) == (f"unexpected nvidia-smi line (want 7 fields {FIELDS}): "
                                 "'0,NVIDIA H200,9.0'")
    with pytest.raises(NvidiaSmiError) as caught:
        parse_query(ROW.replace("0,", "x,", 1))
    assert str(caught.value) == ("unexpected nvidia-smi line 'x,NVIDIA H200,GPU-1,9.0,143771,"
                                 "00000000:18:00.0,580.95.05': invalid literal for int() with base 10: 'x'")


def test_found_on_path_then_in_the_usual_directories(tmp_path, monkeypatch):
    on_path, first, second = tmp_path / "bin", tmp_path / "usr-bin", tmp_path / "opt-bin"
    for directory in (on_path, first, second):
        directory.mkdir()
    (first / "nvidia-smi").write_text("")  # present but not executable: skipped
    (first / "nvidia-smi").chmod(0o644)
    smi(second, "exit 0")
    monkeypatch.setattr(nvidia_smi, "FALLBACK_DIRS", (str(first), str(second)))
    monkeypatch.setenv("PATH", str(on_path))
    assert find_nvidia_smi() == str(second / "nvidia-smi")
    smi(on_path, "exit 0")
    assert find_nvidia_smi() == str(on_path / "nvidia-smi")
    assert find_nvidia_smi(str(first / "nvidia-smi")) is None  # not executable
    assert find_nvidia_smi(str(tmp_path)) is None  # a directory
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(nvidia_smi, "FALLBACK_DIRS", (str(first),))
    assert find_nvidia_smi() is None


def test_an_empty_list_is_no_gpu(tmp_path):
    facts = gpu_facts(smi(tmp_path, "exit 0"), module_version_files=[])
    assert (facts["present"], facts["reason"], facts["gpus"]) == (False, "nvidia-smi lists no GPU", [])


def test_a_version_mismatch_is_the_reload_reason(tmp_path):
    script = "echo 'Failed to initialize NVML: Driver/library version mismatch'; exit 18"
    facts = gpu_facts(smi(tmp_path, script), module_version_files=[])
    assert facts["reload_required"] is True
    assert facts["user_space_driver_version"] is None  # no "NVML library version" line
    assert facts["reload_reason"] == facts["reason"] == (
        "the loaded NVIDIA kernel module does not match the user-space driver (Driver/library version "
        "mismatch): reboot or reload the nvidia modules")
