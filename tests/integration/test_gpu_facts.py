"""gpu_facts through Ansible: this GPU-less machine, and GPU hosts replayed by the nvidia-smi stand-in.

Recordings captured on real GPU hosts (tests/gpu_host_report.py --record) carry torch's own view of the
devices; for those, gpu_facts must agree with torch on every GPU's name and capability.
"""

import json
import os
import shutil
from pathlib import Path

import pytest
from ansible_run import run_module
from documented import assert_documented
from prereq import require

pytestmark = pytest.mark.integration

STAND_INS = Path(__file__).resolve().parent.parent / "stand_ins"
RECORDINGS = STAND_INS / "nvidia-smi-recordings"
CAPTURED = sorted(p.parent for p in RECORDINGS.glob("*/torch-devices.json"))


def replay(name, **args):
    recording = RECORDINGS / name
    args = {"nvidia_smi": str(STAND_INS / "nvidia-smi"),
            "kernel_module_version_files": [str(recording / "proc-driver-nvidia-version.txt")], **args}
    return run_module("gpu_facts", args, envvars={"NVIDIA_SMI_RECORDING": str(recording)})


def test_this_machine():
    require(not shutil.which("nvidia-smi"), "this machine has nvidia-smi (the test is of a GPU-less host)")
    result = run_module("gpu_facts", {}, check=True)
    assert result["event"] == "runner_on_ok"
    assert result["changed"] is False
    assert result["present"] is False
    assert result["reason"] == "nvidia-smi not found on PATH (no NVIDIA driver installed)"
    assert result["gpus"] == []


def test_rtx_pro_6000_host():
    result = replay("rtx-pro-6000-x2")
    assert result["event"] == "runner_on_ok", result.get("msg")
    assert result["changed"] is False
    assert result["present"] is True
    assert result["capabilities"] == ["12.0"]
    assert result["gpus"][1] == {
        "index": 1, "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        "uuid": "GPU-01d89a02-4cdc-e7a6-d728-8ff68c320f89", "capability": "12.0",
        "memory_total_mib": 97887, "pci_bus_id": "00000000:C1:00.0", "driver_version": "580.95.05"}
    assert result["cuda_driver_version"] == "13.0"
    assert result["kernel_module_mismatch"] is False
    assert_documented("gpu_facts", result)


def test_driver_mismatch_host(tmp_path):
    result = replay("nvml-mismatch", kernel_module_version_files=[
        str(tmp_path / "absent"), str(RECORDINGS / "nvml-mismatch" / "proc-driver-nvidia-version.txt")])
    assert result["event"] == "runner_on_ok"
    assert result["present"] is False
    assert result["reload_required"] is True
    assert result["kernel_module_version"] == "575.57.08"
    assert "reboot or reload the nvidia modules" in result["reason"]


def test_driver_not_loaded_is_not_a_failure():
    result = replay("driver-not-loaded", kernel_module_version_files=[])
    assert result["event"] == "runner_on_ok"
    assert result["present"] is False
    assert result["reason"].startswith("the NVIDIA driver is not loaded")


def test_unparseable_answer_fails_cleanly(tmp_path):
    # A future driver that answered the query in another shape: a clear failure, never a traceback.
    (tmp_path / "query.txt").write_text("0, NVIDIA H200, GPU-1\n")
    result = run_module("gpu_facts", {"nvidia_smi": str(STAND_INS / "nvidia-smi")},
                        envvars={"NVIDIA_SMI_RECORDING": str(tmp_path)})
    assert result["event"] == "runner_on_failed"
    assert result["msg"] == ("unexpected nvidia-smi line (want 7 fields index,name,uuid,compute_cap,"
                             "memory.total,pci.bus_id,driver_version): '0,NVIDIA H200,GPU-1'; please report "
                             "this output with the driver version")
    failed = run_module("sgl_kernel_variants", {"package_dir": str(tmp_path), "nvidia_smi":
                                                str(STAND_INS / "nvidia-smi")},
                        envvars={"NVIDIA_SMI_RECORDING": str(tmp_path)})
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"].startswith("unexpected nvidia-smi line (want 7 fields")


def test_nvidia_smi_by_name_on_the_remote_path():
    recording = RECORDINGS / "h200-x8"
    result = run_module("gpu_facts", {"nvidia_smi": "nvidia-smi", "kernel_module_version_files": []},
                        envvars={"NVIDIA_SMI_RECORDING": str(recording),
                                 "PATH": f"{STAND_INS}{os.pathsep}{os.environ['PATH']}"})
    assert result["event"] == "runner_on_ok", result.get("msg")
    assert result["present"] is True
    assert result["nvidia_smi"] == str(STAND_INS / "nvidia-smi")


def test_bad_input():
    failed = run_module("gpu_facts", {"timeout": -5})
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"] == "timeout must be a positive number of seconds, got -5"


@pytest.mark.parametrize("recording", CAPTURED, ids=[p.name for p in CAPTURED])
def test_captured_hosts_agree_with_torch(recording):
    torch_devices = json.loads((recording / "torch-devices.json").read_text())
    result = replay(recording.name)
    assert result["present"] is True
    # torch orders devices fastest-first by default, nvidia-smi by PCI bus: compare as multisets.
    ours = sorted((g["name"], g["capability"]) for g in result["gpus"])
    assert ours == sorted((d["name"], d["capability"]) for d in torch_devices)
