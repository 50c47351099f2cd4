"""module_utils/nvidia_driver: the details the mutation run (bench/mutation_score.py) found untested.

decide() on hand-written states (it is pure), compared as whole results and word for word; the readers
(modinfo, mokutil, the EFI variable, sysfs) with run_bounded replaced, so no process is started.
"""

from __future__ import annotations

import os

import pytest
from ansible.module_utils import nvidia_driver
from ansible.module_utils.bounded_run import RunTimeout
from ansible.module_utils.nvidia_driver import (
    DriverPolicyError,
    branch_of,
    decide,
    flavor_from_license,
    flavor_from_proc,
    installed_module,
    parse_modinfo,
    pci_inventory,
    read_loaded_flavor,
    required_branch,
    secure_boot,
)

OPEN_MODINFO = {"filename": "/lib/modules/x/nvidia.ko", "version": "580.95.05", "flavor": "open",
                "signer": "DKMS module signing key"}


def gpu(version="580.95.05", capabilities=("10.0",), count=1, **extra):
    facts = {"nvidia_smi": "/usr/bin/nvidia-smi", "driver_version": version, "kernel_module_version": version,
             "user_space_driver_version": version, "capabilities": list(capabilities),
             "gpus": [{"index": i} for i in range(count)], "reload_required": False}
    facts.update(extra)
    return facts


def state(**extra):
    value = {"gpu": gpu(), "loaded_flavor": "open", "installed": dict(OPEN_MODINFO),
             "secure_boot": {"enabled": False}, "nouveau_loaded": False,
             "pci": {"gpus": ["0000:10:00.0"], "nvswitches": []}}
    value.update(extra)
    return value


POLICY = {"cuda_version": "13.0"}


def test_decide_healthy_host_whole_result():
    assert decide(state(), POLICY) == {
        "installed_version": "580.95.05", "installed_branch": 580, "installed_flavor": "open",
        "loaded_version": "580.95.05", "loaded_branch": 580, "loaded_flavor": "open",
        "user_space_version": "580.95.05", "required_branch": 580, "open_required_for": ["10.0"],
        "driver_installed": True, "secure_boot_action": None, "problems": [], "reboot_required": False,
        "reboot_reasons": [], "ok": True}


def test_decide_with_no_state_at_all():
    result = decide({}, POLICY)
    assert result["driver_installed"] is False
    assert result["problems"] == [{"code": "no_driver", "message": (
        "no NVIDIA driver is installed (no nvidia-smi, no nvidia kernel module): install it with "
        "nvidia_driver_method: apt")}]
    assert result["reboot_reasons"] == []
    assert result["ok"] is False


def test_decide_open_required_for_is_sorted_numerically_and_deduplicated():
    result = decide(state(gpu=gpu(capabilities=["12.0", "9.0", "10.0", "12.0"])), POLICY)
    assert result["open_required_for"] == ["10.0", "12.0"]
    result = decide(state(gpu=gpu(capabilities=["9.0", "10.0"])), dict(POLICY, open_from="9.0"))
    assert result["open_required_for"] == ["9.0", "10.0"]


def test_decide_version_falls_back_to_the_user_space_driver_then_the_loaded_module():
    only_smi = gpu(version=None, user_space_driver_version=None, driver_version="570.1",
                   kernel_module_version=None)
    result = decide(state(gpu=only_smi, installed=None), {"cuda_version": "12.8"})
    assert result["installed_version"] == "570.1"
    assert result["user_space_version"] == "570.1"
    assert result["reboot_reasons"] == ["nvidia-smi is installed but no nvidia kernel module is loaded"]
    loaded_only = gpu(version=None, kernel_module_version="570.2")
    result = decide(state(gpu=loaded_only, installed=None), {"cuda_version": "12.8"})
    assert result["installed_version"] == "570.2"
    assert result["installed_flavor"] == "open"  # from the loaded module when modinfo says nothing


def test_decide_branch_too_old_word_for_word():
    result = decide(state(gpu=gpu("570.1"), installed=dict(OPEN_MODINFO, version="570.1")), POLICY)
    assert result["problems"] == [{"code": "branch_too_old", "message": (
        "driver 570.1 (branch 570) is too old for CUDA 13.0, which needs branch >= 580: install a newer "
        "branch (nvidia_driver_method: apt, nvidia_driver_branch >= 580)")}]


