"""module_utils/spec_acceptance: the speculative-acceptance gate from SGLang 0.5.23's own per-request
figures (meta_info of /generate, the field names and formulas of sglang/srt/managers/tokenizer_manager.py
3138-3172); the integration test runs the module and the role against the stand-in server."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest
from ansible.module_utils.spec_acceptance import (
    LIKELY_CAUSES,
    MODES,
    OWN_DRAFT,
    ConfigError,
    ProbeError,
    check_minimum,
    decide,
    parse_generate,
    post,
    probe,
    request_body,
    summarize,
    tuning,
)

EAGLE = {"algorithm": "EAGLE3", "draft_model_path": "org/draft", "num_steps": 3, "eagle_topk": 1,
         "num_draft_tokens": 4}
AUTO = {"algorithm": "EAGLE3", "draft_model_path": "org/draft"}
NEXTN = {"algorithm": "NEXTN"}


def meta(**fields):
    return json.dumps({"text": " x", "meta_info": fields})


# An answer as sglang 0.5.23 writes it: 128 tokens in 40 verify steps, 3 draft tokens per step.
SGLANG_ANSWER = meta(id="a", completion_tokens=128, prompt_tokens=9, spec_verify_ct=40,
                     spec_accept_length=3.2, spec_accept_rate=0.733, spec_num_correct_drafts=88,
                     spec_num_proposed_drafts=120)


def test_modes_and_causes():
    assert MODES == ("fail", "warn")
    assert OWN_DRAFT == "(the target's own MTP layers)"
    assert len(LIKELY_CAUSES) == 4
    assert LIKELY_CAUSES[0].startswith("the draft model was trained for another target model")
    assert LIKELY_CAUSES[1].startswith("num_steps / eagle_topk / num_draft_tokens")
    assert LIKELY_CAUSES[2].startswith("a quantisation mismatch")
    assert LIKELY_CAUSES[3].startswith("the chat template")


def test_tuning_names_the_settings_or_sglangs_choice():
    assert tuning(EAGLE) == "num_steps 3, eagle_topk 1, num_draft_tokens 4"
    assert tuning(AUTO) == "num_steps/eagle_topk/num_draft_tokens chosen by sglang"
    assert tuning({"algorithm": "EAGLE", "num_steps": None}) == tuning(AUTO)


@pytest.mark.parametrize("minimum", [1, 1.0, 2.5, 4, 4.0])
def test_minimum_in_range_passes(minimum):
    assert check_minimum(minimum, EAGLE) is None


def test_minimum_below_one_is_rejected():
    with pytest.raises(ConfigError) as info:
        check_minimum(0.99, EAGLE)
    assert str(info.value) == (
        "sglang_service_spec_min_accept_length: 0.99 is below 1, which every verify step reaches (it "
        "yields at least the bonus token); use sglang_service_spec_gate: off to skip the gate")


def test_minimum_above_num_steps_plus_one_is_rejected():
    with pytest.raises(ConfigError) as info:
        check_minimum(4.01, EAGLE)
    assert str(info.value) == (
        "sglang_service_spec_min_accept_length: 4.01 can never be met with num_steps 3 (a verify step "
        "accepts at most num_steps + 1 = 4 tokens)")


def test_minimum_without_num_steps_has_no_upper_bound():
    assert check_minimum(9.0, AUTO) is None
    assert check_minimum(9.0, NEXTN) is None


def test_request_body_is_greedy():
    assert request_body("hello", 64) == {"text": "hello",
                                         "sampling_params": {"temperature": 0, "max_new_tokens": 64}}


def test_parse_an_sglang_answer():
    assert parse_generate(SGLANG_ANSWER) == {"completion_tokens": 128, "verify_ct": 40,
                                             "correct_drafts": 88, "proposed_drafts": 120}


def test_an_answer_without_spec_fields_counts_zero_steps():
    # sglang leaves the spec_* fields out when no draft was verified (tokenizer_manager.py:3151)
    assert parse_generate(meta(completion_tokens=1)) == {"completion_tokens": 1, "verify_ct": 0,
                                                         "correct_drafts": 0, "proposed_drafts": 0}


def test_an_answer_without_anything_counts_zero():
    assert parse_generate(meta()) == {"completion_tokens": 0, "verify_ct": 0, "correct_drafts": 0,
                                      "proposed_drafts": 0}


@pytest.mark.parametrize("text", ["not json", "[1, 2]", json.dumps({"text": "x"}),
                                  json.dumps({"meta_info": "x"})])
def test_answers_that_are_not_sglangs(text):
    with pytest.raises(ProbeError) as info:
        parse_generate(text)
    if text == "not json":
        assert str(info.value) == "the answer is not JSON: 'not json'"
    else:
        assert str(info.value) == (f"the answer has no meta_info (not an SGLang /generate answer?): "
                                   f"{text!r}")


def test_long_answers_are_cut_in_messages():
    with pytest.raises(ProbeError) as info:
        parse_generate("y" * 500)
    assert str(info.value) == f"the answer is not JSON: {'y' * 200!r}"
    text = json.dumps({"pad": "z" * 400})
    with pytest.raises(ProbeError) as info:
        parse_generate(text)
    assert str(info.value).endswith(f"{text[:200]!r}")


@pytest.mark.parametrize(("key", "value"), [("completion_tokens", -1), ("spec_verify_ct", 1.5),
                                            ("spec_num_correct_drafts", True),
                                            ("spec_num_proposed_drafts", "3")])
def test_counts_must_be_counts(key, value):
    fields = {"completion_tokens": 4, "spec_verify_ct": 2, key: value}
    with pytest.raises(ProbeError) as info:
        parse_generate(meta(**fields))
    assert str(info.value) == f"meta_info.{key} is not a count: {value!r}"


def test_zero_is_a_count():
    assert parse_generate(meta(completion_tokens=0, spec_verify_ct=0))["completion_tokens"] == 0


def sample(tokens, steps, correct=0, proposed=0):
    return {"completion_tokens": tokens, "verify_ct": steps, "correct_drafts": correct,
            "proposed_drafts": proposed}


def test_summary_is_tokens_over_steps_over_all_requests():
    figures = summarize([sample(128, 40, 88, 120), sample(64, 40, 24, 120), sample(1, 0)])
    assert figures == {"accept_length": round(193 / 80, 4), "accept_rate": 0.4667, "requests": 3,
                       "completion_tokens": 193, "verify_steps": 80}


def test_summary_rounds_to_four_places():
    assert summarize([sample(10, 3, 1, 3)])["accept_length"] == 3.3333
    assert summarize([sample(10, 3, 1, 3)])["accept_rate"] == 0.3333


def test_summary_without_proposed_drafts_has_no_rate():
    assert summarize([sample(10, 5)])["accept_rate"] is None


def test_summary_without_any_verify_step_is_an_error():
    with pytest.raises(ProbeError) as info:
        summarize([sample(1, 0), sample(1, 0)])
    assert str(info.value) == (
        "no answer of 2 carried speculative figures (spec_verify_ct): the server runs without "
        "speculative decoding, or every answer ended before a draft was verified (raise "
        "sglang_service_spec_max_new_tokens)")


FIGURES = {"accept_length": 2.5, "accept_rate": 0.5, "requests": 8, "completion_tokens": 1000,
           "verify_steps": 400}
MEASURED = ("accept length 2.50, accept rate 0.50 (SGLang's meta_info over 8 probe requests: 1000 tokens "
            "in 400 verify steps)")


def test_decide_at_the_minimum_passes():
    verdict = decide(FIGURES, 2.5, "fail", "kimi", EAGLE)
    assert verdict == {"status": "ok", "msg": f"sglang-kimi: {MEASURED} >= 2.5; EAGLE3 draft org/draft, "
                                              f"num_steps 3, eagle_topk 1, num_draft_tokens 4"}


@pytest.mark.parametrize(("mode", "status"), [("fail", "fail"), ("warn", "warn")])
def test_decide_below_the_minimum_names_value_draft_and_causes(mode, status):
    verdict = decide(FIGURES, 2.51, mode, "kimi", EAGLE)
    causes = "; ".join(f"({i}) {c}" for i, c in enumerate(LIKELY_CAUSES, 1))
    assert verdict == {"status": status, "msg": (
        f"sglang-kimi: speculative {MEASURED} is below sglang_service_spec_min_accept_length 2.51; EAGLE3 "
        f"draft org/draft, num_steps 3, eagle_topk 1, num_draft_tokens 4. Likely causes: {causes}")}
    assert "(1) the draft model was trained" in verdict["msg"]
    assert "; (4) the chat template" in verdict["msg"]


def test_decide_without_rate_and_without_draft_path():
    figures = dict(FIGURES, accept_rate=None, accept_length=1.234)
    verdict = decide(figures, 1.0, "fail", "m", NEXTN)
    assert verdict["msg"] == (
        "sglang-m: accept length 1.23 (SGLang's meta_info over 8 probe requests: 1000 tokens in 400 verify "
        "steps) >= 1.0; NEXTN draft (the target's own MTP layers), num_steps/eagle_topk/num_draft_tokens "
        "chosen by sglang")


class ServerPlay(BaseHTTPRequestHandler):
    """A test double of a server's /generate (the integration test uses the stand-in server)."""

    protocol_version = "HTTP/1.1"
    seen: ClassVar[list] = []
    answers: ClassVar[list] = []

    def log_message(self, *a):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        ServerPlay.seen.append((self.path, self.headers.get("Authorization"),
                                self.headers.get("Content-Type"), body))
        code, text = ServerPlay.answers.pop(0) if ServerPlay.answers else (200, SGLANG_ANSWER)
        if code == 0:  # never answer: the client's timeout must end the request
            time.sleep(1)
            return
        data = text if isinstance(text, bytes) else text.encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), ServerPlay)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    ServerPlay.seen, ServerPlay.answers = [], []
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_post_sends_json_with_the_key(server):
    assert post(server + "/generate", {"a": 1}, "k", 5) == (200, SGLANG_ANSWER)
    assert ServerPlay.seen == [("/generate", "Bearer k", "application/json", {"a": 1})]


