"""The doctor in module_utils/verify_report: a stage per check, a cause and fix per failure, checks in the
order the serving chain breaks, and the line that says what to fix first.

One fault per stage: hosts whose checks come from host_checks (the real path, from module results) for
the stages that exist today, plus a weights and a speculative-acceptance check added the way the table
says to (one Diagnosis line), to show the order holds for them too.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from ansible.module_utils import verify_report
from ansible.module_utils.gpu_topology import parse_matrix, topology_from
from ansible.module_utils.verify_report import (
    DOCTOR,
    STAGES,
    Diagnosis,
    check_order,
    fix_first,
    host_checks,
    render_markdown,
    render_table,
    summarize,
)

RECORDINGS = Path(__file__).resolve().parent.parent / "stand_ins" / "nvidia-smi-recordings"


def matrices(recording):
    """The parsed topo -m and p2p matrices of a recording of tests/stand_ins/nvidia-smi-recordings."""
    def parsed(call):
        return parse_matrix((RECORDINGS / recording / f"{call}.txt").read_text())
    return parsed("topo-m"), {"read": parsed("topo-p2p-r"), "write": parsed("topo-p2p-w")}

GPU = {"present": True, "gpus": [{"name": "NVIDIA RTX PRO 6000"}] * 8, "capabilities": ["12.0"],
       "driver_version": "580.95.05", "cuda_driver_version": "13.0", "reload_required": False,
       "topology": topology_from(*matrices("rtx-pro-6000-x8"))}
STACK = {"facts": {"stack": {"root": "/opt/sglang/stacks", "name": "stable-abc", "path": "/x"},
                   "cuda": {"toolkit_version": "13.0", "nvcc_version": "13.0.88",
                            "nvcc": "/usr/local/cuda/bin/nvcc"}}}
GOOD = {"torch": {"torch_version": "2.14.1", "build": "cuda", "missing": [], "require": ["12.0"]},
        "kernel": {"variants": {}, "selected_covers": True, "selected_variant": "sm100", "capability": "12.0",
                   "package_version": "0.4.10"},
        "scan": {"missing": {}, "counts": {"with_device_code": 7}},
        "service": {"status": 200, "url": "http://127.0.0.1:30000/health"},
        "gateway": {"status": 200, "url": "http://127.0.0.1:8000/health"},
        "drift": {"drift": []}}
# One fault per stage of today's checks: what breaks, as module results.
FAULTS = {
    "driver": {"gpu": {**GPU, "reload_required": True,
                       "reload_reason": ("kernel module 575.57.08 is loaded but the user-space driver is "
                                         "580.95.05")}},
    "toolkit": {"stack": {"facts": {**STACK["facts"], "cuda": {"nvcc": "/usr/local/cuda/bin/nvcc"}}}},
    "torch": {"torch": {**GOOD["torch"], "missing": ["12.0"]}},
    "kernel": {"kernel": {"variants": {}, "selected_covers": False, "message": "sm100 has no code for 12.0"}},
    "service": {"service": {"status": -1, "url": "http://127.0.0.1:30000/health", "msg": "timed out"}},
    "gateway": {"gateway": {"status": 503, "url": "http://127.0.0.1:8000/health"}},
    "lock": {"drift": {"drift": [{"message": "six is 1.16.0, the lock has 1.17.0"}]}},
}
# A check added the way the docs ask (one table line): weights; the speculative check is in the table.
ADDED = (Diagnosis("weights", "weights", "the weights are missing or do not match their checksums",
                   "run playbooks/site.yml to stage them"),)
SPECULATIVE = next(d for d in DOCTOR if d.check == "speculative")
EXTRA_FAULTS = {"weights": {"check": "weights", "status": "fail",
                            "detail": "model.safetensors: sha256 differs"},
                "speculative acceptance": {"check": "speculative", "status": "fail",
                                           "detail": "accept length 1.2 < 2.0"}}


@pytest.fixture
def doctor(monkeypatch):
    monkeypatch.setattr(verify_report, "DOCTOR", DOCTOR + ADDED)


def checks_with(*stages):
    """A host's checks with the faults of ``stages``, in a shuffled order (the report orders them)."""
    results = dict(GOOD, gpu=GPU, stack=STACK)
    for stage in stages:
        results.update(FAULTS.get(stage, {}))
    checks = host_checks(results.pop("gpu"), results.pop("stack"), **results)
    checks += [EXTRA_FAULTS[stage] for stage in stages if stage in EXTRA_FAULTS]
    random.Random(len(stages)).shuffle(checks)
    return checks


