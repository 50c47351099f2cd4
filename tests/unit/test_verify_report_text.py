"""module_utils/verify_report, whole texts: the table, Markdown and JSON exactly as a person reads them,
and every branch of a host's checks with the sentence it writes."""

from __future__ import annotations

import pytest
from ansible.module_utils.verify_report import (
    ReportError,
    host_checks,
    render_json,
    render_markdown,
    render_table,
    summarize,
)

HOSTS = {"b": [{"check": "drift", "status": "fail", "detail": "x | y\nz"}],
         "a": [{"check": "torch", "status": "warn", "detail": "abcdefghij  klm"},
               {"check": "gpu", "status": "ok", "detail": None}]}


def test_summary_keeps_the_three_fields_adds_the_stage_and_makes_details_text():
    report = summarize({"a": [{"check": "gpu", "status": "ok", "detail": 3, "extra": 1, "cause": "c",
                               "fix": "f"}], "b": None})
    assert report == {"hosts": [{"host": "a", "status": "ok", "fix_first": None,
                                 "checks": [{"check": "gpu", "status": "ok", "detail": "3",
                                             "stage": "driver"}]},
                                {"host": "b", "status": "ok", "checks": [], "fix_first": None}],
                      "status": "ok", "counts": {"hosts": 2, "passed": 2, "failed": 0}, "fix_first": []}


def test_unknown_checks_follow_the_known_ones_sorted():
    checks = [{"check": name, "status": "ok"} for name in ("zz", "drift", "aa", "gpu", "kernel")]
    report = summarize({"h": checks})
    assert [c["check"] for c in report["hosts"][0]["checks"]] == ["gpu", "kernel", "drift", "aa", "zz"]


@pytest.mark.parametrize("check", [{"check": "", "status": "ok"}, {"check": "gpu"}, None])
def test_malformed_check_message(check):
    with pytest.raises(ReportError) as caught:
        summarize({"h": [check]})
    assert str(caught.value) == (f"host h: malformed check {check!r}; each needs check, status "
                                 "(ok/warn/fail/skip) and detail")


def test_table():
    assert render_table(summarize(HOSTS), detail_width=12).splitlines() == [
        "FIX FIRST b: fix the lock stage first. drift: x | y z. Likely cause: the host no longer matches the "
        "lock (changed by hand or by another run). Fix: make it match: playbooks/reproduce.yml "
        "-e reproduce_lock=<the lock>.",
        "",
        "host  stage   check  status  detail",
        "-----------------------------------------",
        "a     driver  gpu    OK      ",
        "a     torch   torch  WARN    abcdefghij…",
        "b     lock    drift  FAIL    x | y z",
        "1 of 2 hosts passed, 1 failed",
    ]


def test_table_widths_follow_the_longest_cell_and_the_rule_stops_at_40():
    report = summarize({"gpu-node-01": [{"check": "environment", "status": "skip", "detail": "d" * 12}]})
    lines = render_table(report).splitlines()
    assert lines[0] == "host         stage   check        status  detail"
    assert lines[1] == "-" * (11 + 6 + 11 + 6 + 8 + 40)
    assert lines[2] == "gpu-node-01  kernel  environment  SKIP    " + "d" * 12
    assert lines[3] == "1 of 1 hosts passed"


def test_the_detail_column_is_90_wide_by_default():
    report = summarize({"h": [{"check": "gpu", "status": "ok", "detail": "d" * 91}]})
    assert render_table(report).splitlines()[2] == "h     driver  gpu    OK      " + "d" * 89 + "…"


def test_a_detail_as_long_as_the_column_is_kept_whole():
    report = summarize({"h": [{"check": "gpu", "status": "ok", "detail": "0123456789"}]})
    assert render_table(report, detail_width=10).splitlines()[2].endswith("  0123456789")
    assert render_table(report, detail_width=9).splitlines()[2].endswith("  01234567…")


def test_markdown():
    assert render_markdown(summarize({"a": HOSTS["a"]})) == "\n".join([
        "# Fleet verify report", "",
        "**1 of 1 hosts passed.**", "",
        "## a: OK", "",
        "| stage | check | status | detail |",
        "|---|---|---|---|",
        "| driver | gpu | ok |  |",
        "| torch | torch | warn | abcdefghij  klm |",
        "",
        "Causes and fixes, in the order the chain breaks:", "",
        "1. **torch** (torch stage, warn): the stack's torch cannot run on this GPU (no stack in use, a CPU "
        "build, or no code for the capability). Fix: use a profile whose torch covers the capability "
        "(profiles/*.yml) and run playbooks/site.yml.",
        "",
    ])