def test_decide_branch_exactly_the_minimum_is_enough():
    assert decide(state(), POLICY)["problems"] == []
    result = decide(state(gpu=gpu("579.9"), installed=dict(OPEN_MODINFO, version="579.9")), POLICY)
    assert [p["code"] for p in result["problems"]] == ["branch_too_old"]


def test_decide_no_readable_version_is_no_problem_but_a_reboot():
    smi_only = gpu(version=None, driver_version="N/A", user_space_driver_version=None,
                   kernel_module_version=None)
    result = decide(state(gpu=smi_only, installed=None, loaded_flavor=None), dict(POLICY, branch="580"))
    assert result["installed_branch"] is None
    assert result["problems"] == []
    assert result["reboot_reasons"] == ["nvidia-smi is installed but no nvidia kernel module is loaded"]


@pytest.mark.parametrize(("wanted", "codes"), [("580", []), (580, []), ("590", ["branch_mismatch"]),
                                               (None, []), ("", [])])
def test_decide_wanted_branch(wanted, codes):
    result = decide(state(), dict(POLICY, branch=wanted))
    assert [p["code"] for p in result["problems"]] == codes
    if codes:
        assert result["problems"][0]["message"] == (
            f"driver 580.95.05 is installed but nvidia_driver_branch is {wanted}")


def test_decide_proprietary_on_blackwell_word_for_word():
    result = decide(state(gpu=gpu(capabilities=["12.0", "10.0", "9.0"]), loaded_flavor="proprietary",
                          installed=dict(OPEN_MODINFO, flavor="proprietary")), POLICY)
    assert result["problems"] == [{"code": "proprietary_on_blackwell", "message": (
        "the proprietary nvidia kernel modules are installed but GPUs of capability 10.0, 12.0 (Blackwell) "
        "run only with the open modules: install the open flavour (nvidia_driver_method: apt installs it)")}]
    hopper = decide(state(gpu=gpu(capabilities=["9.0"]), loaded_flavor="proprietary",
                          installed=dict(OPEN_MODINFO, flavor="proprietary")), POLICY)
    assert hopper["problems"] == []
    assert hopper["ok"] is True


def test_decide_reload_required_uses_its_reason_or_a_default():
    result = decide(state(gpu=gpu(reload_required=True, reload_reason="module 1 vs user space 2",
                                  kernel_module_version="580.1")), POLICY)
    assert result["reboot_reasons"] == ["module 1 vs user space 2"]  # not also "installed but ... loaded"
    result = decide(state(gpu=gpu(reload_required=True)), POLICY)
    assert result["reboot_reasons"] == ["the loaded module differs from the user-space driver"]
    assert result["reboot_required"] is True
    assert result["ok"] is False


def test_decide_installed_module_differs_from_the_loaded_one():
    result = decide(state(installed=dict(OPEN_MODINFO, version="580.100.1")), POLICY)
    assert result["reboot_reasons"] == ["kernel module 580.100.1 is installed but 580.95.05 is loaded"]
    assert result["installed_version"] == "580.100.1"


def test_decide_installed_flavor_differs_from_the_loaded_one():
    result = decide(state(gpu=gpu(capabilities=["9.0"]), loaded_flavor="proprietary"), POLICY)
    assert result["reboot_reasons"] == ["the open kernel modules are installed but the proprietary ones are "
                                        "loaded"]
    assert result["installed_flavor"] == "open"
    assert result["loaded_flavor"] == "proprietary"
    assert decide(state(loaded_flavor=None), POLICY)["reboot_reasons"] == []
    assert decide(state(installed=dict(OPEN_MODINFO, flavor=None)), POLICY)["reboot_reasons"] == []


def test_decide_module_installed_but_not_loaded():
    not_loaded = gpu(kernel_module_version=None)
    result = decide(state(gpu=not_loaded), POLICY)
    assert result["reboot_reasons"] == ["kernel module 580.95.05 is installed but no nvidia kernel module is "
                                        "loaded"]
    # no GPU is counted missing while no module is loaded
    result = decide(state(gpu=gpu(kernel_module_version=None, count=0)), POLICY)
    assert [p["code"] for p in result["problems"]] == []