def test_the_stages_are_the_chain_of_the_issue():
    assert STAGES == ("driver", "toolkit", "torch", "kernel", "weights", "service", "speculative acceptance",
                      "gateway", "lock")


def test_every_check_of_the_table_has_a_stage_a_cause_and_a_fix():
    assert len({d.check for d in DOCTOR}) == len(DOCTOR)
    for diagnosis in DOCTOR:
        assert diagnosis.stage in STAGES, diagnosis
        assert diagnosis.cause, diagnosis
        assert diagnosis.fix, diagnosis
    assert check_order() == ("gpu", "driver", "topology", "cuda", "torch", "kernel", "environment", "service",
                             "speculative", "gateway", "drift")


def test_an_added_line_places_its_check_by_its_stage(doctor):
    assert check_order() == ("gpu", "driver", "topology", "cuda", "torch", "kernel", "environment", "weights",
                             "service", "speculative", "gateway", "drift")


def test_a_healthy_host_has_nothing_to_fix_first(doctor):
    report = summarize({"gpu-1": checks_with()})
    assert report["status"] == "ok"
    assert report["fix_first"] == []
    assert report["hosts"][0]["fix_first"] is None
    assert [c["status"] for c in report["hosts"][0]["checks"]] == ["ok"] * 10


STAGE_ORDER = [stage for stage in STAGES if stage in FAULTS or stage in EXTRA_FAULTS]


@pytest.mark.parametrize("first", STAGE_ORDER)
def test_the_first_broken_stage_is_what_to_fix_first(doctor, first):
    # faults at this stage and at every later one: the earliest one wins, whatever order they came in
    later = STAGE_ORDER[STAGE_ORDER.index(first):]
    report = summarize({"gpu-1": checks_with(*later)})
    host = report["hosts"][0]
    failed = [c for c in host["checks"] if c["status"] == "fail"]
    assert [c["stage"] for c in failed] == later
    assert host["fix_first"].startswith(f"gpu-1: fix the {first} stage first. {failed[0]['check']}: ")
    assert report["fix_first"] == [host["fix_first"]]
    assert render_table(report).splitlines()[0] == f"FIX FIRST {host['fix_first']}"
    assert render_markdown(report).splitlines()[2] == f"- **Fix first** {host['fix_first']}"


