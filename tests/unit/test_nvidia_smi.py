"""gpu facts (module_utils/nvidia_smi.py) against recorded nvidia-smi answers and this GPU-less machine.

The GPU path runs the production code against tests/stand_ins/nvidia-smi, a stand-in that replays
recordings (this machine has no GPU); every other part (the subprocess, parsing, the kernel-module
files) is real.
"""

import json
import os
import shutil
from pathlib import Path

import pytest
from ansible.module_utils import bounded_run
from ansible.module_utils.nvidia_smi import (
    KERNEL_MODULE_VERSION_FILES,
    NvidiaSmiError,
    first_capability,
    gpu_facts,
    parse_banner,
    parse_query,
    read_kernel_module_version,
)
from documented import module_block
from prereq import require
from processes import kill_pid_in

STAND_INS = Path(__file__).resolve().parent.parent / "stand_ins"
STAND_IN = str(STAND_INS / "nvidia-smi")
RECORDINGS = STAND_INS / "nvidia-smi-recordings"


@pytest.fixture
def replay(monkeypatch):
    """facts for a recording: the stand-in replays it, the kernel module file is the recorded one."""
    def run(name, module_files=None, timeout=30):
        monkeypatch.setenv("NVIDIA_SMI_RECORDING", str(RECORDINGS / name))
        if module_files is None:
            module_files = [str(RECORDINGS / name / "proc-driver-nvidia-version.txt")]
        return gpu_facts(STAND_IN, timeout=timeout, module_version_files=module_files)
    return run