def test_post_without_a_key_sends_no_authorization(server):
    post(server + "/generate", {}, "", 5)
    assert ServerPlay.seen[0][1] is None


def test_post_returns_an_http_error_with_its_body(server):
    ServerPlay.answers = [(401, '{"error": "Unauthorized"}')]
    assert post(server + "/generate", {}) == (401, '{"error": "Unauthorized"}')
    assert ServerPlay.seen[0][1] is None  # no key by default


def test_post_replaces_bytes_that_are_not_utf8(server):
    ServerPlay.answers = [(200, b"ok \xff"), (500, b"bad \xfe")]
    assert post(server + "/generate", {}) == (200, "ok \ufffd")
    assert post(server + "/generate", {}) == (500, "bad \ufffd")


def test_post_passes_its_timeout(monkeypatch):
    seen = []

    def urlopen(request, **kwargs):
        seen.append(kwargs)
        raise OSError("stop")

    monkeypatch.setattr(urllib.request, "urlopen", urlopen)
    with pytest.raises(ProbeError, match=r"^POST http://h:1/generate: stop$"):
        post("http://h:1/generate", {})
    with pytest.raises(ProbeError):
        post("http://h:1/generate", {}, timeout=2.5)
    assert seen == [{"timeout": 60.0}, {"timeout": 2.5}]


