#!/usr/bin/python
"""Ansible module: the speculative-acceptance gate of one SGLang server (greedy probe requests; reads
SGLang's own per-request acceptance figures; changes nothing)."""

DOCUMENTATION = r"""
---
module: sglang_spec_acceptance
short_description: Measure a speculative-decoding SGLang server's acceptance length and judge it
description:
  - Sends each prompt of C(prompts) once to the server's C(POST /generate) (greedy, C(temperature 0),
    C(max_new_tokens) tokens) and reads SGLang's own per-request figures from each answer's C(meta_info)
    (sglang 0.5.23 C(srt/managers/tokenizer_manager.py) lines 3138-3172) C(spec_verify_ct),
    C(completion_tokens), C(spec_num_correct_drafts) and C(spec_num_proposed_drafts).
  - The measured acceptance length is SGLang's own formula over all the probe's requests, total completion
    tokens over total verify steps (accepted drafts plus the bonus token per step); the acceptance rate is
    correct over proposed drafts.
  - Below C(min_accept_length) the module fails (C(mode=fail)) or warns (C(mode=warn)), naming the measured
    value, the draft model, its settings and the likely causes (a draft trained for another target or
    version, other num_steps/eagle_topk/num_draft_tokens, a quantisation mismatch, the chat template).
  - A server that does not answer, answers other than 200, or gives no speculative figures at all (it runs
    without speculative decoding) fails the same way (or warns), saying which.
  - Reads only; the probe's generations change nothing on the host.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  url:
    description: The server's base URL (its own port, e.g. C(http://127.0.0.1:30000)).
    type: str
    required: true
  name:
    description: The served model's name (C(sglang_service_models[].name)), used in messages.
    type: str
    required: true
  speculative:
    description:
      - The entry's C(speculative) mapping (C(algorithm), C(draft_model_path), C(num_steps),
        C(eagle_topk), C(num_draft_tokens)), named in messages; C(num_steps) also bounds C(min_accept_length).
    type: dict
    required: true
  prompts:
    description: The probe's prompts, sent as raw text, one request each.
    type: list
    elements: str
    required: true
  max_new_tokens:
    description: Tokens each probe request generates at most.
    type: int
    default: 128
  min_accept_length:
    description:
      - The least acceptance length that passes (1 is what a server whose drafts are all rejected reaches).
        It may not exceed C(num_steps + 1) when C(num_steps) is given.
    type: float
    default: 1.8
  mode:
    description: C(fail) fails below the minimum; C(warn) returns a warning and C(status=warn) instead.
    type: str
    choices: [fail, warn]
    default: fail
  api_key:
    description: The server's API key (sent as a bearer token); empty for none.
    type: str
    default: ""
  timeout:
    description: Seconds one probe request may take.
    type: int
    default: 120
attributes:
  check_mode:
    support: full
    description: Changes nothing; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
"""

EXAMPLES = r"""
- name: The EAGLE-3 draft of kimi accepts enough
  sglang_spec_acceptance:
    url: http://127.0.0.1:30000
    name: kimi
    speculative: {algorithm: EAGLE3, draft_model_path: lightseekorg/kimi-k2.5-eagle3, num_steps: 3,
                  eagle_topk: 1, num_draft_tokens: 4}
    prompts:
      - Write a Python function that reverses a linked list.
      - Explain how a heat pump works.
    min_accept_length: 1.8
    mode: warn
"""

RETURN = r"""
status:
  description: C(ok), C(warn) (below the minimum or not probed, with C(mode=warn)) or C(fail).
  returned: always
  type: str
  sample: ok
msg:
  description: >-
    The verdict with the measured figures, the draft model and, below the minimum, the likely causes.
  returned: always
  type: str
name:
  description: The served model's name.
  returned: always
  type: str
draft_model:
  description: The draft model path (empty for NEXTN, which drafts with the target's own layers).
  returned: always
  type: str
accept_length:
  description: Total completion tokens over total verify steps of the probe's requests; null when not probed.
  returned: always
  type: float
  sample: 2.87
accept_rate:
  description: Accepted over proposed draft tokens; null when not probed or not reported.
  returned: always
  type: float
  sample: 0.62
min_accept_length:
  description: The minimum the figure was judged against.
  returned: always
  type: float
requests:
  description: Probe requests answered.
  returned: always
  type: int
completion_tokens:
  description: Tokens the probe's requests generated.
  returned: always
  type: int
verify_steps:
  description: Verify steps (C(spec_verify_ct)) those tokens took.
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.spec_acceptance import (
    ConfigError,
    ProbeError,
    check_minimum,
    decide,
    probe,
    summarize,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "name": {"type": "str", "required": True},
            "speculative": {"type": "dict", "required": True},
            "prompts": {"type": "list", "elements": "str", "required": True},
            "max_new_tokens": {"type": "int", "default": 128, "no_log": False},  # a count, not a token
            "min_accept_length": {"type": "float", "default": 1.8},
            "mode": {"type": "str", "choices": ["fail", "warn"], "default": "fail"},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "timeout": {"type": "int", "default": 120},
        },
        supports_check_mode=True,
    )
    p = module.params
    spec = p["speculative"]
    result = {"name": p["name"], "draft_model": str(spec.get("draft_model_path") or ""),
              "accept_length": None, "accept_rate": None, "min_accept_length": p["min_accept_length"],
              "requests": 0, "completion_tokens": 0, "verify_steps": 0}
    if not spec.get("algorithm"):
        module.fail_json(msg=f"speculative: no algorithm for sglang-{p['name']} (the entry's speculative "
                             f"mapping), got {spec!r}", status="fail", **result)
    if p["max_new_tokens"] < 2 or p["timeout"] < 1:
        module.fail_json(msg=f"max_new_tokens must be at least 2 (a draft is verified after the first token) "
                             f"and timeout positive, got max_new_tokens={p['max_new_tokens']} "
                             f"timeout={p['timeout']}", status="fail", **result)
    try:
        check_minimum(p["min_accept_length"], spec)
        figures = summarize(probe(p["url"], p["prompts"], p["max_new_tokens"], api_key=p["api_key"],
                                  timeout=p["timeout"]))
        result.update(figures)
        result.update(decide(figures, p["min_accept_length"], p["mode"], p["name"], spec))
    except ConfigError as exc:
        module.fail_json(msg=str(exc), status="fail", **result)
    except ProbeError as exc:
        result.update(status="warn" if p["mode"] == "warn" else "fail",
                      msg=f"sglang-{p['name']}: speculative acceptance not measured: {exc}")
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"sglang_spec_acceptance failed unexpectedly: {type(exc).__name__}: {exc}",
                         status="fail", **result)
    if result["status"] == "fail":
        module.fail_json(**result)
    if result["status"] == "warn":
        module.warn(result["msg"])
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
