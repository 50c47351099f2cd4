"""Role nvidia_driver on real fleet hosts: the apt method (check mode, then for real, then idempotent)
against a stand-in apt repository, and the reboot contract with a REAL reboot of a host.

There is no GPU, no driver and no NVIDIA repository here. Named stand-ins replace them: a recorded
nvidia-smi and modinfo (tests/stand_ins/), a /run file naming the module "loaded" in this boot and a
boot unit that "loads" the installed one at the next boot, a PCI tree with 8 NVIDIA GPUs, and .deb
packages named like NVIDIA's that hold no driver (tests/stand_ins/driver_apt_repo.py). Everything
else is real: apt, the pin, dpkg holds, systemd units, the reboot (the harness restarts the host's
container) and ssh coming back.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from ansible_run import REPO_ROOT, run_on_fleet
from fleet import Fleet

sys.path.insert(0, str(REPO_ROOT / "tests" / "stand_ins"))
import driver_apt_repo

pytestmark = pytest.mark.integration

HERE = Path(__file__).resolve().parent / "nvidia_driver"
STAND_INS = REPO_ROOT / "tests" / "stand_ins"
BOOT_MARK = "awk '{print $22}' /proc/1/stat"
APT_HOST, REBOOT_HOST = "apt", "reboot"
PIN = "/etc/apt/preferences.d/nvidia-driver-branch"
BLACKLIST = "/etc/modprobe.d/nvidia-driver-blacklist-nouveau.conf"
DROPIN = "/etc/systemd/system/nvidia-persistenced.service.d/persistence-mode.conf"
MODEL_PORT = 30123
# the model the reboot host serves: sglang_service's drain and readiness gate read its port from here
MODEL = {"name": "main", "model_path": "/models/stand-in", "port": MODEL_PORT,
         "extra_args": ["--enable-metrics"]}
# STAND-IN model service (tests/integration/fleet/nvidia_driver/stand_in_model.py: answers /metrics and
# /health_generate, no GPU), under the name sglang_service gives a model's unit
MODEL_UNIT = f"""[Unit]
Description=STAND-IN model service
[Service]
ExecStart=/usr/bin/python3 /opt/stand-in/stand_in_model.py {MODEL_PORT}
ExecStopPost=/usr/bin/python3 /opt/stand-in/stand_in_model.py --stopped
[Install]
WantedBy=multi-user.target
"""


@pytest.fixture(scope="module")
def driver_fleet(fleet_base, tmp_path_factory):
    fleet = Fleet(f"n{os.getpid() % 10**8}")
    try:
        fleet.up([APT_HOST, REBOOT_HOST], owner_pid=os.getpid(), cuda=False)
        repo = driver_apt_repo.build(tmp_path_factory.mktemp("stand-in-apt"))
        common = {"stand_ins": str(STAND_INS), "stand_in_repo": str(repo),
                  "stand_in_modinfo": "open-580.95.05", "stand_in_next_boot": "b200-x8"}
        # apt host: a working 580 driver is "loaded"; reboot host: 575 still loaded, 580 installed
        for host, loaded in ((APT_HOST, "b200-x8"), (REBOOT_HOST, "nvml-mismatch")):
            result = play(fleet, HERE / "stand_in.yml", limit=host,
                          extravars={**common, "stand_in_loaded": loaded})
            assert result.rc == 0, result.stdout
        # STAND-IN update-initramfs: records each call
        fleet.ssh(APT_HOST, "printf '#!/bin/sh\\necho \"$@\" >> /root/initramfs.log\\n' "
                            "> /usr/sbin/update-initramfs && chmod 755 /usr/sbin/update-initramfs")
        server = (HERE / "stand_in_model.py").read_text()
        fleet.ssh(REBOOT_HOST, f"cat > /opt/stand-in/stand_in_model.py <<'EOF'\n{server}EOF\n")
        fleet.ssh(REBOOT_HOST, f"cat > /etc/systemd/system/sglang-main.service <<'EOF'\n{MODEL_UNIT}EOF\n"
                               "systemctl daemon-reload && systemctl enable --now sglang-main.service")
        yield fleet
    finally:
        fleet.down()


def play(fleet, playbook, *, limit, extravars=None, check=False):
    return run_on_fleet(playbook, fleet.inventory, limit=limit, extravars=extravars, check=check)


def converge(fleet, host, check=False, **variables):
    return play(fleet, HERE / "converge.yml", limit=host, check=check, extravars=variables)


def sh(fleet, host, command):
    return fleet.ssh(host, command, check=False).stdout.strip()


APT_VARS = {"nvidia_driver_method": "apt", "nvidia_driver_nvswitch": "present"}


@pytest.fixture(scope="module")
def apt_runs(driver_fleet):
    check = converge(driver_fleet, APT_HOST, check=True, **APT_VARS)
    after_check = sh(driver_fleet, APT_HOST, f"ls {PIN} {BLACKLIST} {DROPIN} 2>&1; dpkg -l 'nvidia-*' 2>&1")
    first = converge(driver_fleet, APT_HOST, **APT_VARS)
    second = converge(driver_fleet, APT_HOST, **APT_VARS)
    return check, after_check, first, second


def test_apt_check_mode_changes_nothing(apt_runs):
    check, after_check, _first, _second = apt_runs
    assert check.rc == 0, check.stdout
    install = check.task(APT_HOST, "Install the open-module driver, branch 580")
    # apt's simulation runs without the pin (check mode writes none), so NVIDIA's exact-version
    # dependencies resolve to the newer branch and the simulation fails: check mode ignores that
    assert install.get("changed") or "--simulate install" in install.get("msg", ""), install
    assert check.task(APT_HOST, "Pin the driver packages to branch 580")["changed"] is True
    assert after_check.count("No such file") == 3  # pin, blacklist, drop-in
    assert "no packages found" in after_check.lower()


def test_apt_installs_the_pinned_branch_and_holds_it(driver_fleet, apt_runs):
    _check, _after, first, _second = apt_runs
    assert first.rc == 0, first.stdout
    versions = sh(driver_fleet, APT_HOST, "dpkg-query -W -f '${Package}=${Version}\\n' 'nvidia-*' nvlsm")
    # the repository offers 590.44.01 too: the pin keeps branch 580
    assert set(versions.split()) == {"nvidia-driver-cuda=580.95.05-1", "nvidia-kernel-open-dkms=580.95.05-1",
                                     "nvidia-persistenced=580.95.05-1", "nvidia-fabricmanager=580.95.05-1",
                                     "nvlsm=2025.06.5-1"}
    assert set(sh(driver_fleet, APT_HOST, "apt-mark showhold").split()) == {
        "nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-fabricmanager", "nvlsm"}
    assert "590" in sh(driver_fleet, APT_HOST, "apt-cache policy nvidia-driver-cuda")  # offered, refused
    pin = sh(driver_fleet, APT_HOST, f"cat {PIN}")
    assert "Pin: version 580.*" in pin
    assert "Pin-Priority: 1001" in pin
    assert "Package: nvidia-* libnvidia-*" in pin


def test_apt_renders_blacklist_initramfs_and_persistence(driver_fleet, apt_runs):
    assert "blacklist nouveau\noptions nouveau modeset=0" in sh(driver_fleet, APT_HOST, f"cat {BLACKLIST}")
    assert sh(driver_fleet, APT_HOST, "cat /root/initramfs.log") == "-u -k all"  # once, by the handler
    assert "--persistence-mode" in sh(driver_fleet, APT_HOST, f"cat {DROPIN}")
    enabled = sh(driver_fleet, APT_HOST, "systemctl is-enabled nvidia-persistenced nvidia-fabricmanager")
    assert enabled.split() == ["enabled", "enabled"]
    assert sh(driver_fleet, APT_HOST, "systemctl is-active nvidia-fabricmanager") == "active"
    # the drop-in's command line is what runs (the stand-in daemon records its arguments)
    assert sh(driver_fleet, APT_HOST, "cat /run/nvidia-persistenced.args") == (
        "--user nvidia-persistenced --persistence-mode --verbose")


def test_apt_second_run_changes_nothing(apt_runs):
    _check, _after, first, second = apt_runs
    assert first.stats["changed"].get(APT_HOST)
    assert second.rc == 0, second.stdout
    assert not second.stats["changed"].get(APT_HOST), [
        r["task"] for r in second.results[APT_HOST] if r.get("changed")]


@pytest.fixture(scope="module")
def reboot_runs(driver_fleet):
    boot = sh(driver_fleet, REBOOT_HOST, BOOT_MARK)
    refused = converge(driver_fleet, REBOOT_HOST)
    after_refused = sh(driver_fleet, REBOOT_HOST, BOOT_MARK)
    checked = converge(driver_fleet, REBOOT_HOST, check=True, nvidia_driver_reboot_ok=True)
    # the host serves a model (sglang_service_models) and the inventory has no gateway host
    drain = {"nvidia_driver_reboot_ok": True, "nvidia_driver_stop_services": ["sglang-main"],
             "sglang_service_models": [MODEL], "sglang_service_gate_step": 2, "sglang_service_gate_bound": 60}
    rebooted = converge(driver_fleet, REBOOT_HOST, **drain)
    after_reboot = sh(driver_fleet, REBOOT_HOST, BOOT_MARK)
    log = sh(driver_fleet, REBOOT_HOST, "cat /root/rotation.log").splitlines()
    again = converge(driver_fleet, REBOOT_HOST, **drain)
    return {"boot": boot, "refused": refused, "after_refused": after_refused, "checked": checked,
            "rebooted": rebooted, "after_reboot": after_reboot, "again": again,
            "after_again": sh(driver_fleet, REBOOT_HOST, BOOT_MARK), "log": log,
            "log_after_again": sh(driver_fleet, REBOOT_HOST, "cat /root/rotation.log").splitlines()}


def test_reboot_needed_but_not_allowed_stops_the_host(reboot_runs):
    refused = reboot_runs["refused"]
    assert refused.rc != 0
    result = refused.task(REBOOT_HOST, "Stop the host until it is rebooted")
    assert result["event"] == "runner_on_failed"
    assert "nvidia_driver_reboot_required" in result["msg"]
    assert "Driver/library version mismatch" in result["msg"]
    assert "Re-run after reboot" in result["msg"]
    assert reboot_runs["after_refused"] == reboot_runs["boot"]  # never reboots by surprise


def test_check_mode_only_says_it_would_reboot(reboot_runs):
    checked = reboot_runs["checked"]
    assert checked.rc == 0, checked.stdout
    assert "would drain, reboot and verify" in checked.task(
        REBOOT_HOST, "Say what a real run would do (check mode never drains or reboots)")["msg"]
    assert reboot_runs["log"][0].startswith("metrics ")  # the first drain is the real run's, not check mode's


def test_reboot_allowed_drains_reboots_and_verifies(reboot_runs):
    rebooted = reboot_runs["rebooted"]
    assert rebooted.rc == 0, rebooted.stdout
    boot, new_boot = reboot_runs["after_refused"], reboot_runs["after_reboot"]
    assert new_boot != boot  # the host really rebooted
    reboot = next(r for r in rebooted.results[REBOOT_HOST] if r["task"].startswith("Reboot for the driver"))
    assert reboot["changed"] is True
    assert reboot["rebooted"] is True
    verified = rebooted.task(REBOOT_HOST,
                             "Require the loaded driver to be the installed one and every GPU visible")
    assert "loaded == installed, 8 GPU(s) visible" in verified["msg"]
    # sglang_service's own entry points, in this order: out of rotation (no gateway host: it says so, by
    # name, instead of skipping), drained (its /metrics, at the model's own port, read while it served),
    # the model stopped by the role (system running), the reboot, the driver check, the readiness gate of
    # the model the boot started again (the new boot), back into rotation (said again)
    tasks = [r["task"] for r in rebooted.results[REBOOT_HOST] if r["event"] != "runner_on_skipped"]
    steps = ["Say that no gateway fronts the host", "Wait for the requests in flight of each model to finish",
             "Stop the host's services before the reboot", reboot["task"],
             "Require the loaded driver to be the installed one and every GPU visible",
             "Progress of sglang-main", "Say that no gateway fronts the host"]
    at = [tasks.index(steps[0])]
    for step in steps[1:]:
        at.append(tasks.index(step, at[-1] + 1))
    assert at == sorted(at), list(zip(steps, at))
    notices = [r["msg"] for r in rebooted.results[REBOOT_HOST]
               if r["task"] == "Say that no gateway fronts the host"]
    assert notices == [
        f"group sglang_gateway has no host: {REBOOT_HOST}, which serves main, is in no gateway's rotation "
        f"to be {done}; clients that reach it directly are not turned away"
        for done in ("taken out of it", "put back into it")]
    drained = rebooted.task(REBOOT_HOST, "Say how the drain went")["results"]
    assert [r["msg"] for r in drained] == ["sglang-main: no request in flight after 1 look(s)"]
    log = reboot_runs["log"]
    assert log[:2] == [f"metrics {boot}", f"stopped {boot} running"], log
    assert log[2:], log
    assert set(log[2:]) == {f"health_generate {new_boot}"}, log


def test_rerun_after_reboot_changes_nothing_and_does_not_reboot(reboot_runs):
    again = reboot_runs["again"]
    assert again.rc == 0, again.stdout
    assert reboot_runs["after_again"] == reboot_runs["after_reboot"]
    assert not again.stats["changed"].get(REBOOT_HOST), [
        r["task"] for r in again.results[REBOOT_HOST] if r.get("changed")]
    assert reboot_runs["log_after_again"] == reboot_runs["log"]  # no drain, no gate: nothing to reboot for


def test_existing_on_an_nvswitch_system_requires_fabric_manager(driver_fleet, apt_runs):
    # after the apt runs the host has the stand-in fabric manager running; `existing` only verifies
    existing = {"nvidia_driver_method": "existing", "nvidia_driver_nvswitch": "present"}
    passed = converge(driver_fleet, APT_HOST, **existing)
    assert passed.rc == 0, passed.stdout
    assert not passed.stats["changed"].get(APT_HOST)
    driver_fleet.ssh(APT_HOST, "systemctl stop nvidia-fabricmanager")
    try:
        failed = converge(driver_fleet, APT_HOST, **existing)
    finally:
        driver_fleet.ssh(APT_HOST, "systemctl start nvidia-fabricmanager")
    assert failed.rc != 0
    result = failed.task(APT_HOST, "Require fabric manager to run (existing driver on an NVSwitch system)")
    [item] = result["results"]  # one item per fabric manager unit
    assert "is an NVSwitch system but nvidia-fabricmanager is" in item["msg"]