def test_one_fault_per_stage_on_one_host_each(doctor):
    hosts = {f"gpu-{n}-{stage.split()[0]}": checks_with(stage) for n, stage in enumerate(STAGE_ORDER)}
    report = summarize(hosts)
    assert report["counts"] == {"hosts": 9, "passed": 0, "failed": 9}
    expected = {
        "driver": ("driver", "kernel module 575.57.08 is loaded but the user-space driver is 580.95.05",
                   "the driver was upgraded without a reboot: the loaded kernel module is older than the "
                   "user-space driver",
                   "reboot the host, or run playbooks/nvidia_driver.yml with "
                   "-e nvidia_driver_reboot_ok=true"),
        "toolkit": ("cuda", "no working nvcc at /usr/local/cuda/bin/nvcc",
                    "the CUDA toolkit (nvcc) is missing or broken at the configured path",
                    "run playbooks/site.yml --tags cuda_toolchain, or set cuda_toolchain_home to the "
                    "toolkit"),
        "torch": ("torch", "torch 2.14.1 (cuda) in stable-abc: no code for 12.0",
                  "the stack's torch cannot run on this GPU (no stack in use, a CPU build, or no code for "
                  "the capability)",
                  "use a profile whose torch covers the capability (profiles/*.yml) and run "
                  "playbooks/site.yml"),
        "kernel": ("kernel", "sm100 has no code for 12.0",
                   "the sgl_kernel variant the loader picks has no code for this GPU",
                   "rebuild the kernel for the capability (sgl_kernel_install: source), run "
                   "playbooks/site.yml"),
        "weights": ("weights", "model.safetensors: sha256 differs", ADDED[0].cause, ADDED[0].fix),
        "service": ("service", "http://127.0.0.1:30000/health did not answer: timed out",
                    "the model server is down, still loading, or hung after loading",
                    "read journalctl -u 'sglang-*' on the host; a hang after loading on a multi-GPU PCIe "
                    "host is usually peer-to-peer (see topology); then run the sglang_service restart "
                    "(readiness gate)"),
        "speculative acceptance": ("speculative", "accept length 1.2 < 2.0", SPECULATIVE.cause,
                                   SPECULATIVE.fix),
        "gateway": ("gateway", "http://127.0.0.1:8000/health answered 503",
                    "the gateway (smg) does not answer or routes to no healthy worker",
                    "read journalctl -u smg on the gateway host and run playbooks/site.yml on the "
                    "sglang_gateway group"),
        "lock": ("drift", "six is 1.16.0, the lock has 1.17.0",
                 "the host no longer matches the lock (changed by hand or by another run)",
                 "make it match: playbooks/reproduce.yml -e reproduce_lock=<the lock>"),
    }
    for host in report["hosts"]:
        stage = next(s for s in STAGE_ORDER if host["host"].endswith("-" + s.split()[0]))
        check, detail, cause, fix = expected[stage]
        assert host["fix_first"] == (f"{host['host']}: fix the {stage} stage first. {check}: {detail}. "
                                     f"Likely cause: {cause}. Fix: {fix}.")
        [failed] = [c for c in host["checks"] if c["status"] == "fail"]
        assert failed == {"check": check, "status": "fail", "detail": detail, "stage": stage, "cause": cause,
                          "fix": fix}
    lines = render_table(report).splitlines()
    assert lines[:9] == [f"FIX FIRST {h['fix_first']}" for h in report["hosts"]]
    assert lines[9] == ""


def test_p2p_broken_by_acs_is_fixed_before_the_service_it_hangs(doctor):
    gpu = dict(GPU, topology=topology_from(*matrices("rtx-pro-6000-x8-acs")))
    checks = host_checks(gpu, STACK, **dict(GOOD, service=FAULTS["service"]["service"]))
    host = summarize({"gpu-1": checks})["hosts"][0]
    assert host["fix_first"].startswith("gpu-1: fix the driver stage first. topology: 22 of 28 GPU pairs "
                                        "cannot use peer-to-peer over PCIe: GPU0-GPU4 NS (SYS)")
    assert "Likely cause: PCIe ACS on the switches or root ports, or the IOMMU in translated mode" in \
        host["fix_first"]
    assert "iommu=pt" in host["fix_first"]
    assert "NCCL_P2P_DISABLE=1" in host["fix_first"]
    markdown = render_markdown(summarize({"gpu-1": checks}))
    assert "2. **service** (service stage, fail, after the topology failure above: re-check once that is " \
           "fixed): the model server is down" in markdown
    assert "1. **topology** (driver stage, fail): PCIe ACS on the switches" in markdown


def test_a_check_may_bring_its_own_cause_and_fix():
    report = summarize({"h": [{"check": "torch", "status": "fail", "detail": "d", "cause": "own cause.",
                               "fix": "own fix"},
                              {"check": "kernel", "status": "warn", "detail": "w", "fix": "kernel fix"}]})
    torch, kernel = report["hosts"][0]["checks"]
    assert (torch["cause"], torch["fix"]) == ("own cause.", "own fix")
    assert (kernel["cause"], kernel["fix"]) == (
        "the sgl_kernel variant the loader picks has no code for this GPU", "kernel fix")
    assert report["hosts"][0]["fix_first"] == ("h: fix the torch stage first. torch: d. Likely cause: own "
                                               "cause. Fix: own fix.")