def test_decide_nouveau_only_matters_with_a_driver():
    result = decide(state(nouveau_loaded=True), POLICY)
    assert result["reboot_reasons"] == ["nouveau is loaded (blacklisted for the next boot)"]
    assert "nouveau is loaded (blacklisted for the next boot)" not in decide(
        {"nouveau_loaded": True}, POLICY)["reboot_reasons"]


def test_decide_secure_boot_unsigned_module_not_loaded():
    result = decide(state(gpu=gpu(kernel_module_version=None), installed=dict(OPEN_MODINFO, signer=None),
                          secure_boot={"enabled": True}), POLICY)
    action = result["secure_boot_action"]
    assert action.startswith("Secure Boot is on and the installed nvidia module is not signed, so the kernel "
                             "will refuse it: sign it (DKMS signs with /var/lib/dkms/mok.key")
    assert action == (
        "Secure Boot is on and the installed nvidia module is not signed, so the kernel will refuse it: sign "
        "it (DKMS signs with /var/lib/dkms/mok.key when that key exists: reinstall the driver's dkms "
        "package after creating it) and enrol the key with `mokutil --import /var/lib/dkms/mok.pub`, then "
        "confirm the enrolment in the MOK manager on the console at the next boot; or turn Secure Boot off "
        "in the firmware")
    assert result["problems"] == [{"code": "secure_boot_unsigned", "message": action}]


def test_decide_secure_boot_signed_module_not_loaded_is_advice_only():
    result = decide(state(gpu=gpu(kernel_module_version=None), secure_boot={"enabled": True}), POLICY)
    assert result["problems"] == []
    assert result["secure_boot_action"] == (
        "Secure Boot is on: the nvidia module loads only if its signing key is enrolled (mokutil "
        "--list-enrolled); a new DKMS key needs `mokutil --import /var/lib/dkms/mok.pub` and a "
        "confirmation on the console at the next boot")
    # loaded: nothing to say; unknown Secure Boot state: nothing either
    assert decide(state(secure_boot={"enabled": True}, installed=dict(OPEN_MODINFO, signer=None)),
                  POLICY)["secure_boot_action"] is None
    assert decide(state(gpu=gpu(kernel_module_version=None), secure_boot={"enabled": None},
                        installed=dict(OPEN_MODINFO, signer=None)), POLICY)["secure_boot_action"] is None
    # no module installed at all: only the advice
    result = decide(state(gpu=gpu(kernel_module_version=None), secure_boot={"enabled": True}, installed=None),
                    POLICY)
    assert result["secure_boot_action"].startswith("Secure Boot is on: the nvidia module loads only")
    assert result["problems"] == []


def test_decide_gpus_missing_word_for_word():
    pci = {"gpus": ["0000:10:00.0", "0000:11:00.0", "0000:12:00.0"], "nvswitches": []}
    result = decide(state(pci=pci, gpu=gpu(count=2, reason="GPU 2 fell off the bus")), POLICY)
    assert result["problems"] == [{"code": "gpus_missing", "message": (
        "the PCI bus has 3 NVIDIA GPU(s) (0000:10:00.0, 0000:11:00.0, 0000:12:00.0) but the driver sees 2 "
        "(GPU 2 fell off the bus): check dmesg for Xid/RmInit errors, and fabric manager on NVSwitch "
        "systems")}]
    result = decide(state(pci=pci, gpu=gpu(count=2)), POLICY)
    assert result["problems"][0]["message"].startswith(
        "the PCI bus has 3 NVIDIA GPU(s) (0000:10:00.0, 0000:11:00.0, 0000:12:00.0) but the driver sees 2: "
        "check dmesg")
    # as many as the bus has: fine; a reload pending: not judged
    assert decide(state(pci=dict(pci, gpus=pci["gpus"][:2]), gpu=gpu(count=2)), POLICY)["problems"] == []
    assert decide(state(pci=pci, gpu=gpu(count=2, reload_required=True)), POLICY)["problems"] == []


