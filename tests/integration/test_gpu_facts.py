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


# The GPU interconnect (module_utils/gpu_topology.py), through the stand-in and the real modules.

def test_eight_pcie_gpus_with_p2p_broken_by_acs():
    result = replay("rtx-pro-6000-x8-acs")
    assert result["event"] == "runner_on_ok", result.get("msg")
    topology = result["topology"]
    assert (topology["present"], topology["gpu_count"], topology["nvlink"]) == (True, 8, False)
    assert topology["pcie_switch_groups"] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert (topology["p2p_checked"], topology["p2p_ok"], len(topology["p2p_broken"])) == (True, False, 22)
    assert topology["p2p_broken"][0] == {"gpus": [0, 4], "link": "SYS", "read": "NS", "write": "NS"}
    assert {tuple(p["gpus"]) for p in topology["p2p_broken"] if p["read"] == "CNS"} == {
        (4, 5), (4, 6), (4, 7), (5, 6), (5, 7), (6, 7)}
    assert_documented("gpu_facts", result)


def test_eight_pcie_gpus_with_working_p2p():
    topology = replay("rtx-pro-6000-x8")["topology"]
    assert (topology["p2p_checked"], topology["p2p_ok"], topology["p2p_broken"]) == (True, True, [])


def test_the_captured_h200_topology():
    result = replay("h200-topo-2026-12-01")
    assert result["present"] is True
    assert result["gpus"][0]["name"] == "NVIDIA H200"
    assert result["topology"] == {
        "present": True, "reason": None, "gpu_count": 1, "nvlink": False, "links": [],
        "pcie_switch_groups": [], "host_bridge_groups": [],
        "affinity": [{"gpu": 0, "cpu_affinity": "0-15", "numa_affinity": "0", "gpu_numa_id": "N/A"}],
        "nics": {}, "p2p_checked": False, "p2p_reason": None, "p2p_ok": None, "p2p_broken": []}
    assert_documented("gpu_facts", result)


def test_an_nvlink_host_is_not_asked_for_p2p():
    topology = replay("h200-x8")["topology"]
    assert (topology["nvlink"], topology["p2p_checked"], topology["p2p_reason"]) == (True, False, None)
    assert topology["nics"] == {"NIC0": "mlx5_0", "NIC1": "mlx5_1"}


def test_topology_absent_without_a_gpu_or_when_not_asked():
    require(not shutil.which("nvidia-smi"), "this machine has nvidia-smi (the test is of a GPU-less host)")
    gone = run_module("gpu_facts", {})
    assert gone["event"] == "runner_on_ok"
    assert gone["topology"]["present"] is False
    assert gone["topology"]["reason"] == "no GPU: nvidia-smi not found on PATH (no NVIDIA driver installed)"
    off = replay("rtx-pro-6000-x8-acs", topology=False)
    assert off["present"] is True
    assert (off["topology"]["present"], off["topology"]["reason"]) == (False, "not read (topology=false)")


def test_a_recording_without_topology_says_why():
    result = replay("rtx-pro-6000-x2")
    assert result["present"] is True
    assert result["topology"]["present"] is False
    assert result["topology"]["reason"] == (
        "nvidia-smi topo -m failed (exit status 98): stand-in nvidia-smi: "
        f"{RECORDINGS / 'rtx-pro-6000-x2'} has no topo-m.txt")


def test_verify_reports_broken_p2p_first_with_the_fix():
    gpu = replay("rtx-pro-6000-x8-acs")
    stack = {"facts": {"stack": {"root": "/opt/sglang/stacks", "name": "stable-abc", "path": "/x"},
                       "cuda": {"toolkit_version": "13.0", "nvcc_version": "13.0.88", "nvcc": "/c/bin/nvcc"}}}
    checked = run_module("verify_checks", {
        "gpu": gpu, "stack": stack,
        "service": {"status": -1, "url": "http://127.0.0.1:30000/health", "msg": "timed out"}})
    assert checked["event"] == "runner_on_ok", checked.get("msg")
    assert_documented("verify_checks", checked)
    [topology] = [c for c in checked["checks"] if c["check"] == "topology"]
    assert topology["status"] == "fail"
    assert topology["detail"].startswith("22 of 28 GPU pairs cannot use peer-to-peer over PCIe: GPU0-GPU4 NS")
    report = run_module("verify_report", {"hosts": {"gpu-1": checked["checks"]}})
    assert report["event"] == "runner_on_ok", report.get("msg")
    first = report["table"].splitlines()[0]
    assert first.startswith("FIX FIRST gpu-1: fix the driver stage first. topology: 22 of 28 GPU pairs")
    assert "disable ACS on the PCIe switches" in first
    assert "iommu=pt" in first
    host = report["report"]["hosts"][0]
    assert [c["check"] for c in host["checks"] if c["status"] == "fail"] == ["topology", "service"]
    warned = run_module("verify_checks", {"gpu": gpu, "stack": stack, "p2p_required": False})
    assert [c["status"] for c in warned["checks"] if c["check"] == "topology"] == ["warn"]


def test_verify_checks_names_a_health_result_of_the_wrong_shape():
    stack = {"facts": {"stack": {"root": "/opt/sglang/stacks", "name": None}, "cuda": {}}}
    result = run_module("verify_checks", {"gpu": {"present": False, "reason": "none"}, "stack": stack,
                                          "service": ["http://127.0.0.1:30000/health"]})
    assert result["event"] == "runner_on_failed"
    assert result["msg"].startswith("service: expected a list of health results (name, url, status, msg) or "
                                    "one ansible.builtin.uri result, got list: ")
    assert "Traceback" not in str(result)
