"""module_utils/nvidia_driver: the decision table, and the readers of /proc, modinfo, efivars and sysfs.

GPU facts come from the real nvidia_smi.gpu_facts running tests/stand_ins/nvidia-smi (a stand-in that
replays recorded answers; this machine has no GPU); modinfo answers are recordings too
(tests/stand_ins/modinfo). Secure Boot, nouveau and the PCI bus are real files in a temporary tree.
"""

from pathlib import Path

import pytest
import yaml
from ansible.module_utils.nvidia_driver import (
    DriverPolicyError,
    branch_of,
    decide,
    flavor_from_proc,
    parse_modinfo,
    pci_inventory,
    read_loaded_flavor,
    required_branch,
    secure_boot,
)
from ansible.module_utils.nvidia_smi import gpu_facts
from documented import assert_documented
from module_direct import run_module_directly

STAND_INS = Path(__file__).resolve().parent.parent / "stand_ins"
RECORDINGS = STAND_INS / "nvidia-smi-recordings"
MODINFO = STAND_INS / "modinfo"
CASES = yaml.safe_load((Path(__file__).parent / "cases" / "nvidia_driver_decisions.yml").read_text())["cases"]


def make_pci(root: Path, gpus: int, nvswitches: int = 0) -> Path:
    devices = [("0x10de", "0x030200")] * gpus + [("0x10de", "0x068000")] * nvswitches
    devices += [("0x8086", "0x060400"), ("0x15b3", "0x020700")]  # an Intel bridge, a ConnectX NIC
    for index, (vendor, device_class) in enumerate(devices):
        device = root / f"0000:{index + 0x10:02x}:00.0"
        device.mkdir(parents=True)
        (device / "vendor").write_text(vendor + "\n")
        (device / "class").write_text(device_class + "\n")
    return root


def state_for(case, tmp_path, monkeypatch):
    recording = case.get("recording")
    proc = RECORDINGS / recording / "proc-driver-nvidia-version.txt" if recording else tmp_path / "absent"
    if recording:
        monkeypatch.setenv("NVIDIA_SMI_RECORDING", str(RECORDINGS / recording))
    gpu = gpu_facts(str(STAND_INS / "nvidia-smi") if recording else str(tmp_path / "no-nvidia-smi"),
                    module_version_files=[str(proc)])
    modinfo = case.get("modinfo")
    pci_gpus = case.get("pci_gpus", len(gpu["gpus"]))
    return {"gpu": gpu, "loaded_flavor": read_loaded_flavor(str(proc)),
            "installed": parse_modinfo((MODINFO / f"{modinfo}.txt").read_text()) if modinfo else None,
            "secure_boot": {"enabled": case.get("secure_boot")},
            "nouveau_loaded": bool(case.get("nouveau")),
            "pci": pci_inventory(str(make_pci(tmp_path / "pci", pci_gpus)))}


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_decision_table(case, tmp_path, monkeypatch):
    state = state_for(case, tmp_path, monkeypatch)
    policy = {"cuda_version": case.get("cuda", "13.0"), "branch": case.get("branch"),
              "open_from": case.get("open_from")}
    result = decide(state, policy)
    expect = dict(case["expect"])
    assert [p["code"] for p in result["problems"]] == expect.pop("problems")
    assert result["reboot_required"] is expect.pop("reboot")
    reasons = expect.pop("reasons", None)
    if reasons is not None:
        assert len(result["reboot_reasons"]) == len(reasons), result["reboot_reasons"]
        for reason, text in zip(result["reboot_reasons"], reasons):
            assert text in reason
    for key, value in expect.items():
        assert result[key] == value, key
    assert result["ok"] is (not result["problems"] and not result["reboot_required"])
    for problem in result["problems"]:  # every problem says what to do, not only what is wrong
        assert any(word in problem["message"] for word in ("install", "sign", "check", "nvidia_driver_"))


def test_secure_boot_advice_names_mokutil(tmp_path, monkeypatch):
    case = next(c for c in CASES if c["expect"]["problems"] == ["secure_boot_unsigned"])
    result = decide(state_for(case, tmp_path, monkeypatch), {"cuda_version": "13.0"})
    assert "mokutil --import" in result["secure_boot_action"]
    assert result["problems"][0]["message"] == result["secure_boot_action"]


@pytest.mark.parametrize(("cuda", "branch"), [("13.0", 580), ("13.1", 580), ("12.8", 525), ("11.8", 450)])
def test_required_branch(cuda, branch):
    assert required_branch(cuda) == branch


def test_required_branch_unknown_major_names_the_variable():
    with pytest.raises(DriverPolicyError, match="nvidia_driver_min_branch"):
        required_branch("14.0")
    assert required_branch("14.0", {"14": 600, "13": 580}) == 600


@pytest.mark.parametrize(("version", "branch"), [("580.95.05", 580), ("550.163.01", 550), ("470.256", 470),
                                                 (None, None), ("", None), ("N/A", None)])
def test_branch_of(version, branch):
    assert branch_of(version) == branch


@pytest.mark.parametrize(("recording", "flavor"), [("b200-x8", "open"), ("b200-proprietary", "proprietary"),
                                                   ("h200-device-2026-11-30", "open")])
def test_flavor_from_recorded_proc(recording, flavor):
    assert flavor_from_proc((RECORDINGS / recording / "proc-driver-nvidia-version.txt").read_text()) == flavor


