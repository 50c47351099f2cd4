"""module_utils/torch_probe.py: arch-list coverage and the messages built from probe facts.

The probe itself runs against real torch installs in tests/integration/test_torch_cuda_archs.py.
"""

import json

import pytest
from ansible.module_utils import torch_probe
from ansible.module_utils.torch_probe import (
    check_requirements,
    missing_capabilities,
    rate,
    split_arch_list,
)

TORCH_2_14_1 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]


def facts(build="cuda", arch_list=(), version="2.14.1+cu130", cuda="13.0", hip=None):
    return {"torch_version": version, "python": "/venv/bin/python", "build": build,
            "cuda_version": cuda, "hip_version": hip, "arch_list": list(arch_list)}


def test_split_arch_list():
    assert split_arch_list(["sm_90", "sm_90a", "compute_90", "gfx942", "sm_120f"]) == (
        ["sm_90", "sm_90a", "sm_120f"], ["compute_90"])


@pytest.mark.parametrize(("arch_list", "require", "missing"), [
    # plain SASS: same major, equal or newer minor
    (TORCH_2_14_1, ["7.5", "8.0", "8.6", "8.9", "9.0", "10.0", "10.3", "12.0", "12.1"], []),
    (TORCH_2_14_1, ["11.0", "7.0"], ["11.0", "7.0"]),
    # arch-specific SASS only on exactly that capability
    (["sm_90a", "sm_120a"], ["9.0", "12.0", "12.1"], ["12.1"]),
    # family SASS on the family
    (["sm_120f"], ["12.0", "12.1", "10.0"], ["10.0"]),
    # PTX JIT for anything newer
    (["sm_80", "compute_90"], ["8.6", "9.0", "12.1", "7.5"], ["7.5"]),
    ([], ["9.0"], ["9.0"]),
])
def test_missing_capabilities(arch_list, require, missing):
    assert missing_capabilities(arch_list, require) == missing


def test_cpu_build_message_names_a_cuda_index():
    message = check_requirements(rate(facts("cpu", version="2.13.0+cpu", cuda=None), ["12.0"]),
                                 "https://mirror.example/whl/cu130")
    assert message == (
        "torch 2.13.0+cpu in /venv/bin/python is a CPU build (torch.version.cuda is None): it cannot run "
        "on GPUs of capability 12.0. Install a CUDA build from https://mirror.example/whl/cu130, e.g. "
        "`pip install --index-url https://mirror.example/whl/cu130 torch==2.13.0`")


def test_rocm_build_message():
    message = check_requirements(rate(facts("rocm", ["gfx942"], "2.9.0+rocm6.4", None, "6.4"), ["9.0"]))
    assert "is a ROCm build (HIP 6.4)" in message
    assert "the PyTorch CUDA wheel index serves them (its whl/cu130 channel" in message
    assert "torch==2.9.0 from PyPI is a CUDA build too" in message


def test_missing_message_lists_arch_list():
    message = check_requirements(rate(facts("cuda", TORCH_2_14_1), ["12.0", "11.0"]))
    assert message.startswith("torch 2.14.1+cu130 in /venv/bin/python (CUDA 13.0) has no code for "
                              "capability 11.0: its arch list is sm_75 sm_80 sm_86 sm_90 sm_100 sm_120.")


def test_rate_marks_what_is_missing_and_which_devices_are_covered():
    rated = rate({**facts("cuda", TORCH_2_14_1), "devices": [
        {"index": 0, "capability": "12.1"}, {"index": 1, "capability": "11.0"}]}, ["12.0", "11.0"])
    assert rated["require"] == ["12.0", "11.0"]
    assert rated["missing"] == ["11.0"]
    assert [d["covered"] for d in rated["devices"]] == [True, False]
    assert rate(facts("cpu", cuda=None), ["9.0"])["missing"] == ["9.0"]


def test_nothing_required_or_all_covered():
    assert check_requirements(rate(facts("cpu", cuda=None), [])) is None
    assert check_requirements(rate(facts("cuda", TORCH_2_14_1), ["12.0", "9.0"])) is None