def test_post_that_times_out_says_so(server):
    ServerPlay.answers = [(0, "")]
    with pytest.raises(ProbeError) as info:
        post(server + "/generate", {}, timeout=0.3)
    assert str(info.value) == f"POST {server}/generate: timed out"


def test_post_to_nothing_is_a_probe_error():
    with pytest.raises(ProbeError) as info:
        post("http://127.0.0.1:9/generate", {}, timeout=5)
    assert str(info.value) == "POST http://127.0.0.1:9/generate: [Errno 111] Connection refused"


def test_probe_sends_one_greedy_request_per_prompt(server):
    samples = probe(server + "/", ["a", "b"], 32, api_key="k", timeout=5)
    assert samples == [parse_generate(SGLANG_ANSWER)] * 2
    assert [(s[0], s[1], s[3]) for s in ServerPlay.seen] == [
        ("/generate", "Bearer k", request_body("a", 32)), ("/generate", "Bearer k", request_body("b", 32))]


def test_probe_passes_its_arguments_to_send():
    calls = []

    def send(url, body, api_key, timeout):
        calls.append((url, body, api_key, timeout))
        return 200, SGLANG_ANSWER

    probe("http://h:1", ["p"], 7, api_key="key", timeout=3.5, send=send)
    probe("http://h:1//", ["p"], 7, api_key="key", timeout=3.5, send=send)
    assert calls == [("http://h:1/generate", request_body("p", 7), "key", 3.5)] * 2
    probe("http://BOX", ["p"], 7, send=send)  # only slashes are stripped
    assert calls[-1][0] == "http://BOX/generate"


def test_probe_defaults():
    calls = []

    def send(url, body, api_key, timeout):
        calls.append((api_key, timeout))
        return 200, SGLANG_ANSWER

    probe("http://h:1", ["p"], 7, send=send)
    assert calls == [("", 60.0)]


def test_probe_names_the_prompt_and_status(server):
    ServerPlay.answers = [(200, SGLANG_ANSWER), (500, "e" * 400)]
    with pytest.raises(ProbeError) as info:
        probe(server, ["a", "b"], 8)
    assert str(info.value) == f"POST {server}/generate (prompt 1) -> HTTP 500: {'e' * 300}"


def test_probe_refused_key_says_which_variable(server):
    ServerPlay.answers = [(401, '{"error": "Unauthorized"}')]
    with pytest.raises(ProbeError) as info:
        probe(server, ["a"], 8)
    assert str(info.value) == (f"POST {server}/generate (prompt 0) -> HTTP 401 (the server's API key: "
                               f'sglang_service_api_key): {{"error": "Unauthorized"}}')


def test_probe_without_prompts_is_an_error():
    with pytest.raises(ProbeError, match=r"^the probe's prompt set is empty$"):
        probe("http://h:1", [], 8, send=None)