def test_decide_without_pci_facts():
    assert decide(state(pci=None), POLICY)["problems"] == []


def test_required_branch_accepts_numbers_and_a_custom_table():
    assert required_branch(13.0) == 580
    assert required_branch("12", {12: "530"}) == 530
    with pytest.raises(DriverPolicyError) as info:
        required_branch(None)
    assert str(info.value) == ("no minimum driver branch known for CUDA None (known majors: 11, 12, 13); "
                               "add it to nvidia_driver_min_branch")


@pytest.mark.parametrize(("version", "branch"), [("1000.1", 1000), ("58.1", None), ("580", None),
                                                 ("x580.1", None)])
def test_branch_of_edges(version, branch):
    assert branch_of(version) == branch


def test_flavor_from_proc_reads_only_the_first_line():
    assert flavor_from_proc("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05\n") == "open"
    text = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05\nOpen Kernel Module\n"
    assert flavor_from_proc(text) == "proprietary"
    assert flavor_from_proc("GCC version: gcc\nNVRM version: NVIDIA UNIX Open Kernel Module\n") is None
    assert flavor_from_proc(None) is None


def test_flavor_from_license():
    assert flavor_from_license("Dual MIT/GPL") == "open"
    assert flavor_from_license("NVIDIA") == "proprietary"
    assert flavor_from_license("") is None
    assert flavor_from_license(None) is None


def test_read_loaded_flavor_of_a_file(tmp_path):
    version = tmp_path / "version"
    version.write_bytes(b"NVRM version: NVIDIA UNIX Open Kernel Module \xff 580.95.05\n")
    assert read_loaded_flavor(str(version)) == "open"


def test_parse_modinfo_keeps_the_first_value_and_strips_it():
    text = ("  filename:   /a/nvidia.ko  \nversion:  580.1  \nversion: 999\nlicense: NVIDIA\nsigner:\n"
            "description: x\n")
    assert parse_modinfo(text) == {"filename": "/a/nvidia.ko", "version": "580.1", "flavor": "proprietary",
                                   "signer": None}
    assert parse_modinfo("version:\n") is None
    assert parse_modinfo(None) is None
    assert parse_modinfo("version: 1\n") == {"filename": None, "version": "1", "flavor": None, "signer": None}


def fake_run(answers, calls):
    def run(argv, timeout, merge_stderr=False):
        calls.append((argv, timeout, merge_stderr))
        answer = answers[argv[-1]]
        if isinstance(answer, Exception):
            raise answer
        return answer
    return run


def test_installed_module_runs_modinfo_nvidia(monkeypatch):
    calls = []
    answer = (0, b"version: 580.1\ndescription: \xff\n", b"")
    monkeypatch.setattr(nvidia_driver, "run_bounded", fake_run({"nvidia": answer}, calls))
    assert installed_module("/x/modinfo") == {"filename": None, "version": "580.1", "flavor": None,
                                              "signer": None}
    assert calls == [(["/x/modinfo", "nvidia"], 30, False)]
    assert installed_module("/x/modinfo", timeout=5) is not None
    assert calls[-1][1] == 5


TIMEOUT = RunTimeout(["m"], 1, b"", b"", None)


@pytest.mark.parametrize("answer", [(1, b"version: 580.1\n", b""), TIMEOUT, OSError("gone")])
def test_installed_module_is_none_when_modinfo_fails(monkeypatch, answer):
    monkeypatch.setattr(nvidia_driver, "run_bounded", fake_run({"nvidia": answer}, []))
    assert installed_module("/x/modinfo") is None


def test_installed_module_finds_modinfo_on_the_path_or_in_sbin(monkeypatch):
    calls = []
    monkeypatch.setattr(nvidia_driver, "run_bounded", fake_run({"nvidia": (0, b"version: 1\n", b"")}, calls))
    monkeypatch.setattr(nvidia_driver.shutil, "which", lambda name: "/p/" + name)
    installed_module()
    assert calls[-1][0] == ["/p/modinfo", "nvidia"]
    monkeypatch.setattr(nvidia_driver.shutil, "which", lambda name: None)
    monkeypatch.setattr(nvidia_driver.os, "access",
                        lambda path, mode: mode == os.X_OK and path == "/sbin/modinfo")
    installed_module()
    assert calls[-1][0] == ["/sbin/modinfo", "nvidia"]
    monkeypatch.setattr(nvidia_driver.os, "access", lambda path, mode: True)
    installed_module()
    assert calls[-1][0] == ["/usr/sbin/modinfo", "nvidia"]
    monkeypatch.setattr(nvidia_driver.os, "access", lambda path, mode: False)
    assert installed_module() is None
    assert len(calls) == 3


