#!/usr/bin/python
"""Ansible module: the SMG gateway's routing check (real requests; reads SMG's metrics; changes nothing)."""

DOCUMENTATION = r"""
---
module: smg_route_check
short_description: Prove that an SMG gateway routes to every worker in rotation
description:
  - Sends rounds of 1-token generations (C(POST /generate), a distinct prompt each) through the gateway
    until SMG's own metrics (C(smg_worker_cb_outcomes_total{outcome="success"}) per worker URL on its
    Prometheus port) show a successful answer from every worker in C(workers), or C(max_rounds) rounds
    or C(bound) seconds have passed.
  - Fails naming each worker that got nothing (none dispatched, or dispatched but never answered
    successfully, e.g. a worker whose health passes but which refuses the gateway's API key), and each
    worker in C(left_out) that still got a request.
  - A request through the gateway that does not answer 200 fails at once with its status and body.
  - Changes nothing (the generations are one token each).
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  url:
    description: The gateway's base URL (its serving port).
    type: str
    required: true
  metrics_url:
    description: SMG's Prometheus URL (C(--prometheus-host)/C(--prometheus-port), path C(/metrics)).
    type: str
    required: true
  api_key:
    description: The gateway's API key (sent as a bearer token); empty for none.
    type: str
    default: ""
  workers:
    description: The workers in rotation (the manifest's), each with C(id) and C(url).
    type: list
    elements: dict
    required: true
  left_out:
    description: Workers out of rotation (C(id), C(url)); each must get no request.
    type: list
    elements: dict
    default: []
  model:
    description: Model the requests name (empty asks the gateway's C(/v1/models), which must list one).
    type: str
    default: ""
  max_rounds:
    description: At most this many rounds of one request per worker in rotation.
    type: int
    default: 10
  bound:
    description: Seconds the check may take at most (it stops sending after this).
    type: int
    default: 120
  timeout:
    description: Seconds one request may take.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    description: Changes nothing; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
"""

EXAMPLES = r"""
- name: The gateway routes to every worker of its manifest
  smg_route_check:
    url: http://127.0.0.1:8000
    metrics_url: http://127.0.0.1:29000/metrics
    workers:
      - {id: node1-main, url: "http://10.0.0.11:30000"}
      - {id: node2-main, url: "http://10.0.0.12:30000"}
"""

RETURN = r"""
ok:
  description: Every worker in rotation answered, and none out of rotation got a request.
  returned: always
  type: bool
requests:
  description: Requests sent through the gateway.
  returned: always
  type: int
model:
  description: The model the requests named.
  returned: always
  type: str
workers:
  description: Per worker, what SMG's metrics show for the check's requests.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Worker id (the manifest's).
      type: str
    url:
      description: Worker URL.
      type: str
    in_rotation:
      description: Whether the worker is in rotation.
      type: bool
    dispatched:
      description: Requests SMG dispatched to it during the check.
      type: int
    succeeded:
      description: Successful answers from it during the check.
      type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.smg_routing import Gateway, RoutingError, check_routing


def _workers(module, key, items):
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not item.get("id") or not item.get("url"):
            module.fail_json(msg=f"{key}[{i}]: needs id and url, got {item!r}")
        out.append({"id": str(item["id"]), "url": str(item["url"])})
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "metrics_url": {"type": "str", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "workers": {"type": "list", "elements": "dict", "required": True},
            "left_out": {"type": "list", "elements": "dict", "default": []},
            "model": {"type": "str", "default": ""},
            "max_rounds": {"type": "int", "default": 10},
            "bound": {"type": "int", "default": 120},
            "timeout": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    if p["max_rounds"] < 1 or p["bound"] < 1 or p["timeout"] < 1:
        module.fail_json(msg=f"max_rounds, bound and timeout must be positive, got max_rounds="
                             f"{p['max_rounds']} bound={p['bound']} timeout={p['timeout']}")
    workers = _workers(module, "workers", p["workers"])
    left_out = _workers(module, "left_out", p["left_out"])
    try:
        gateway = Gateway(p["url"], p["metrics_url"], p["api_key"], p["timeout"])
        result = check_routing(gateway, workers, left_out, p["model"], max_rounds=p["max_rounds"],
                               bound=p["bound"])
    except RoutingError as exc:
        module.fail_json(msg=str(exc), ok=False, requests=0, model=p["model"], workers=[])
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"smg_route_check failed unexpectedly: {type(exc).__name__}: {exc}")
    if not result["ok"]:
        module.fail_json(**result)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
