"""The speculative-acceptance gate: send a small prompt set to one SGLang server, read SGLang's own
acceptance figures from the answers, and judge them against a minimum.

Where sglang 0.5.23 reports acceptance (paths inside the released wheel, ``sglang/...``):

- Per request, in the ``meta_info`` of a finished ``/generate`` answer, only when the server runs a
  speculative algorithm (``srt/managers/tokenizer_manager.py:2755-2756`` calls
  ``_calculate_spec_decoding_metrics``, lines 3138-3172) and only once a draft was verified
  (``spec_verify_ct > 0``, line 3151): ``spec_verify_ct`` (verify steps), ``spec_accept_length`` =
  ``completion_tokens / spec_verify_ct`` (accepted drafts plus the bonus token per step, line 3166),
  ``spec_num_correct_drafts``, ``spec_num_proposed_drafts`` = ``spec_verify_ct * (num_draft_tokens - 1)``
  (line 3156) and ``spec_accept_rate`` = correct / proposed (line 3164).
- Server-wide, on ``/metrics`` (``--enable-metrics``): the gauges ``sglang:spec_accept_length`` and
  ``sglang:spec_accept_rate`` (``srt/observability/metrics_collector.py:511-521``), set from a window
  of decode steps that is reset every ``decode_log_interval`` (default 40) decode iterations
  (``srt/managers/scheduler_components/metrics_reporter.py:292-297``, 966-973, 1093-1094): a short probe
  may never move them, and other traffic moves them too.
- The server's lifetime mean: ``/server_info`` ``internal_states[].avg_spec_accept_length``
  (``srt/managers/scheduler_components/internal_state.py:119-125``, 244-253), other traffic included.

So the gate reads the per-request figures of its own requests and sums them the way SGLang computes
one request's: total completion tokens over total verify steps.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import json
import urllib.error
import urllib.request

MODES = ("fail", "warn")
# NEXTN drafts with the target's own multi-token-prediction layers: no draft path
OWN_DRAFT = "(the target's own MTP layers)"
LIKELY_CAUSES = (
    "the draft model was trained for another target model, or another version of it (an EAGLE-3 draft "
    "reads the target's hidden states: it fits one checkpoint)",
    "num_steps / eagle_topk / num_draft_tokens unlike those the draft was trained and tuned with",
    "a quantisation mismatch: the target served in another precision than the draft was trained "
    "against (e.g. an int4 or fp4 target with a draft trained on bf16 hidden states)",
    "the chat template: a draft trained on chat-formatted text accepts less of other text (the probe "
    "sends the role's prompt set as raw text; compare with real traffic's figures)",
)


class ProbeError(RuntimeError):
    """The server could not be probed, or gave no speculative figures; the message says which."""


class ConfigError(ValueError):
    """A gate setting that can never be met or makes no sense; the message names it."""


def tuning(spec):
    """The speculative settings as a short phrase."""
    if spec.get("num_steps") is None:
        return "num_steps/eagle_topk/num_draft_tokens chosen by sglang"
    return (f"num_steps {spec['num_steps']}, eagle_topk {spec['eagle_topk']}, "
            f"num_draft_tokens {spec['num_draft_tokens']}")


def check_minimum(minimum, spec):
    """Reject a minimum below 1 (every verify step yields a token) or above num_steps + 1."""
    if minimum < 1:
        raise ConfigError(f"sglang_service_spec_min_accept_length: {minimum} is below 1, which every verify "
                          f"step reaches (it yields at least the bonus token); use "
                          f"sglang_service_spec_gate: off to skip the gate")
    steps = spec.get("num_steps")
    if steps is not None and minimum > steps + 1:
        raise ConfigError(f"sglang_service_spec_min_accept_length: {minimum} can never be met with "
                          f"num_steps {steps} (a verify step accepts at most num_steps + 1 = {steps + 1} "
                          f"tokens)")


def request_body(prompt, max_new_tokens):
    """A greedy /generate request: the same answer every time, so runs compare."""
    return {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens}}


def _count(meta, key):
    value = meta.get(key, 0)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ProbeError(f"meta_info.{key} is not a count: {value!r}")
    return value


def parse_generate(text):
    """{completion_tokens, verify_ct, correct_drafts, proposed_drafts} of one /generate answer.

    A finished request without ``spec_verify_ct`` had no verify step (SGLang leaves the fields out):
    its counts are 0, not an error.
    """
    try:
        answer = json.loads(text)
    except ValueError:
        raise ProbeError(f"the answer is not JSON: {text[:200]!r}") from None
    meta = answer.get("meta_info") if isinstance(answer, dict) else None
    if not isinstance(meta, dict):
        raise ProbeError(f"the answer has no meta_info (not an SGLang /generate answer?): {text[:200]!r}")
    sample = {"completion_tokens": _count(meta, "completion_tokens"),
              "verify_ct": _count(meta, "spec_verify_ct")}
    sample["correct_drafts"] = _count(meta, "spec_num_correct_drafts")
    sample["proposed_drafts"] = _count(meta, "spec_num_proposed_drafts")
    return sample


def summarize(samples):
    """The probe's figures: SGLang's accept length over all its requests (tokens / verify steps)."""
    tokens = sum(s["completion_tokens"] for s in samples)
    steps = sum(s["verify_ct"] for s in samples)
    if not steps:
        raise ProbeError(f"no answer of {len(samples)} carried speculative figures (spec_verify_ct): the "
                         f"server runs without speculative decoding, or every answer ended before a draft "
                         f"was verified (raise sglang_service_spec_max_new_tokens)")
    proposed = sum(s["proposed_drafts"] for s in samples)
    correct = sum(s["correct_drafts"] for s in samples)
    return {"accept_length": round(tokens / steps, 4),
            "accept_rate": round(correct / proposed, 4) if proposed else None,
            "requests": len(samples), "completion_tokens": tokens, "verify_steps": steps}


def decide(figures, minimum, mode, name, spec):
    """{"status": ok|warn|fail, "msg"} for the figures of model ``name`` against ``minimum``."""
    rate = figures["accept_rate"]
    measured = (f"accept length {figures['accept_length']:.2f}"
                + (f", accept rate {rate:.2f}" if rate is not None else "")
                + f" (SGLang's meta_info over {figures['requests']} probe requests: "
                  f"{figures['completion_tokens']} tokens in {figures['verify_steps']} verify steps)")
    draft = f"{spec['algorithm']} draft {spec.get('draft_model_path') or OWN_DRAFT}, {tuning(spec)}"
    if figures["accept_length"] >= minimum:
        return {"status": "ok", "msg": f"sglang-{name}: {measured} >= {minimum}; {draft}"}
    causes = "; ".join(f"({i}) {cause}" for i, cause in enumerate(LIKELY_CAUSES, 1))
    return {"status": "warn" if mode == "warn" else "fail",
            "msg": f"sglang-{name}: speculative {measured} is below sglang_service_spec_min_accept_length "
                   f"{minimum}; {draft}. Likely causes: {causes}"}


def post(url, body, api_key="", timeout=60.0):
    """(HTTP status, text) of one JSON POST; ProbeError when nothing answered."""
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (urllib.error.URLError, OSError) as exc:
        raise ProbeError(f"POST {url}: {getattr(exc, 'reason', exc)}") from None


def probe(base_url, prompts, max_new_tokens, *, api_key="", timeout=60.0, send=post):
    """The samples of one /generate request per prompt, in order."""
    if not prompts:
        raise ProbeError("the probe's prompt set is empty")
    url = base_url.rstrip("/") + "/generate"
    samples = []
    for index, prompt in enumerate(prompts):
        status, text = send(url, request_body(prompt, max_new_tokens), api_key, timeout)
        if status != 200:
            hint = " (the server's API key: sglang_service_api_key)" if status == 401 else ""
            raise ProbeError(f"POST {url} (prompt {index}) -> HTTP {status}{hint}: {text[:300]}")
        samples.append(parse_generate(text))
    return samples
