"""The speculative-acceptance gate, run for real on this machine: the role's `spec_gate` tasks and the
`sglang_spec_acceptance` module against STAND-IN SGLang servers (tests/stand_ins/sglang-server, each one's
command line parsed by the real sglang 0.5.23 parser first), one reporting a healthy acceptance, one a
draft that does not fit its target, one without speculative decoding.

Local, not on the test fleet: the gate only needs each model's port, and the stand-ins run here.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request

import pytest
from ansible_run import run_module, run_playbook
from documented import assert_documented
from processes import free_port
from sglang_parser import parser_python

pytestmark = pytest.mark.integration

EAGLE = {"algorithm": "EAGLE3", "draft_model_path": "/models/kimi-k2.5-eagle3", "num_steps": 3,
         "eagle_topk": 1, "num_draft_tokens": 4}
GATE = "Probe the speculative acceptance of each model that drafts"
FAIL = "Fail when a model's drafts are accepted too rarely"
PUBLISH = "Publish each model's speculative acceptance (sglang_service_spec_acceptance)"


def _args(port: int, speculative: bool) -> list[str]:
    args = ["--model-path", "/models/kimi-k2.5", "--host", "127.0.0.1", "--port", str(port)]
    if speculative:
        args += ["--speculative-algorithm", "EAGLE3",
                 "--speculative-draft-model-path", EAGLE["draft_model_path"], "--speculative-num-steps", "3",
                 "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    return args


def _ready(port: int, proc: subprocess.Popen, bound: float = 120) -> None:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else "stand-in exited"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"stand-in on {port} not ready within {bound} s")


@pytest.fixture(scope="module")
def servers():
    """{good, bad, plain}: port of a stand-in with acceptance 3.0, with 1.2, and one without speculation."""
    python = parser_python()
    plan = {"good": ("3.0", True), "bad": ("1.2", True), "plain": ("3.0", False)}
    procs, ports = [], {}
    try:
        for name, (accept, speculative) in plan.items():
            port = free_port()
            env = dict(os.environ, SGLANG_STAND_IN_SPEC_ACCEPT_LENGTH=accept, SGLANG_STAND_IN_DELAY="0")
            proc = subprocess.Popen([str(python), "-m", "sglang_server_stand_in", *_args(port, speculative)],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            procs.append(proc)
            ports[name] = port
        for proc, port in zip(procs, ports.values()):
            _ready(port, proc)
        yield ports
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _entry(name: str, port: int, speculative: bool) -> dict:
    entry = {"name": name, "model_path": "/models/kimi-k2.5", "port": port}
    if speculative:
        entry["speculative"] = EAGLE
    return entry


def _gate(models: list[dict], **variables):
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"sglang_service_models": models, "sglang_service_python": "/opt/x/bin/python",
                      "sglang_service_capabilities": ["12.0"], **variables},
             "tasks": [{"name": "spec gate", "ansible.builtin.include_role": {
                 "name": "sglang_service", "tasks_from": "spec_gate"}}]}]
    return run_playbook(play)


def _probed(result) -> dict:
    return {r["__sglang_service_gated"]["item"]["name"]: r for r in result.task("localhost", GATE)["results"]
            if not r.get("skipped")}


def test_good_acceptance_passes_and_a_model_without_drafts_is_not_probed(servers):
    result = _gate([_entry("good", servers["good"], True), _entry("plain", servers["plain"], False)])
    assert result.rc == 0, result.stdout[-3000:]
    probed = _probed(result)
    assert list(probed) == ["good"]
    good = probed["good"]
    assert good["status"] == "ok"
    # 8 prompts x 128 tokens in round(128 / 3.0) = 43 verify steps each
    assert good["accept_length"] == round(128 / 43, 4)
    assert good["requests"] == 8
    assert good["verify_steps"] == 8 * 43
    assert good["draft_model"] == EAGLE["draft_model_path"]
    published = result.task("localhost", PUBLISH)["ansible_facts"]["sglang_service_spec_acceptance"]
    assert [(p["name"], p["status"], p["accept_length"]) for p in published] == [
        ("good", "ok", round(128 / 43, 4))]
    assert set(published[0]) == {"name", "status", "msg", "draft_model", "accept_length", "accept_rate",
                                 "min_accept_length", "requests", "completion_tokens", "verify_steps"}
    assert result.task("localhost", FAIL)["event"] == "runner_on_skipped"


def test_bad_acceptance_fails_the_host_naming_value_draft_and_causes(servers):
    result = _gate([_entry("good", servers["good"], True), _entry("bad", servers["bad"], True)])
    assert result.rc != 0
    failed = result.task("localhost", FAIL)
    assert failed["event"] == "runner_on_failed"
    (message,) = failed["msg"]
    assert message.startswith("sglang-bad: speculative accept length 1.20, accept rate 0.07 (SGLang's "
                              "meta_info over 8 probe requests: 1024 tokens in 856 verify steps) is below "
                              "sglang_service_spec_min_accept_length 1.8; EAGLE3 draft "
                              "/models/kimi-k2.5-eagle3, num_steps 3, eagle_topk 1, num_draft_tokens 4. "
                              "Likely causes: (1) the draft model was trained for another target model")
    assert "quantisation mismatch" in message
    assert "chat template" in message
    assert _probed(result)["good"]["status"] == "ok"  # every model was probed before the host failed
    loop_keys = {"__sglang_service_gated", "ansible_loop_var", "_ansible_item_label", "failed_when_result",
                 "failed_when_suppressed_exception"}  # what the loop and failed_when add
    for probed in _probed(result).values():
        assert_documented("sglang_spec_acceptance", {k: v for k, v in probed.items() if k not in loop_keys})
    # what verify reports for this host: one speculative check, failing, with each model's figure
    published = result.task("localhost", PUBLISH)["ansible_facts"]["sglang_service_spec_acceptance"]
    checks = run_module("verify_checks", {"gpu": {"present": False, "reason": "stand-in"},
                                          "stack": {"facts": {}}, "speculative": published})
    assert_documented("verify_checks", checks)
    (spec_check,) = [c for c in checks["checks"] if c["check"] == "speculative"]
    assert spec_check["status"] == "fail"
    assert spec_check["detail"].startswith(
        f"good: accept length {round(128 / 43, 4)} (min 1.8, draft /models/kimi-k2.5-eagle3); "
        f"sglang-bad: speculative accept length 1.20")
    assert [(f["name"], f["accept_length"]) for f in spec_check["figures"]] == [
        ("good", round(128 / 43, 4)), ("bad", round(128 / 107, 4))]


def test_bad_acceptance_only_warns_in_warn_mode(servers):
    result = _gate([_entry("bad", servers["bad"], True)], sglang_service_spec_gate="warn")
    assert result.rc == 0, result.stdout[-3000:]
    bad = _probed(result)["bad"]
    assert bad["status"] == "warn"
    assert bad["accept_length"] == round(128 / 107, 4)
    assert "is below sglang_service_spec_min_accept_length 1.8" in bad["msg"]
    # a loop item's warnings go to the output, not into the registered item
    assert "[WARNING]: sglang-bad: speculative accept length 1.20" in result.stdout
    published = result.task("localhost", PUBLISH)["ansible_facts"]["sglang_service_spec_acceptance"]
    assert [(p["name"], p["status"]) for p in published] == [("bad", "warn")]


def test_off_probes_nothing(servers):
    result = _gate([_entry("bad", servers["bad"], True)], sglang_service_spec_gate="off")
    assert result.rc == 0, result.stdout[-3000:]
    assert result.task("localhost", GATE)["event"] == "runner_on_skipped"
    assert result.task("localhost", PUBLISH)["ansible_facts"]["sglang_service_spec_acceptance"] == []


def test_a_server_without_speculation_named_as_drafting_fails_clearly(servers):
    result = run_module("sglang_spec_acceptance", {
        "url": f"http://127.0.0.1:{servers['plain']}", "name": "plain", "speculative": EAGLE,
        "prompts": ["a", "b"], "max_new_tokens": 16})
    assert result["event"] == "runner_on_failed"
    assert result["status"] == "fail"
    assert result["msg"] == (
        "sglang-plain: speculative acceptance not measured: no answer of 2 carried speculative figures "
        "(spec_verify_ct): the server runs without speculative decoding, or every answer ended before a "
        "draft was verified (raise sglang_service_spec_max_new_tokens)")
    assert result["accept_length"] is None


def test_a_minimum_that_can_never_be_met_fails_before_probing(servers):
    result = run_module("sglang_spec_acceptance", {
        "url": f"http://127.0.0.1:{servers['good']}", "name": "good", "speculative": EAGLE,
        "prompts": ["a"], "min_accept_length": 4.5})
    assert result["event"] == "runner_on_failed"
    assert result["msg"].startswith("sglang_service_spec_min_accept_length: 4.5 can never be met with "
                                    "num_steps 3")
    assert result["requests"] == 0


def test_probe_asks_each_served_model_once_and_names_the_silent_one(servers):
    """The role's `probe` entry point (what verify.yml runs for the inventory's models): one GET /health
    per model this host serves, in check mode too (the requests change nothing), with no gateway asked
    on a host outside the gateway group."""
    silent = free_port()
    models = [_entry("good", servers["good"], True), _entry("plain", servers["plain"], False),
              _entry("silent", silent, False)]
    for check in (False, True):
        play = [{"hosts": "localhost", "gather_facts": False,
                 "vars": {"sglang_service_models": models, "sglang_service_python": "/opt/x/bin/python",
                          "sglang_service_capabilities": ["12.0"], "sglang_service_probe_timeout": 3},
                 "tasks": [{"name": "probe", "ansible.builtin.include_role": {
                     "name": "sglang_service", "tasks_from": "probe"}}]}]
        result = run_playbook(play, check=check)
        assert result.rc == 0, result.stdout[-3000:]
        facts = result.task("localhost", "Keep the health of each model and of the gateway")["ansible_facts"]
        health = {h["name"]: h for h in facts["sglang_service_health"]}
        assert list(health) == ["sglang-good", "sglang-plain", "sglang-silent"]
        assert health["sglang-good"]["status"] == health["sglang-plain"]["status"] == 200
        assert health["sglang-good"]["url"] == f"http://127.0.0.1:{servers['good']}/health"
        assert health["sglang-silent"]["status"] == -1
        assert "Connection refused" in health["sglang-silent"]["msg"]
        assert facts["sglang_service_gateway_health"] == {}
        checks = run_module("verify_checks", {"gpu": {"present": False, "reason": "stand-in"},
                                              "stack": {"facts": {}},
                                              "service": facts["sglang_service_health"]})
        (service,) = [c for c in checks["checks"] if c["check"] == "service"]
        assert service["status"] == "fail"
        assert service["detail"].startswith(
            f"sglang-silent: http://127.0.0.1:{silent}/health did not answer: ")
