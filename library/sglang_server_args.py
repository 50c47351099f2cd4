#!/usr/bin/python
"""Ansible module: the SGLang server command line for one served-model entry (read-only)."""

DOCUMENTATION = r"""
---
module: sglang_server_args
short_description: Render and check the SGLang server command line for one served model
description:
  - Validates one entry of C(sglang_service_models) and renders the arguments of
    C(python -m sglang.launch_server) for the pinned release (sglang 0.5.23 spellings), plus the
    environment the server needs.
  - Rejects an invalid combination before anything is rendered, naming the variable (EAGLE-3 tuning
    given partly, a backend without kernels for the host's GPUs, a tensor parallel size that the
    node count does not divide, a flag in extra_args that the role renders itself, ...).
  - Arch-aware defaults, for example tensor parallel over PCIe-only GPUs (capability 12.0/12.1) gets
    C(NCCL_P2P_DISABLE=1) and C(--disable-custom-all-reduce) unless the entry opts out.
  - Multi-node tensor parallel (C(nodes_group)) gets C(--nnodes), C(--node-rank) and
    C(--dist-init-addr) from the group's host order and rank 0's address.
  - Runs on the controller or a host alike; never changes anything.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  model:
    description: One served-model entry (see the sglang_service role README for its keys).
    type: dict
    required: true
  variable:
    description: How error messages name the entry, for example C(sglang_service_models[1]).
    type: str
    default: sglang_service_models[0]
  capabilities:
    description: The host's target GPU capabilities as strings (V("12.0")); empty when unknown.
    type: list
    elements: str
    default: []
  group_hosts:
    description: The inventory hosts of the entry's C(nodes_group), in inventory order.
    type: list
    elements: str
    default: []
  hostname:
    description: This host's inventory name (its place in C(group_hosts) is its node rank).
    type: str
    default: ""
  rank0_address:
    description: Address of the group's first host, for C(--dist-init-addr).
    type: str
    default: ""
  python:
    description: The interpreter ExecStart runs (the stack's C(current) link).
    type: str
    default: /opt/sglang/stacks/current/bin/python
  launch_module:
    description: The Python module ExecStart runs with C(-m).
    type: str
    default: sglang.launch_server
  staged:
    description:
      - Where the model_weights role staged each entry's weights, by entry name, each a mapping with
        C(model_path) and C(draft_model_path). An entry with C(weights) (or C(draft_weights)) runs
        from that directory with C(HF_HUB_OFFLINE=1); one not staged here is rejected unless
        O(require_staged=false).
    type: dict
    default: {}
  require_staged:
    description:
      - Reject an entry whose weights are not in O(staged), as writing a unit needs.
      - False where only the addresses and ports are read (gating, probing, draining or restarting units
        already written, with no weights stage in the play); such an entry's C(--model-path) is then a
        placeholder, C(/staged-by-model_weights/weights).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
seealso:
  - module: sglang_readiness
"""

EXAMPLES = r"""
- name: Render the server command line
  sglang_server_args:
    model: {name: main, model_path: /models/llama, tp_size: 2}
    capabilities: ["12.0"]
  register: server
"""

RETURN = r"""
args:
  description: Arguments after C(python -m sglang.launch_server).
  returned: always
  type: list
  elements: str
  sample: [--model-path, /models/llama, --host, 127.0.0.1, --port, "30000", --tp-size, "2",
           --disable-custom-all-reduce]
exec_start:
  description: The whole command line, quoted for a systemd C(ExecStart=).
  returned: always
  type: str
env:
  description: Environment variables the server needs (not secrets).
  returned: always
  type: dict
rank:
  description: This host's node rank (0 on a single node).
  returned: always
  type: int
nnodes:
  description: Number of nodes serving the model.
  returned: always
  type: int
serves_http:
  description: Whether this host serves HTTP (only rank 0 does).
  returned: always
  type: bool
port:
  description: The entry's HTTP port (its C(port), else 30000); served by rank 0 only.
  returned: always
  type: int
  sample: 30000
probe_host:
  description: Where this host's own probes (readiness gate, drain) reach the server; loopback when it
    listens on every address (C(0.0.0.0), C(::)).
  returned: always
  type: str
  sample: 127.0.0.1
"""

from ansible.module_utils.module_entry import run_module
from ansible.module_utils.sglang_cmdline import ConfigError, render, systemd_quote

# One specification for both ways in: run_module here, action_plugins/sglang_server_args.py on the
# controller (the sglang_service role renders command lines delegated to it: nothing here reads the host).
ARGUMENT_SPEC = {
    "model": {"type": "dict", "required": True},
    "variable": {"type": "str", "default": "sglang_service_models[0]"},
    "capabilities": {"type": "list", "elements": "str", "default": []},
    "group_hosts": {"type": "list", "elements": "str", "default": []},
    "hostname": {"type": "str", "default": ""},
    "rank0_address": {"type": "str", "default": ""},
    "python": {"type": "str", "default": "/opt/sglang/stacks/current/bin/python"},
    "launch_module": {"type": "str", "default": "sglang.launch_server"},
    "staged": {"type": "dict", "default": {}},
    "require_staged": {"type": "bool", "default": True},
}


def run(p):
    """The module's result for validated parameters (``failed`` and ``msg`` for an invalid entry)."""
    try:
        server = render(p["model"], p["capabilities"], p["group_hosts"], hostname=p["hostname"],
                        rank0_address=p["rank0_address"], prefix=p["variable"],
                        staged=p["staged"], require_staged=p["require_staged"])
    except ConfigError as exc:
        return {"failed": True, "msg": str(exc)}
    except Exception as exc:  # never a traceback: say what failed
        return {"failed": True, "msg": f"sglang_server_args failed unexpectedly: {type(exc).__name__}: {exc}"}
    server["exec_start"] = systemd_quote([p["python"], "-m", p["launch_module"], *server["args"]])
    return {"changed": False, **server}


def main():
    run_module(ARGUMENT_SPEC, run)


if __name__ == "__main__":
    main()