def test_markdown_with_a_title_and_a_time():
    text = render_markdown(summarize({"b": [{"check": "gpu", "status": "fail", "detail": "a|b"}]}),
                           title="Nightly", generated="20261201T000000Z")
    fix = ("b: fix the driver stage first. gpu: a|b. Likely cause: nvidia-smi cannot see the GPUs: the "
           "driver is not installed or not loaded. Fix: run playbooks/nvidia_driver.yml on the host "
           "(nvidia_driver_reboot_ok: true lets it reboot).")
    assert text.splitlines()[:8] == ["# Nightly", "", f"- **Fix first** {fix.replace('|', '/')}", "",
                                     "Generated 20261201T000000Z.", "", "**0 of 1 hosts passed.**", ""]
    assert "## b: FAIL" in text
    assert f"**Fix first:** {fix.replace('|', '/')}" in text
    assert "| driver | gpu | fail | a/b |" in text


def test_json_is_indented_and_sorted_and_says_when_only_if_told():
    report = summarize({"a": []})
    assert render_json(report) == ('{\n "counts": {\n  "failed": 0,\n  "hosts": 1,\n  "passed": 1\n },\n'
                                   ' "fix_first": [],\n'
                                   ' "hosts": [\n  {\n   "checks": [],\n   "fix_first": null,\n'
                                   '   "host": "a",\n   "status": "ok"\n  }\n ],\n "status": "ok"\n}')
    assert render_json(report, generated="t").startswith('{\n "counts": {')
    assert '\n "generated": "t",\n' in render_json(report, generated="t")
    assert "generated" not in report


GPU = {"present": True, "gpus": [{"name": "NVIDIA L40S"}, {"name": "NVIDIA A100"}, {"name": "NVIDIA L40S"}],
       "capabilities": ["8.0", "8.9"], "driver_version": "580.95.05", "cuda_driver_version": "13.0"}
STACK = {"facts": {"stack": {"root": "/opt/sglang/stacks", "name": "s1"},
                   "cuda": {"toolkit_version": "13.0", "nvcc_version": "13.0.88", "nvcc": "/c/bin/nvcc"}}}
SKIPPED = {"skipped": True}


def checks(gpu=GPU, stack=STACK, **results):
    return {c["check"]: (c["status"], c["detail"])
            for c in host_checks(gpu, stack, **{k: results.get(k, SKIPPED) for k in
                                                ("torch", "kernel", "scan", "service", "gateway", "drift")},
                                 scan_ignore=results.get("scan_ignore", ()))}


def test_gpu_and_driver_sentences():
    found = checks()
    assert found["gpu"] == ("ok", "3 x NVIDIA A100, NVIDIA L40S, capability 8.0, 8.9")
    assert found["driver"] == ("ok", "580.95.05 (CUDA 13.0)")
    assert found["cuda"] == ("ok", "nvcc 13.0.88 (CUDA 13.0) at /c/bin/nvcc")
    gone = checks(gpu={"present": False, "reason": "nvidia-smi not found"})
    assert gone["gpu"] == ("skip", "no usable GPU (nvidia-smi not found); checks use the stack's targets")
    assert gone["driver"] == ("skip", "no driver to check")


def test_a_present_gpu_without_capabilities():
    assert checks(gpu={"present": True, "gpus": [{"name": "X"}]})["gpu"] == ("ok", "1 x X, capability ")


def test_skipped_checks_say_why():
    found = checks()
    assert found["torch"] == ("skip", "torch was not checked")
    assert found["kernel"] == ("skip", "kernel not checked")
    assert found["environment"] == ("skip", "no stack or no capability to scan for")
    assert found["service"] == ("skip", "no service on this host")
    assert found["gateway"] == ("skip", "no gateway on this host")
    assert checks(torch={})["torch"] == ("skip", "torch was not checked")     # an empty result: not run
    no_stack = checks(stack={"facts": {"stack": {"root": "/r"}}})
    assert no_stack["kernel"] == ("skip", "no stack in use")
    assert no_stack["cuda"] == ("fail", "no CUDA toolkit where the host's cuda_toolchain settings look "
                                        "(no nvcc found)")


def test_torch_sentences():
    good = {"torch_version": "2.14.1", "build": "cuda", "missing": [], "require": ["8.0", "8.9"]}
    assert checks(torch=good)["torch"] == ("ok", "torch 2.14.1 (cuda) in s1: covers 8.0, 8.9")
    assert checks(torch={**good, "require": []})["torch"] == (
        "ok", "torch 2.14.1 (cuda) in s1: covers no capability asked")
    assert checks(torch={**good, "missing": ["8.9", "9.0"]})["torch"] == (
        "fail", "torch 2.14.1 (cuda) in s1: no code for 8.9, 9.0")
    assert checks(torch={**good, "build": "rocm"})["torch"][0] == "fail"
    # a failed torch check that still names torch reports what it found, not the bare message
    assert checks(torch={**good, "failed": True, "msg": "m", "missing": ["9.0"]})["torch"] == (
        "fail", "torch 2.14.1 (cuda) in s1: no code for 9.0")
    assert checks(torch={"failed": True, "msg": ""})["torch"] == ("fail", "torch None (None) in s1: covers "
                                                                          "no capability asked")