def test_flavor_unknown_text():
    assert flavor_from_proc("") is None
    assert flavor_from_proc("something else\n") is None
    assert read_loaded_flavor("/nonexistent/version") is None


def test_parse_modinfo():
    assert parse_modinfo((MODINFO / "open-580.95.05.txt").read_text()) == {
        "filename": "/lib/modules/6.1.0-28-amd64/updates/dkms/nvidia.ko", "version": "580.95.05",
        "flavor": "open", "signer": "DKMS module signing key"}
    assert parse_modinfo((MODINFO / "proprietary-580.95.05.txt").read_text())["flavor"] == "proprietary"
    assert parse_modinfo((MODINFO / "open-580.95.05-unsigned.txt").read_text())["signer"] is None
    assert parse_modinfo("modinfo: ERROR: Module nvidia not found.\n") is None


def test_secure_boot_from_efivar(tmp_path):
    efi = tmp_path / "efi"
    (efi / "efivars").mkdir(parents=True)
    var = efi / "efivars" / "SecureBoot-x"
    var.write_bytes(b"\x06\x00\x00\x00\x01")
    assert secure_boot(str(var), str(efi)) == {"enabled": True, "source": str(var)}
    var.write_bytes(b"\x06\x00\x00\x00\x00")
    assert secure_boot(str(var), str(efi))["enabled"] is False


def test_secure_boot_legacy_boot_and_unknown(tmp_path):
    assert secure_boot(str(tmp_path / "v"), str(tmp_path / "no-efi"))["enabled"] is False
    (tmp_path / "efi").mkdir()
    result = secure_boot(str(tmp_path / "v"), str(tmp_path / "efi"), mokutil=str(tmp_path / "no-mokutil"))
    assert result["enabled"] is None


@pytest.mark.parametrize(("text", "enabled"), [
    ("SecureBoot enabled\n", True), ("SecureBoot disabled\n", False),
    ("This system doesn't support Secure Boot\n", False)])
def test_secure_boot_from_mokutil(tmp_path, text, enabled):
    (tmp_path / "efi").mkdir()
    mokutil = tmp_path / "mokutil"
    (tmp_path / "answer").write_text(text)
    mokutil.write_text(f"#!/bin/sh\n[ \"$1\" = --sb-state ] || exit 2\ncat {tmp_path / 'answer'}\n")
    mokutil.chmod(0o755)
    result = secure_boot(str(tmp_path / "v"), str(tmp_path / "efi"), mokutil=str(mokutil))
    assert result == {"enabled": enabled, "source": "mokutil --sb-state"}


def test_pci_inventory(tmp_path):
    root = make_pci(tmp_path / "pci", gpus=2, nvswitches=4)
    found = pci_inventory(str(root))
    assert len(found["gpus"]) == 2
    assert len(found["nvswitches"]) == 4
    assert pci_inventory(str(tmp_path / "absent")) == {"gpus": [], "nvswitches": []}


def module_args(tmp_path, recording, modinfo, **extra):
    """Arguments pointing the real module at the stand-ins and a temporary sysfs/efi tree."""
    stand_in_modinfo = tmp_path / "modinfo"
    answer = MODINFO / f"{modinfo}.txt"
    stand_in_modinfo.write_text(f"#!/bin/sh\n[ \"$1\" = nvidia ] || exit 2\ncat {answer}\n")
    stand_in_modinfo.chmod(0o755)
    proc = str(RECORDINGS / recording / "proc-driver-nvidia-version.txt")
    return {"cuda_version": "13.0", "nvidia_smi": str(STAND_INS / "nvidia-smi"),
            "kernel_module_version_files": [proc], "proc_version": proc, "modinfo": str(stand_in_modinfo),
            "efi_dir": str(tmp_path / "no-efi"), "pci_devices": str(make_pci(tmp_path / "pci", 8, 0)),
            "nouveau_module": str(tmp_path / "no-nouveau"), **extra}


def test_module_b200_ok(tmp_path, monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_RECORDING", str(RECORDINGS / "b200-x8"))
    returncode, result, stderr = run_module_directly("nvidia_driver_facts",
                                                     module_args(tmp_path, "b200-x8", "open-580.95.05"))
    assert returncode == 0, stderr
    assert result["changed"] is False
    assert result["ok"] is True, result
    assert result["installed_module"]["flavor"] == "open"
    assert result["gpu"]["capabilities"] == ["10.0"]
    assert len(result["pci"]["gpus"]) == 8
    assert result["secure_boot"]["enabled"] is False
    assert_documented("nvidia_driver_facts", result)


def test_module_proprietary_blackwell_reports_not_fails(tmp_path, monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_RECORDING", str(RECORDINGS / "b200-proprietary"))
    returncode, result, stderr = run_module_directly(
        "nvidia_driver_facts", module_args(tmp_path, "b200-proprietary", "proprietary-580.95.05"))
    assert returncode == 0, stderr
    assert [p["code"] for p in result["problems"]] == ["proprietary_on_blackwell"]


@pytest.mark.parametrize(("args", "message"), [
    ({"cuda_version": "14.0"}, "no minimum driver branch known for CUDA '14.0'"),
    ({"cuda_version": "13.0", "branch": "r580"}, "branch must be a driver branch number"),
])
def test_module_bad_input_is_a_clean_failure(args, message):
    returncode, result, _stderr = run_module_directly("nvidia_driver_facts", args)
    assert returncode == 1
    assert message in result["msg"]