def test_secure_boot_short_efivar_falls_back_to_mokutil(tmp_path, monkeypatch):
    (tmp_path / "var").write_bytes(b"\x06\x00\x00\x00")
    calls = []
    monkeypatch.setattr(nvidia_driver, "run_bounded",
                        fake_run({"--sb-state": (0, b"SecureBoot enabled \xff\n", b"")}, calls))
    assert secure_boot(str(tmp_path / "var"), str(tmp_path), mokutil="/m") == {
        "enabled": True, "source": "mokutil --sb-state"}
    assert calls == [(["/m", "--sb-state"], 10, True)]
    (tmp_path / "var").write_bytes(b"\x06\x00\x00\x00\x02")  # neither 0 nor 1: not enabled
    assert secure_boot(str(tmp_path / "var"), str(tmp_path)) == {"enabled": False,
                                                                 "source": str(tmp_path / "var")}


def test_secure_boot_legacy_boot_word_for_word(tmp_path):
    assert secure_boot(str(tmp_path / "var"), str(tmp_path / "none")) == {
        "enabled": False, "source": "no EFI firmware (legacy boot has no Secure Boot)"}


@pytest.mark.parametrize("answer", [(0, b"something else\n", b""), TIMEOUT, OSError("gone")])
def test_secure_boot_unknown(tmp_path, monkeypatch, answer):
    monkeypatch.setattr(nvidia_driver, "run_bounded", fake_run({"--sb-state": answer}, []))
    assert secure_boot(str(tmp_path / "var"), str(tmp_path), mokutil="/m") == {
        "enabled": None, "source": "unknown (no readable SecureBoot EFI variable, no mokutil)"}


def test_secure_boot_finds_mokutil_on_the_path(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(nvidia_driver, "run_bounded",
                        fake_run({"--sb-state": (0, b"SecureBoot disabled\n", b"")}, calls))
    monkeypatch.setattr(nvidia_driver.shutil, "which", lambda name: "/p/" + name)
    assert secure_boot(str(tmp_path / "var"), str(tmp_path))["enabled"] is False
    assert calls[0][0] == ["/p/mokutil", "--sb-state"]


def test_pci_inventory_classes_and_case(tmp_path):
    devices = {"a": ("0x10DE", "0x030000"), "b": ("0x10de", "0x0302ff"), "c": ("0x10de", "0x068000"),
               "d": ("0x10de", "0x040300"), "e": ("0x1002", "0x030000"), "f": ("", ""),
               "0-amd": ("0x1002", "0x030200")}
    for name, (vendor, device_class) in devices.items():
        (tmp_path / name).mkdir()
        if vendor:
            (tmp_path / name / "vendor").write_text(vendor + "\n")
            (tmp_path / name / "class").write_text(device_class + "\n")
    assert pci_inventory(str(tmp_path)) == {"gpus": ["a", "b"], "nvswitches": ["c"]}


def test_pci_inventory_reads_sysfs_bytes_that_are_not_ascii(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "vendor").write_bytes(b"0x10de\n")
    (tmp_path / "a" / "class").write_bytes(b"0x030200 \xe9\n")
    assert pci_inventory(str(tmp_path)) == {"gpus": ["a"], "nvswitches": []}


def test_decide_uses_the_policys_minimum_branches():
    policy = {"cuda_version": "13.0", "min_branch": {"13": 590}}
    result = decide(state(), policy)
    assert result["required_branch"] == 590
    assert [p["code"] for p in result["problems"]] == ["branch_too_old"]


def test_decide_prefers_the_user_space_driver_version():
    result = decide(state(gpu=gpu(user_space_driver_version="580.1", driver_version="570.2")), POLICY)
    assert result["user_space_version"] == "580.1"
