"""The verify report: summary, ordering, rendering (module_utils/verify_report)."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.verify_report import (
    ReportError,
    health_check,
    host_checks,
    render_json,
    render_markdown,
    render_table,
    summarize,
)

HOSTS = {
    "gpu-2": [{"check": "drift", "status": "fail", "detail": "six is 1.16.0, the lock has 1.17.0"},
              {"check": "gpu", "status": "skip", "detail": "no GPU"}],
    "gpu-1": [{"check": "zeta", "status": "ok", "detail": ""},
              {"check": "torch", "status": "ok", "detail": "2.14.1 covers 12.0"},
              {"check": "gpu", "status": "ok", "detail": "1 x RTX PRO 6000 | 12.0"}],
}


def test_summary_orders_hosts_and_checks_and_counts():
    report = summarize(HOSTS)
    assert [h["host"] for h in report["hosts"]] == ["gpu-1", "gpu-2"]
    assert [c["check"] for c in report["hosts"][0]["checks"]] == ["gpu", "torch", "zeta"]
    assert [h["status"] for h in report["hosts"]] == ["ok", "fail"]
    assert report["status"] == "fail"
    assert report["counts"] == {"hosts": 2, "passed": 1, "failed": 1}
    assert summarize({"a": [{"check": "gpu", "status": "skip"}]})["status"] == "ok"
    assert summarize({"a": [{"check": "environment", "status": "warn"}]})["status"] == "ok"


@pytest.mark.parametrize("check", [{"check": "gpu", "status": "bad"}, {"status": "ok"}, "text"])
def test_malformed_checks_are_refused(check):
    with pytest.raises(ReportError, match="host h: malformed check"):
        summarize({"h": [check]})


def test_renderings():
    report = summarize(HOSTS)
    table = render_table(report, detail_width=20)
    assert table.splitlines()[0].startswith("FIX FIRST gpu-2: fix the lock stage first. drift: six is 1.16.0")
    assert table.splitlines()[2].split() == ["host", "stage", "check", "status", "detail"]
    assert "gpu-2  lock    drift  FAIL    six is 1.16.0, the…" in table
    assert table.endswith("1 of 2 hosts passed, 1 failed")
    markdown = render_markdown(report, generated="20261201T000000Z")
    assert "## gpu-2: FAIL" in markdown
    assert "Generated 20261201T000000Z." in markdown
    assert "| driver | gpu | ok | 1 x RTX PRO 6000 / 12.0 |" in markdown  # a pipe cannot break the table
    assert json.loads(render_json(report, generated="x"))["generated"] == "x"


GPU = {"present": True, "gpus": [{"name": "NVIDIA RTX PRO 6000"}], "capabilities": ["12.0"],
       "driver_version": "580.95.05", "cuda_driver_version": "13.0", "reload_required": False}
STACK = {"facts": {"stack": {"root": "/opt/sglang/stacks", "name": "stable-abc", "path": "/x"},
                   "cuda": {"toolkit_version": "13.0", "nvcc_version": "13.0.88",
                            "nvcc": "/usr/local/cuda/bin/nvcc"}}}
SKIPPED = {"skipped": True}


def checks_of(**results):
    expected = {"stack_expected": results.pop("stack_expected")} if "stack_expected" in results else {}
    return {c["check"]: (c["status"], c["detail"]) for c in host_checks(
        results.pop("gpu", GPU), results.pop("stack", STACK), scan_ignore=["flash_ops"], **expected,
        **{k: results.get(k, SKIPPED) for k in ("torch", "kernel", "scan", "service", "gateway", "drift")})}


NO_STACK = {"facts": {"stack": {"root": "/r", "name": None}, "cuda": {"nvcc": ""}}}


def test_a_gateway_only_host_without_a_stack_skips_cuda_and_torch():
    """site.yml gives a gateway-only host no CUDA stack: no toolkit and no stack are skips there, in order."""
    checks = checks_of(stack=NO_STACK, stack_expected=False)
    skipped = ("skip", "a gateway-only host: site.yml gives it no CUDA stack")
    assert checks["cuda"] == checks["torch"] == skipped
    assert list(checks)[list(checks).index("topology") + 1:][:3] == ["cuda", "torch", "kernel"]
    assert checks["kernel"] == ("skip", "no stack in use")
    # the default expects a stack: the same host fails both
    failed = checks_of(stack=NO_STACK)
    assert failed["cuda"] == (
        "fail", "no CUDA toolkit where the host's cuda_toolchain settings look (no nvcc found)")
    assert failed["torch"] == ("fail", "no stack in use: /r/current does not exist")


def test_a_gateway_only_host_with_a_stack_left_is_checked_as_any_host():
    checks = checks_of(stack_expected=False,
                       torch={"torch_version": "2.14.1", "build": "cuda", "missing": [], "require": ["12.0"]})
    assert checks["cuda"] == ("ok", "nvcc 13.0.88 (CUDA 13.0) at /usr/local/cuda/bin/nvcc")
    assert checks["torch"] == ("ok", "torch 2.14.1 (cuda) in stable-abc: covers 12.0")


def test_host_checks_all_good():
    checks = checks_of(
        torch={"torch_version": "2.14.1", "build": "cuda", "missing": [], "require": ["12.0"]},
        kernel={"variants": {}, "selected_covers": True, "selected_variant": "sm100",
                "capability": "12.0", "package_version": "0.4.10"},
        scan={"missing": {"12.0": ["/x/lib/sgl_kernel/flash_ops.abi3.so"]},
              "counts": {"with_device_code": 7}},
        service={"status": 200, "url": "http://127.0.0.1:30000/health"},
        drift={"drift": []})
    assert {name: status for name, (status, _) in checks.items()} == {
        "gpu": "ok", "driver": "ok", "topology": "warn", "cuda": "ok", "torch": "ok", "kernel": "ok",
        "environment": "ok",
        "service": "ok", "gateway": "skip", "drift": "ok"}
    assert checks["environment"][1] == "all 7 CUDA binaries run here"  # flash_ops is ignored
    assert checks["kernel"][1] == "0.4.10: loader picks sm100 (covers 12.0)"


def test_host_checks_failures_are_named():
    checks = checks_of(
        gpu={**GPU, "reload_required": True, "reload_reason": "loaded 570, installed 580"},
        stack={"facts": {"stack": {"root": "/r", "name": None}, "cuda": {"nvcc": "/n"}}},
        torch={"torch_version": "2.13.0", "build": "cpu", "missing": ["12.0"], "require": ["12.0"]},
        kernel={"variants": {}, "selected_covers": False, "message": "sm100 has no code for 12.0"},
        scan={"missing": {"12.0": ["/x/a.so", "/x/b.so"]}, "counts": {"with_device_code": 2}},
        service={"status": -1, "url": "http://127.0.0.1:30000/health", "msg": "refused"},
        drift={"drift": [{"message": "six is 1.16.0, the lock has 1.17.0"}]})
    assert checks["driver"] == ("fail", "loaded 570, installed 580")
    assert checks["cuda"] == ("fail", "no working nvcc at /n")
    assert checks["torch"] == ("fail", "no stack in use: /r/current does not exist")
    assert checks["kernel"] == ("fail", "sm100 has no code for 12.0")
    assert checks["environment"] == ("warn", "2 of 2 CUDA binaries cannot run here: /x/a.so, /x/b.so")
    assert checks["service"] == ("fail", "http://127.0.0.1:30000/health did not answer: refused")
    assert checks["drift"] == ("fail", "six is 1.16.0, the lock has 1.17.0")


def test_host_checks_without_gpu_or_results():
    checks = checks_of(gpu={"present": False, "reason": "nvidia-smi not found"},
                       torch={"failed": True, "msg": "import torch failed"},
                       service={"url": "http://h:1/health", "msg": "Connection refused"})
    assert checks["gpu"][0] == checks["driver"][0] == "skip"
    assert checks["torch"] == ("fail", "import torch failed")
    assert checks["service"] == ("fail", "http://h:1/health did not answer: Connection refused")
    assert checks["drift"] == ("skip", "no lock given (-e verify_lock_file=locks/NAME.lock.yml)")


def test_no_toolkit_found_names_no_path():
    gpu, stack = {"present": False, "reason": "none"}, {"facts": {"cuda": {"nvcc": ""}}}
    [cuda] = [c for c in host_checks(gpu, stack) if c["check"] == "cuda"]
    assert (cuda["status"], cuda["detail"]) == (
        "fail", "no CUDA toolkit where the host's cuda_toolchain settings look (no nvcc found)")


PROBE_OK = {"name": "sglang-a", "url": "http://127.0.0.1:30000/health", "status": 200, "msg": "OK"}
PROBE_DOWN = {"name": "sglang-b", "url": "http://127.0.0.1:30001/health", "status": -1,
              "msg": "Status code was -1 and not [200]: Request failed: <urlopen error [Errno 111] refused>"}


@pytest.mark.parametrize(("results", "expected"), [
    ([], ("skip", "no service on this host")),
    ({"skipped": True}, ("skip", "no service on this host")),
    ([{"skipped": True}], ("skip", "no service on this host")),
    ([PROBE_OK], ("ok", "sglang-a: http://127.0.0.1:30000/health answered 200")),
    # the failing model first, whatever the order of the inventory
    ([PROBE_OK, PROBE_DOWN], ("fail", f"sglang-b: http://127.0.0.1:30001/health did not answer: "
                                      f"{PROBE_DOWN['msg']}; "
                                      "sglang-a: http://127.0.0.1:30000/health answered 200")),
    ([dict(PROBE_OK, status=503)], ("fail", "sglang-a: http://127.0.0.1:30000/health answered 503")),
    # one uri result, without a name (-e verify_service_url)
    ({"url": "http://h:1/health", "status": 200}, ("ok", "http://h:1/health answered 200")),
])
def test_health_check_of_each_model_of_the_host(results, expected):
    assert health_check("service", results) == expected


def test_host_checks_take_the_probe_lists_for_service_and_gateway():
    checks = checks_of(gpu={"present": False, "reason": "none"}, service=[PROBE_OK, PROBE_OK],
                       gateway=[{"name": "smg", "url": "http://127.0.0.1:8000/health", "status": 200}])
    assert checks["service"] == ("ok", "sglang-a: http://127.0.0.1:30000/health answered 200; "
                                       "sglang-a: http://127.0.0.1:30000/health answered 200")
    assert checks["gateway"] == ("ok", "smg: http://127.0.0.1:8000/health answered 200")
