#!/usr/bin/python
"""Ansible module: the SMG gateway's worker manifest (file discovery), rendered (read-only)."""

DOCUMENTATION = r"""
---
module: smg_manifest
short_description: Render the worker manifest SMG 1.13 reads with --discovery-provider file
description:
  - Builds the JSON manifest (version 1, a list of workers with id, url and worker_type) that SMG
    re-reads when it changes,
    from the replicas of a model, leaving out the workers taken out of rotation.
  - Returns the text to write (stable, the same workers give the same bytes), so writing it is an
    ordinary idempotent file task.
  - Never changes anything.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  workers:
    description:
      - The workers, each with C(id), C(address), C(port) and optionally C(worker_type) and
        C(model_id). Give this, or C(model) with the C(replica_*) lists.
    type: list
    elements: dict
  model:
    description: Name of the served-model entry the workers run (with the C(replica_*) lists).
    type: str
    default: ""
  replica_names:
    description: Inventory names of the replica hosts, in order.
    type: list
    elements: str
    default: []
  replica_addresses:
    description: Each replica's address (its ansible_host; empty falls back to the name).
    type: list
    elements: str
    default: []
  replica_models:
    description: Each replica's C(sglang_service_models).
    type: list
    elements: list
    default: []
  out_of_rotation:
    description: Workers to leave out (taken out of rotation), by id with C(workers), by replica host
      name with C(replica_names).
    type: list
    elements: str
    default: []
  model_id:
    description: Model id for every worker that sets none (empty lets SMG ask the worker).
    type: str
    default: ""
attributes:
  check_mode:
    support: full
    description: Read-only; runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing is changed, so there is no diff.
"""

EXAMPLES = r"""
- name: Render the manifest
  smg_manifest:
    workers:
      - {id: node1-main, address: 10.0.0.11, port: 30000}
      - {id: node2-main, address: 10.0.0.12, port: 30000}
    out_of_rotation: [node2-main]
  register: manifest
"""

RETURN = r"""
workers:
  description: The workers the manifest was built from (before out_of_rotation).
  returned: always
  type: list
  elements: dict
content:
  description: The manifest text to write.
  returned: always
  type: str
manifest:
  description: The manifest as data.
  returned: always
  type: dict
in_rotation:
  description: Worker ids in the manifest.
  returned: always
  type: list
  elements: str
left_out:
  description: Worker ids left out.
  returned: always
  type: list
  elements: str
left_out_workers:
  description: The workers left out, with the URL each would have in the manifest.
  returned: always
  type: list
  elements: dict
  contains:
    id:
      description: Worker id.
      type: str
    url:
      description: Worker URL.
      type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.smg_manifest import (
    ManifestError,
    build_manifest,
    render_manifest,
    worker_id,
    worker_url,
    workers_from_replicas,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "workers": {"type": "list", "elements": "dict"},
            "model": {"type": "str", "default": ""},
            "replica_names": {"type": "list", "elements": "str", "default": []},
            "replica_addresses": {"type": "list", "elements": "str", "default": []},
            "replica_models": {"type": "list", "elements": "list", "default": []},
            "out_of_rotation": {"type": "list", "elements": "str", "default": []},
            "model_id": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        workers, out = p["workers"], p["out_of_rotation"]
        if workers is None:
            workers = workers_from_replicas(p["replica_names"], p["replica_addresses"], p["replica_models"],
                                            p["model"])
            unknown = [h for h in out if h not in p["replica_names"]]
            if unknown:
                names = ", ".join(p["replica_names"])
                raise ManifestError(f"out of rotation: {', '.join(repr(h) for h in unknown)} is not a host "
                                    f"of sglang_service_gateway_replica_group ({names}); "
                                    f"check sglang_service_gateway_target")
            out = [worker_id(h, p["model"]) for h in out]
        manifest, kept, left = build_manifest(workers, out, p["model_id"])
    except ManifestError as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"smg_manifest failed unexpectedly: {type(exc).__name__}: {exc}")
    left_out_workers = [{"id": str(w["id"]), "url": worker_url(str(w["address"]), w["port"])}
                        for w in workers if str(w["id"]) in left]
    module.exit_json(changed=False, workers=workers, content=render_manifest(manifest), manifest=manifest,
                     in_rotation=kept, left_out=left, left_out_workers=left_out_workers)


if __name__ == "__main__":
    main()
