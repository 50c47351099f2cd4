"""The doctor on real hosts: verify.yml on a fleet of its own, one fault injected per stage, one host each,
and each host's report names that stage first with its cause and fix.

Every host gets a light stack (tests/light_stack.py); a lock is taken from the last host before any fault.
The faults: the driver (a STAND-IN nvidia-smi replaying a Driver/library version mismatch), the GPU
interconnect (the stand-in replaying 8x RTX PRO 6000 whose peer-to-peer is broken by ACS; the same driver
stage), the toolkit (the host's toolkit configuration names a home without nvcc), torch (no stack in use:
`current` removed), the service and the gateway (health URLs nothing listens on), and the lock (a package
changed by hand). The kernel, weights and speculative-acceptance stages need a kernel or a model server these
hosts do not have; the unit tests (tests/unit/test_verify_doctor.py) cover their order.
"""

from __future__ import annotations

import json
import os

import pytest
from ansible_run import REPO_ROOT, run_on_fleet
from cache import pip_download, wheelhouse
from fleet import Fleet
from light_stack import LIGHT_PLAY, LIGHT_STACK, LIGHT_WHEELS, UV
from pins import UV_BIN

pytestmark = pytest.mark.integration

VERIFY = REPO_ROOT / "playbooks" / "verify.yml"
SNAPSHOT = REPO_ROOT / "playbooks" / "snapshot.yml"
STAND_INS = REPO_ROOT / "tests" / "stand_ins"
OTHER_FILELOCK = "filelock==3.20.0"
# host -> (the stage broken on it, the check that says so first)
FAULTS = {1: ("driver", "gpu"), 2: ("driver", "topology"), 3: ("toolkit", "cuda"), 4: ("torch", "torch"),
          5: ("service", "service"), 6: ("gateway", "gateway"), 7: ("lock", "drift")}
NOTHING_LISTENS = "http://127.0.0.1:9/health"


def play(fleet, playbook, **extravars):
    result = run_on_fleet(playbook, fleet.inventory, extravars=extravars)
    assert result.rc == 0, result.stdout[-5000:]
    return result


def stand_in_nvidia_smi(fleet, host, recording):
    """The stand-in nvidia-smi on ``host``, replaying ``recording``, as /usr/local/bin/nvidia-smi."""
    play(fleet, [{"hosts": host, "gather_facts": False, "tasks": [
        {"name": "Make its directory", "ansible.builtin.file": {
            "path": "/opt/stand-in", "state": "directory", "mode": "0755"}},
        {"name": "Copy the stand-in", "ansible.builtin.copy": {
            "src": str(STAND_INS / "nvidia-smi"), "dest": "/opt/stand-in/nvidia-smi", "mode": "0755"}},
        {"name": "Copy the recording", "ansible.builtin.copy": {
            "src": f"{STAND_INS / 'nvidia-smi-recordings' / recording}/", "dest": "/opt/stand-in/recording/",
            "mode": "0644"}},
        {"name": "Put it where gpu_facts looks", "ansible.builtin.copy": {
            "dest": "/usr/local/bin/nvidia-smi", "mode": "0755",
            "content": ("#!/bin/sh\nNVIDIA_SMI_RECORDING=/opt/stand-in/recording "
                        "exec /opt/stand-in/nvidia-smi \"$@\"\n")}},
    ]}])


@pytest.fixture(scope="module")
def faulty_fleet(fleet_base, tmp_path_factory):
    """Seven hosts with a light stack, a lock from the last one, then one fault per host."""
    pip_download([*LIGHT_WHEELS, UV])
    pip_download([OTHER_FILELOCK])  # apart: one resolve cannot hold two filelock versions
    fleet = Fleet(f"vd{os.getpid() % 10**6}")
    work = tmp_path_factory.mktemp("doctor")
    try:
        fleet.up(len(FAULTS), owner_pid=os.getpid())
        hosts = {n: h["name"] for n, h in enumerate(fleet.hosts, start=1)}
        play(fleet, LIGHT_PLAY)
        play(fleet, SNAPSHOT, snapshot_host=hosts[7], snapshot_name="doctor",
             stack_snapshot_locks_dir=str(work), stack_wheel_cache_dir=str(wheelhouse()))
        stand_in_nvidia_smi(fleet, hosts[1], "nvml-mismatch")
        stand_in_nvidia_smi(fleet, hosts[2], "rtx-pro-6000-x8-acs")
        fleet.ssh(hosts[4], "rm /opt/sglang/stacks/current")
        fleet.ssh(hosts[7], f"{UV_BIN} pip install --python "
                            f"/opt/sglang/stacks/{LIGHT_STACK}/bin/python --no-index --find-links "
                            f"{fleet.wheelhouse_url} {OTHER_FILELOCK}")
        yield fleet, hosts, work / "doctor.lock.yml", work
    finally:
        fleet.down()