@pytest.mark.parametrize(("name", "expected"), [
    ("h200-x8", ("NVIDIA H200", "9.0", 143771, 8)),
    ("b200-x8", ("NVIDIA B200", "10.0", 183359, 8)),
    ("rtx-pro-6000-x2", ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", 97887, 2)),
])
def test_gpu_hosts(replay, name, expected):
    gpu_name, capability, memory, count = expected
    facts = replay(name)
    assert facts["present"] is True
    assert facts["reason"] is None
    assert [g["index"] for g in facts["gpus"]] == list(range(count))
    assert {g["name"] for g in facts["gpus"]} == {gpu_name}
    assert {g["capability"] for g in facts["gpus"]} == {capability}
    assert {g["memory_total_mib"] for g in facts["gpus"]} == {memory}
    assert all(g["uuid"].startswith("GPU-") for g in facts["gpus"])
    assert all(g["pci_bus_id"].startswith("00000000:") for g in facts["gpus"])
    assert len({g["uuid"] for g in facts["gpus"]}) == count
    assert facts["capabilities"] == [capability]
    assert first_capability(facts) == capability
    assert facts["driver_version"] == "580.95.05"
    assert facts["user_space_driver_version"] == "580.95.05"
    assert facts["cuda_driver_version"] == "13.0"
    assert facts["kernel_module_version"] == "580.95.05"
    assert facts["kernel_module_mismatch"] is False
    assert facts["reload_required"] is False
    assert facts["nvidia_smi"] == STAND_IN


def test_kernel_module_older_than_user_space(replay, tmp_path):
    # After a driver upgrade without reboot: /sys still names the old module.
    sys_version = tmp_path / "version"
    sys_version.write_text("575.57.08\n")
    facts = replay("h200-x8", module_files=[str(sys_version)])
    assert facts["present"] is True
    assert facts["kernel_module_version"] == "575.57.08"
    assert facts["kernel_module_version_file"] == str(sys_version)
    assert facts["kernel_module_mismatch"] is True
    assert facts["reload_required"] is True
    assert facts["reload_reason"] == ("kernel module 575.57.08 is loaded but the user-space driver is "
                                      "580.95.05: reboot or reload the nvidia modules")


def test_nvml_version_mismatch_is_not_present_and_needs_reload(replay):
    facts = replay("nvml-mismatch")
    assert facts["present"] is False
    assert "Driver/library version mismatch" in facts["reason"]
    assert facts["kernel_module_version"] == "575.57.08"
    assert facts["user_space_driver_version"] == "580.95"
    assert facts["kernel_module_mismatch"] is True
    assert facts["reload_required"] is True


@pytest.mark.parametrize(("name", "needle"), [
    ("driver-not-loaded", "the NVIDIA driver is not loaded: NVIDIA-SMI has failed because it couldn't "
                          "communicate with the NVIDIA driver"),
    ("no-devices", "No devices were found"),
])
def test_driver_states_are_answers_not_errors(replay, name, needle, tmp_path):
    facts = replay(name, module_files=[str(tmp_path / "absent")])
    assert facts["present"] is False
    assert needle in facts["reason"]
    assert facts["gpus"] == []
    assert facts["capabilities"] == []
    assert facts["kernel_module_version"] is None
    assert facts["kernel_module_mismatch"] is None
    assert facts["reload_required"] is False
    assert first_capability(facts) is None


def test_driver_without_compute_cap_field(replay, tmp_path):
    facts = replay("a100-driver-470", module_files=[str(tmp_path / "absent")])
    assert facts["present"] is True
    assert [g["name"] for g in facts["gpus"]] == ["NVIDIA A100-SXM4-80GB"] * 2
    assert [g["capability"] for g in facts["gpus"]] == [None, None]
    assert [g["memory_total_mib"] for g in facts["gpus"]] == [81920, 81920]
    assert facts["capabilities"] == []
    assert facts["driver_version"] == "470.256.02"
    assert facts["cuda_driver_version"] == "11.4"


def test_this_machine_has_no_gpu():
    require(not shutil.which("nvidia-smi"),
            "this machine has nvidia-smi; the GPU-less path is covered by the recordings")
    facts = gpu_facts()
    assert facts["present"] is False
    assert facts["reason"] == "nvidia-smi not found on PATH (no NVIDIA driver installed)"
    assert facts["kernel_module_version"] is None


def test_named_nvidia_smi_that_does_not_exist(tmp_path):
    facts = gpu_facts(str(tmp_path / "nvidia-smi"), module_version_files=[])
    assert facts["present"] is False
    assert facts["reason"] == f"nvidia-smi not found at {tmp_path / 'nvidia-smi'}"


def test_nvidia_smi_given_by_name_is_looked_up_on_path(monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_RECORDING", str(RECORDINGS / "h200-x8"))
    monkeypatch.setenv("PATH", f"{STAND_INS}{os.pathsep}{os.environ['PATH']}")
    facts = gpu_facts("nvidia-smi", module_version_files=[])
    assert facts["present"] is True
    assert facts["nvidia_smi"] == STAND_IN
    missing = gpu_facts("nvidia-smi-that-is-not-there", module_version_files=[])
    assert missing["reason"] == "nvidia-smi-that-is-not-there not found on PATH"


def test_kernel_module_version_files(tmp_path):
    proc = tmp_path / "proc-version"
    proc.write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.172.08  Tue Jul  8 18:59:49 UTC "
                    "2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    sys_file = tmp_path / "sys-version"
    sys_file.write_text("580.95.05\n")
    assert read_kernel_module_version([str(tmp_path / "absent"), str(proc)]) == ("570.172.08", str(proc))
    assert read_kernel_module_version([str(sys_file), str(proc)]) == ("580.95.05", str(sys_file))
    assert read_kernel_module_version([str(tmp_path / "absent")]) == (None, None)


def test_documented_default_module_version_files_are_the_ones_read():
    # Users read the module's documented default; the code reads KERNEL_MODULE_VERSION_FILES.
    options = module_block("gpu_facts", "DOCUMENTATION")["options"]
    assert options["kernel_module_version_files"]["default"] == list(KERNEL_MODULE_VERSION_FILES)


def test_parse_query_values():
    gpus = parse_query("3, NVIDIA GH200 480GB, GPU-1, 9.0, [N/A], 00000009:01:00.0, 580.95.05\n\n")
    assert gpus == [{"index": 3, "name": "NVIDIA GH200 480GB", "uuid": "GPU-1", "capability": "9.0",
                     "memory_total_mib": None, "pci_bus_id": "00000009:01:00.0",
                     "driver_version": "580.95.05"}]
    assert json.loads(json.dumps(gpus)) == gpus


def test_parse_query_rejects_other_shapes():
    with pytest.raises(NvidiaSmiError, match="want 7 fields"):
        parse_query("0, NVIDIA H200, GPU-1\n")
    with pytest.raises(NvidiaSmiError, match=r"compute capability 'x\.y'"):
        parse_query("0, NVIDIA H200, GPU-1, x.y, 1, 00000000:18:00.0, 580.95.05\n")


def test_parse_banner():
    text = (RECORDINGS / "b200-x8" / "banner.txt").read_text()
    assert parse_banner(text) == ("580.95.05", "13.0")
    version_output = "NVIDIA-SMI version  : 590.44.01\nCUDA Version         : 13.1\n"  # nvidia-smi --version
    assert parse_banner(version_output) == ("590.44.01", "13.1")
    assert parse_banner("garbage") == (None, None)


# Fast versions of the timeout tests in tests/integration/test_bounded_waits.py (short timeout and grace).

def test_hung_nvidia_smi_is_an_answer_quickly(replay, tmp_path):
    facts = replay("hung", module_files=[str(tmp_path / "absent")], timeout=0.3)
    assert facts["present"] is False
    assert facts["nvidia_smi"] == STAND_IN
    assert facts["reason"] == (f"{STAND_IN} did not answer within 0.3 s (a hung GPU or driver? check dmesg "
                               "for Xid errors)")


def test_hung_nvidia_smi_names_what_it_left_behind(tmp_path, monkeypatch):
    monkeypatch.setattr(bounded_run, "KILL_GRACE", 0.3)
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\nsetsid sleep 30 & echo $! > {tmp_path}/escaped.pid\nexec sleep 30\n")
    smi.chmod(0o755)
    try:
        facts = gpu_facts(str(smi), timeout=0.5, module_version_files=[])
    finally:
        kill_pid_in(tmp_path / "escaped.pid")
    assert facts["reason"] == (f"{smi} did not answer within 0.5 s (a hung GPU or driver? check dmesg for "
                               "Xid errors); a process it started outside its session (setsid) survived the "
                               "kill and still holds its output open; left behind")


# Several GPU models in one host, and driver versions that share a major (recording: mixed-models).

def test_several_models_in_one_host(replay):
    facts = replay("mixed-models")
    assert facts["present"] is True
    assert [(g["index"], g["name"], g["capability"], g["memory_total_mib"]) for g in facts["gpus"]] == [
        (0, "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", 97887),
        (1, "NVIDIA L40S", "8.9", 46068),
        (2, "NVIDIA A100 80GB PCIe", "8.0", 81920),
        (3, "NVIDIA GeForce RTX 5090", "12.0", 32607),
    ]
    assert facts["capabilities"] == ["8.0", "8.9", "12.0"]  # numeric order, each once
    assert first_capability(facts) == "12.0"  # the first GPU by index, not the smallest capability
    assert facts["driver_version"] == "580.105.08"
    assert facts["user_space_driver_version"] == "580.105.08"
    assert facts["kernel_module_mismatch"] is False
    assert facts["reload_required"] is False
    assert facts["reload_reason"] is None


@pytest.mark.parametrize(("loaded", "mismatch"), [
    ("580.95.05", True), ("580.105.07", True), ("580.105", True), ("580.105.08", False)])
def test_driver_versions_that_share_a_major(replay, tmp_path, loaded, mismatch):
    module_file = tmp_path / "version"
    module_file.write_text(f"{loaded}\n")
    facts = replay("mixed-models", module_files=[str(module_file)])
    assert facts["kernel_module_version"] == loaded
    assert facts["kernel_module_mismatch"] is mismatch
    assert facts["reload_required"] is mismatch
    assert facts["reload_reason"] == (f"kernel module {loaded} is loaded but the user-space driver is "
                                      "580.105.08: reboot or reload the nvidia modules" if mismatch else None)


def test_user_space_version_falls_back_to_the_query_without_a_banner(replay, tmp_path, monkeypatch):
    recording = tmp_path / "no-banner"
    recording.mkdir()
    (recording / "query.txt").write_text((RECORDINGS / "mixed-models" / "query.txt").read_text())
    (recording / "banner.txt").write_text("NVIDIA-SMI has failed\n")
    (recording / "banner.rc").write_text("2\n")
    module_file = tmp_path / "version"
    module_file.write_text("580.95.05\n")
    monkeypatch.setenv("NVIDIA_SMI_RECORDING", str(recording))
    facts = gpu_facts(STAND_IN, module_version_files=[str(module_file)])
    assert facts["present"] is True
    assert facts["user_space_driver_version"] is None
    assert facts["cuda_driver_version"] is None
    assert facts["kernel_module_mismatch"] is True
    assert facts["reload_reason"] == ("kernel module 580.95.05 is loaded but the user-space driver is "
                                      "580.105.08: reboot or reload the nvidia modules")


def test_first_capability_follows_the_index_and_skips_gpus_without_one():
    gpus = [{"index": 2, "capability": "8.0"}, {"index": 1, "capability": None},
            {"index": 3, "capability": "9.0"}]
    assert first_capability({"gpus": gpus}) == "8.0"
    assert first_capability({"gpus": []}) is None
    assert first_capability({}) is None
    assert first_capability({"gpus": None}) is None