def test_kernel_sentences():
    found = checks(kernel={"variants": {}, "selected_covers": None, "selected_variant": "sm90",
                           "package_version": "0.4.1"})
    assert found["kernel"] == ("ok", "0.4.1: loader picks sm90 (no capability to rate it on)")
    assert checks(kernel={"selected_covers": False, "selected_path": "/k/sm90/common_ops.so"})["kernel"] == (
        "fail", "/k/sm90/common_ops.so has no code here")
    assert checks(kernel={"failed": True, "msg": "no sgl_kernel"})["kernel"] == ("fail", "no sgl_kernel")
    failed_but_rated = {"failed": True, "msg": "m", "variants": {"sm90": {}}, "selected_covers": True,
                        "capability": "9.0", "selected_variant": "sm90", "package_version": "1"}
    assert checks(kernel=failed_but_rated)["kernel"] == ("ok", "1: loader picks sm90 (covers 9.0)")


def test_environment_sentences():
    many = {"12.0": [f"/e/lib{i}.so" for i in range(7)], "9.0": ["/e/lib0.so", "/e/skip_me.so"]}
    found = checks(scan={"missing": many, "counts": {"with_device_code": 9}}, scan_ignore=["skip_me"])
    assert found["environment"] == ("warn", "7 of 9 CUDA binaries cannot run here: /e/lib0.so, /e/lib1.so, "
                                            "/e/lib2.so, /e/lib3.so, /e/lib4.so and 2 more")
    six = {"12.0": [f"/e/lib{i}.so" for i in range(6)]}
    assert checks(scan={"missing": six})["environment"] == (
        "warn", "6 of 0 CUDA binaries cannot run here: /e/lib0.so, /e/lib1.so, /e/lib2.so, /e/lib3.so, "
                "/e/lib4.so and 1 more")
    five = {"12.0": [f"/e/lib{i}.so" for i in range(5)]}
    assert checks(scan={"missing": five})["environment"] == (
        "warn", "5 of 0 CUDA binaries cannot run here: /e/lib0.so, /e/lib1.so, /e/lib2.so, /e/lib3.so, "
                "/e/lib4.so")
    assert checks(scan={"failed": True, "msg": "scan broke"})["environment"] == ("fail", "scan broke")
    assert checks(scan={"failed": True, "msg": "m", "missing": {}, "counts": {"with_device_code": 3}})[
        "environment"] == ("ok", "all 3 CUDA binaries run here")


def test_service_and_gateway_sentences():
    found = checks(service={"status": 503, "url": "http://h:1/health"},
                   gateway={"status": 200, "url": "http://h:2/health"})
    assert found["service"] == ("fail", "http://h:1/health answered 503")
    assert found["gateway"] == ("ok", "http://h:2/health answered 200")
    assert checks(gateway={"status": 0, "url": "u", "msg": "timed out"})["gateway"] == (
        "fail", "u did not answer: timed out")
    # any positive status is an answer (the uri module says -1 or 0 when nothing answered)
    assert checks(gateway={"status": 1, "url": "u", "msg": "m"})["gateway"] == ("fail", "u answered 1")
    assert checks(gateway={"status": -1, "url": "u", "msg": "m"})["gateway"] == (
        "fail", "u did not answer: m")


def test_drift_sentences():
    assert checks(drift={"drift": []})["drift"] == ("ok", "matches the lock")
    assert checks(drift={"drift": [{"message": "a"}, {"message": "b"}]})["drift"] == ("fail", "a; b")
    assert checks(drift={"failed": True, "msg": "no such lock"})["drift"] == ("fail", "no such lock")
    assert checks(drift={"failed": True, "msg": "m", "drift": [{"message": "c"}]})["drift"] == ("fail", "c")


def test_checks_come_in_the_report_order():
    names = [c["check"] for c in host_checks(GPU, STACK)]
    assert names == ["gpu", "driver", "topology", "cuda", "torch", "kernel", "environment", "service",
                     "gateway", "drift"]


def test_markdown_keeps_a_multi_line_detail_in_its_row():
    text = render_markdown(summarize({"b": [{"check": "env", "status": "warn",
                                             "detail": "2 binaries:\n  libx.so  sm_80\n  liby.so | sm_86"}]}))
    assert "| other | env | warn | 2 binaries: libx.so  sm_80 liby.so / sm_86 |" in text.splitlines()