def only_on(host, value, elsewhere=""):
    """An extra var that is ``value`` on ``host`` and ``elsewhere`` on the others (a Jinja expression)."""
    return f"{{{{ {value!r} if inventory_hostname == {host!r} else {elsewhere!r} }}}}"


@pytest.fixture(scope="module")
def report(faulty_fleet):
    fleet, hosts, lock, work = faulty_fleet
    reports = work / "reports"
    result = play(
        fleet, VERIFY, verify_lock_file=str(lock), verify_reports_dir=str(reports), verify_fail=False,
        stack_wheel_cache_dir=str(wheelhouse()),
        # the toolkit the host's configuration names is where there is none (verify reads it through the
        # stack role's `facts`, which asks cuda_toolchain's)
        cuda_toolchain_method=only_on(hosts[3], "existing", "auto"),
        cuda_toolchain_existing_home=only_on(hosts[3], "/opt/no-cuda"),
        verify_service_url=only_on(hosts[5], NOTHING_LISTENS),
        verify_gateway_url=only_on(hosts[6], NOTHING_LISTENS))
    return (hosts, result, json.loads((reports / "verify.json").read_text()),
            (reports / "verify.md").read_text())


@pytest.mark.parametrize("number", sorted(FAULTS))
def test_each_host_names_its_broken_stage_first(report, number):
    hosts, _result, data, markdown = report
    stage, check = FAULTS[number]
    host = next(h for h in data["hosts"] if h["host"] == hosts[number])
    assert host["status"] == "fail"
    assert host["fix_first"].startswith(f"{hosts[number]}: fix the {stage} stage first. {check}: "), host
    [first] = [c for c in host["checks"] if c["status"] == "fail"][:1]
    assert (first["check"], first["stage"]) == (check, stage)
    assert first["cause"]
    assert first["fix"]
    assert f"**Fix first:** {host['fix_first'].replace('|', '/')}" in markdown


def test_the_faults_are_the_injected_ones(report):
    hosts, _result, data, _markdown = report
    checks = {h["host"]: {c["check"]: c for c in h["checks"]} for h in data["hosts"]}
    assert "Driver/library version mismatch" in checks[hosts[1]]["gpu"]["detail"]
    assert checks[hosts[1]]["driver"]["status"] == "fail"
    topology = checks[hosts[2]]["topology"]
    assert topology["detail"].startswith("22 of 28 GPU pairs cannot use peer-to-peer over PCIe")
    assert "iommu=pt" in topology["fix"]
    assert checks[hosts[3]]["cuda"]["detail"] == ("no CUDA toolkit where the host's cuda_toolchain settings "
                                                  "look (no nvcc found)")
    assert checks[hosts[4]]["torch"]["detail"] == "no stack in use: /opt/sglang/stacks/current does not exist"
    assert checks[hosts[5]]["service"]["detail"].startswith(f"{NOTHING_LISTENS} did not answer")
    assert checks[hosts[6]]["gateway"]["detail"].startswith(f"{NOTHING_LISTENS} did not answer")
    assert checks[hosts[7]]["drift"]["detail"].startswith("filelock is 3.20.0, the lock has 4.3.1")


def test_the_report_opens_with_what_to_fix_first(report):
    _hosts, result, data, markdown = report
    assert data["fix_first"] == [h["fix_first"] for h in data["hosts"]]
    lines = markdown.splitlines()
    bullets = [f"- **Fix first** {line.replace('|', '/')}" for line in data["fix_first"]]
    assert lines[2:2 + len(FAULTS)] == bullets
    # the table the play prints opens with the same lines
    [table] = [r["table"] for results in result.results.values() for r in results
               if r.get("task") == "Summarise every host's checks and write the reports"]
    assert table.splitlines()[:len(FAULTS)] == [f"FIX FIRST {line}" for line in data["fix_first"]]
