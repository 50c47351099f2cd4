#!/usr/bin/python
"""Ansible module: the units and batches of a rolling rebuild (computes only; changes nothing)."""

DOCUMENTATION = r"""
---
module: rollout_units
short_description: Group the hosts of a rolling rebuild into units and batches
description:
  - A unit is one host, or every host of a model that spans several (an entry of C(sglang_service_models)
    with C(nodes_group), SGLang's multi-node tensor parallel, one node rank per host of that group). A
    unit's hosts leave rotation, switch stacks and restart together; hosts joined by models sharing hosts
    form one unit.
  - C(serial) counts units per batch (a number, or a percentage of the units, rounded down and at least 1);
    C(batches) gives the batch sizes in hosts for the play keyword C(serial), in the order of C(order).
  - Fails, naming each, for a model whose C(nodes_group) has a host that is not among C(hosts) (its ranks
    cannot restart together), or that names a group without the host; and for a C(serial) that is not a
    positive number or a percentage.
  - Changes nothing; reads only its options (run it on the controller).
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  hosts:
    description: The hosts to roll, in the order to roll them.
    type: list
    elements: str
    required: true
  models:
    description: Each host's C(sglang_service_models) (a host without models may be left out).
    type: dict
    default: {}
  groups:
    description: The inventory's groups (C(groups)), host names per group.
    type: dict
    required: true
  serial:
    description: Units per batch, a number or a percentage such as C("25%") (C(rolling_rebuild_serial)).
    type: raw
    default: 1
attributes:
  check_mode:
    support: full
    description: Changes nothing; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
"""

EXAMPLES = r"""
- name: Group the hosts to roll into units and batches
  rollout_units:
    hosts: [node1, node2, node3]
    models:
      node1: [{name: chat, model_path: /models/chat, port: 30000}]
      node2: [{name: big, model_path: /models/big, port: 30010, tp_size: 16, nodes_group: big_tp}]
      node3: [{name: big, model_path: /models/big, port: 30010, tp_size: 16, nodes_group: big_tp}]
    groups: "{{ groups }}"
    serial: 1
  delegate_to: localhost
  run_once: true
  register: rollout
"""

RETURN = r"""
units:
  description: The units, each a list of hosts, in the order they are rolled.
  returned: success
  type: list
  elements: list
  sample: [[node1], [node2, node3]]
order:
  description: Every host, unit after unit (the order of the play that rolls them).
  returned: success
  type: list
  elements: str
batches:
  description: Hosts per batch, in order (the play keyword C(serial) as a list).
  returned: success
  type: list
  elements: int
  sample: [1, 2]
batch_hosts:
  description: The hosts of each batch.
  returned: success
  type: list
  elements: list
unit_of:
  description: Per host, the hosts of its unit (itself alone for a host without a multi-node model).
  returned: success
  type: dict
"""

from ansible.module_utils.module_entry import run_module
from ansible.module_utils.rollout_units import UnitsError, plan

# One specification for both ways in: run_module here, action_plugins/rollout_units.py on the
# controller (the roles run this plan delegated to it).
ARGUMENT_SPEC = {
    "hosts": {"type": "list", "elements": "str", "required": True},
    "models": {"type": "dict", "default": {}},
    "groups": {"type": "dict", "required": True},
    "serial": {"type": "raw", "default": 1},
}


def run(p):
    """The module's result for validated parameters (``failed`` and ``msg`` when no plan can be made)."""
    try:
        result = plan(p["hosts"], p["models"] or {}, p["groups"], p["serial"])
    except UnitsError as exc:
        return {"failed": True, "msg": f"{exc}. Nothing was changed."}
    return {"changed": False, **result}


def main():
    run_module(ARGUMENT_SPEC, run)


if __name__ == "__main__":
    main()