def test_ok_and_skipped_checks_carry_no_cause():
    report = summarize({"h": [{"check": "gpu", "status": "ok", "detail": "x"},
                              {"check": "drift", "status": "skip", "detail": "y", "cause": "c"}]})
    assert [sorted(c) for c in report["hosts"][0]["checks"]] == [["check", "detail", "stage", "status"]] * 2


def test_an_unknown_check_comes_after_every_stage():
    report = summarize({"h": [{"check": "zz", "status": "fail", "detail": "odd"},
                              {"check": "drift", "status": "fail", "detail": "lock"}]})
    drift, unknown = report["hosts"][0]["checks"]
    assert (drift["check"], unknown["check"]) == ("drift", "zz")
    assert unknown == {"check": "zz", "status": "fail", "detail": "odd", "stage": "other",
                       "cause": "not in the doctor's table", "fix": "read the detail"}


def test_a_warning_is_never_what_to_fix_first():
    checks = [{"check": "environment", "status": "warn", "detail": "w"},
              {"check": "service", "status": "fail", "detail": "down"}]
    report = summarize({"h": checks})
    assert report["hosts"][0]["fix_first"].startswith("h: fix the service stage first. service: down. ")
    assert fix_first("h", report["hosts"][0]["checks"][:1]) is None
    lines = render_markdown(report).splitlines()
    assert lines[lines.index("Causes and fixes, in the order the chain breaks:") + 2:][:2] == [
        "1. **environment** (kernel stage, warn): a library of the stack has no code for this GPU; it fails "
        "only if the served model loads it. Fix: add its path to verify_env_scan_ignore when the model never "
        "loads it, else install a build of it for this capability.",
        "2. **service** (service stage, fail): the model server is down, still loading, or hung after "
        "loading. Fix: read journalctl -u 'sglang-*' on the host; a hang after loading on a multi-GPU PCIe "
        "host is usually peer-to-peer (see topology); then run the sglang_service restart (readiness gate).",
    ]


def test_a_later_failure_names_the_first_one_and_a_warning_after_it_does_not():
    checks = [{"check": "cuda", "status": "fail", "detail": "a"},
              {"check": "kernel", "status": "fail", "detail": "b"},
              {"check": "environment", "status": "warn", "detail": "c"},
              {"check": "service", "status": "fail", "detail": "d"}]
    lines = [line for line in render_markdown(summarize({"h": checks})).splitlines() if line[:2] in
             ("1.", "2.", "3.", "4.")]
    assert [line.split(":")[0] for line in lines] == [
        "1. **cuda** (toolkit stage, fail)",
        "2. **kernel** (kernel stage, fail, after the cuda failure above",
        "3. **environment** (kernel stage, warn)",
        "4. **service** (service stage, fail, after the cuda failure above"]


def test_the_fix_first_line_is_one_line_with_one_full_stop_per_sentence():
    report = summarize({"h": [{"check": "drift", "status": "fail", "detail": "a\n  b.\n", "cause": "c.",
                               "fix": "f.\n"}]})
    assert report["hosts"][0]["fix_first"] == ("h: fix the lock stage first. drift: a b. Likely cause: c. "
                                               "Fix: f.")
    markdown = render_markdown(report)
    assert "**Fix first:** h: fix the lock stage first. drift: a b. Likely cause: c. Fix: f." in markdown
    assert "1. **drift** (lock stage, fail): c. Fix: f." in markdown


def test_a_healthy_report_starts_with_the_table():
    report = summarize({"h": [{"check": "gpu", "status": "ok", "detail": "x"}]})
    assert render_table(report).splitlines()[0].startswith("host  stage ")
    markdown = render_markdown(report)
    assert "Fix first" not in markdown
    assert "Causes and fixes" not in markdown