@pytest.mark.parametrize(("call", "timeout"), [
    (lambda: torch_probe.probe_torch("/venv/bin/python"), 120),
    (lambda: torch_probe.inspect_torch("/venv/bin/python"), 120),
    (lambda: torch_probe.inspect_torch("/venv/bin/python", timeout=7), 7),
], ids=["probe_torch", "inspect_torch", "inspect_torch-timeout"])
def test_a_hung_probe_is_given_up_after_two_minutes_unless_told(monkeypatch, call, timeout):
    # The child interpreter is replaced: what is observed is how long the probe runner may wait.
    waits = []

    def fake_run_probe(python, script, timeout, what):
        waits.append(timeout)
        return {"torch_version": "2.14.1", "cuda_version": None, "hip_version": None,
                "executable": python, "arch_list": [], "devices": []}

    monkeypatch.setattr(torch_probe, "run_probe", fake_run_probe)
    assert call()["python"] == "/venv/bin/python"
    assert waits == [timeout]


def test_an_earlier_answer_is_rated_as_a_fresh_probe_would_be_and_is_left_as_it_was():
    answer = {**facts("cuda", TORCH_2_14_1), "devices": [{"index": 0, "capability": "12.1"},
                                                          {"index": 1, "capability": "11.0"}]}
    before = json.loads(json.dumps(answer))
    rated = torch_probe.rate_answer(answer, ["12.0", "11.0"])
    assert rated == rate(json.loads(json.dumps(answer)), ["12.0", "11.0"])
    assert rated["missing"] == ["11.0"]
    assert [d["covered"] for d in rated["devices"]] == [True, False]
    assert answer == before  # the caller's answer (a registered result) gains no require/missing/covered
    assert torch_probe.rate_answer(answer)["require"] == []
    cpu = torch_probe.rate_answer({**facts("cpu", cuda=None), "devices": []}, ["9.0"])
    assert cpu["missing"] == ["9.0"]
    assert check_requirements(cpu).startswith("torch 2.14.1+cu130 in /venv/bin/python is a CPU build")
    rocm = torch_probe.rate_answer({**facts("rocm", ["gfx942"], "2.9.0+rocm6.4", None, "6.4"), "devices": []},
                                   ["9.0"])
    assert "is a ROCm build (HIP 6.4)" in check_requirements(rocm)


@pytest.mark.parametrize(("answer", "message"), [
    (None, r"^probe must be an answer of the torch probe \(a mapping\), got NoneType: pass the torch_probe "
           r"that stack_facts returns, or python to probe the interpreter$"),
    (["sm_90"], r"got list: "),
    ({**facts(), "devices": []} | {"python": None},
     r"^probe is not an answer of the torch probe: its python is None, not a str; pass the torch_probe "
     r"that stack_facts returns, or python to probe the interpreter$"),
    ({key: value for key, value in facts().items() if key != "torch_version"} | {"devices": []},
     r"its torch_version is None, not a str;"),
    ({**facts(), "devices": []} | {"build": 3}, r"its build is 3, not a str;"),
    ({**facts(), "devices": []} | {"arch_list": "sm_90 sm_120"},
     r"its arch_list is 'sm_90 sm_120', not a list;"),
    (facts(), r"its devices is None, not a list;"),
    ({**facts(), "devices": []} | {"build": "xpu"},
     r"^probe is not an answer of the torch probe: its build is 'xpu', not cuda, cpu or rocm$"),
    ({**facts(), "devices": ["cuda:0"]},
     r"^probe is not an answer of the torch probe: device 'cuda:0' has no capability string$"),
    ({**facts(), "devices": [{"index": 0, "capability": 9.0}]},
     r"device \{'index': 0, 'capability': 9.0\} has"),
], ids=["none", "list", "python", "no-version", "build-type", "arch-list-str", "no-devices", "build-xpu",
        "device-str", "device-float"])
def test_an_answer_that_is_not_the_probes_says_what_to_pass(answer, message):
    with pytest.raises(torch_probe.TorchProbeError, match=message):
        torch_probe.rate_answer(answer, ["9.0"])