def test_an_installed_nvidia_smi_that_sees_no_gpu_fails_the_driver_stage():
    smi = "/usr/bin/nvidia-smi"
    stuck = {"present": False, "nvidia_smi": smi,
             "reason": "the NVIDIA driver is not loaded: NVIDIA-SMI has failed"}
    found = {c["check"]: c for c in host_checks(stuck, STACK)}
    assert found["gpu"] == {"check": "gpu", "status": "fail", "detail": (
        f"{smi} sees no usable GPU: the NVIDIA driver is not loaded: NVIDIA-SMI has failed")}
    assert found["driver"] == {"check": "driver", "status": "skip", "detail": "no driver to check"}
    assert found["topology"]["status"] == "skip"
    mismatch = dict(stuck, reason="Driver/library version mismatch", reload_required=True,
                    reload_reason="reboot or reload the nvidia modules")
    found = {c["check"]: c for c in host_checks(mismatch, STACK)}
    driver = next(d for d in DOCTOR if d.check == "driver")
    assert found["gpu"] == {"check": "gpu", "status": "fail", "cause": driver.cause, "fix": driver.fix,
                            "detail": f"{smi} sees no usable GPU: Driver/library version mismatch"}
    assert found["driver"] == {"check": "driver", "status": "fail",
                               "detail": "reboot or reload the nvidia modules"}
    host = summarize({"h": host_checks(mismatch, STACK)})["hosts"][0]
    assert host["fix_first"] == (
        f"h: fix the driver stage first. gpu: {smi} sees no usable GPU: Driver/library version mismatch. "
        "Likely cause: the driver was upgraded without a reboot: the loaded kernel module is older than the "
        "user-space driver. Fix: reboot the host, or run playbooks/nvidia_driver.yml with "
        "-e nvidia_driver_reboot_ok=true.")


def test_the_causes_host_checks_know_better_than_the_table():
    def torch_check(stack=STACK, torch=GOOD["torch"]):
        return next(c for c in host_checks(GPU, stack, torch=torch) if c["check"] == "torch")

    no_stack = {"facts": {"stack": {"root": "/r", "name": None}, "cuda": {}}}
    assert torch_check(stack=no_stack) == {
        "check": "torch", "status": "fail", "detail": "no stack in use: /r/current does not exist",
        "cause": "playbooks/site.yml never activated a stack on this host, or its current link was removed"}
    assert torch_check(torch={"failed": True, "msg": "import torch failed"}) == {
        "check": "torch", "status": "fail", "detail": "import torch failed",
        "cause": "torch cannot be imported from the stack (a broken or partial install)"}
    assert torch_check(torch={**GOOD["torch"], "build": "cpu"}) == {
        "check": "torch", "status": "fail", "detail": "torch 2.14.1 (cpu) in stable-abc: covers 12.0",
        "cause": ("the stack's torch is a cpu build, not a CUDA one (the wrong index or CUDA tag in the "
                  "profile)")}
    assert torch_check() == {"check": "torch", "status": "ok",
                             "detail": "torch 2.14.1 (cuda) in stable-abc: covers 12.0"}


def test_host_checks_passes_p2p_required_on():
    gpu = dict(GPU, topology=topology_from(*matrices("rtx-pro-6000-x8-acs")))
    statuses = [next(c["status"] for c in host_checks(gpu, STACK, **kwargs) if c["check"] == "topology")
                for kwargs in ({}, {"p2p_required": True}, {"p2p_required": False})]
    assert statuses == ["fail", "fail", "warn"]


def test_a_detail_keeps_its_last_letters():
    report = summarize({"h": [{"check": "drift", "status": "fail", "detail": "ends in X.", "cause": "c X",
                               "fix": "f X."}]})
    assert report["hosts"][0]["fix_first"] == ("h: fix the lock stage first. drift: ends in X. Likely cause: "
                                               "c X. Fix: f X.")


def test_the_host_section_of_the_markdown():
    report = summarize({"h": [{"check": "cuda", "status": "fail", "detail": "no nvcc", "fix": "install it"}]})
    lines = render_markdown(report).splitlines()
    start = lines.index("## h: FAIL")
    assert lines[start:start + 8] == [
        "## h: FAIL", "",
        "**Fix first:** h: fix the toolkit stage first. cuda: no nvcc. Likely cause: the CUDA toolkit (nvcc) "
        "is missing or broken at the configured path. Fix: install it.", "",
        "| stage | check | status | detail |", "|---|---|---|---|", "| toolkit | cuda | fail | no nvcc |", ""]
