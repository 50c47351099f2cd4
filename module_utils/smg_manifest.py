"""The worker manifest that SMG (Shepherd Model Gateway) 1.13.0 reads with ``--discovery-provider file``.

Format, as smg 1.13.0 itself accepts and rejects it (checked against the released binary: a wrong
version is "unsupported version 2; this gateway reads version 1", an unknown key lists the known ones):

    {"version": 1, "workers": [{"id": "...", "url": "http://host:port", "worker_type": "regular",
                                "model_id": "..."}, ...]}

Worker keys smg knows: id, url, worker_type (regular|prefill|decode|encode), bootstrap_port, model_id,
kv_connector, kv_role, kv_engine_id. smg re-reads the file when it changes, so dropping a worker from
it takes the worker out of rotation and adding it back puts it back.

Stdlib only, Python 3.8+.
"""

import json
import re

MANIFEST_VERSION = 1
WORKER_TYPES = ("regular", "prefill", "decode", "encode")


class ManifestError(ValueError):
    pass


def worker_url(address, port):
    host = f"[{address}]" if ":" in address else address
    return f"http://{host}:{port}"


def build_manifest(workers, out_of_rotation=(), model_id=""):
    """The manifest for ``workers`` ([{"id", "address", "port"}]) minus the ids in ``out_of_rotation``.

    Returns (manifest dict, ids in rotation, ids left out). Ids must be unique; a name in
    ``out_of_rotation`` that is no worker is an error (a typo would otherwise keep the host serving).
    """
    ids = []
    for i, worker in enumerate(workers):
        if not isinstance(worker, dict) or not worker.get("id") or not worker.get("address"):
            raise ManifestError(f"workers[{i}]: needs id and address, got {worker!r}")
        port = worker.get("port")
        if not isinstance(port, int) or isinstance(port, bool) or not 1 <= port <= 65535:
            raise ManifestError(f"workers[{i}].port: must be an integer in 1..65535, got {port!r}")
        if worker.get("worker_type", "regular") not in WORKER_TYPES:
            raise ManifestError(f"workers[{i}].worker_type: one of {', '.join(WORKER_TYPES)}")
        ids.append(str(worker["id"]))
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ManifestError(f"worker ids must be unique: {', '.join(duplicates)}")
    unknown = sorted(set(out_of_rotation) - set(ids))
    if unknown:
        raise ManifestError(f"out_of_rotation names no worker: {', '.join(unknown)} "
                            f"(workers: {', '.join(ids)})")
    entries = []
    for worker in workers:
        if str(worker["id"]) in out_of_rotation:
            continue
        entry = {"id": str(worker["id"]), "url": worker_url(str(worker["address"]), worker["port"]),
                 "worker_type": worker.get("worker_type", "regular")}
        if worker.get("model_id") or model_id:
            entry["model_id"] = worker.get("model_id") or model_id
        entries.append(entry)
    kept = [e["id"] for e in entries]
    return ({"version": MANIFEST_VERSION, "workers": entries}, kept,
            [i for i in ids if i not in kept])


def render_manifest(manifest):
    """Stable text (sorted keys, newline at the end): an unchanged worker set is an unchanged file."""
    return json.dumps(manifest, indent=2, sort_keys=True) + "\n"


_ID_RE = re.compile(r"[^A-Za-z0-9_.-]")


def worker_id(hostname, model_name):
    return _ID_RE.sub("-", f"{hostname}-{model_name}")


def workers_from_replicas(names, addresses, models_per_host, model):
    """The workers serving entry ``model`` on each replica host (inventory order).

    ``addresses``: each host's ansible_host ('' falls back to the name); ``models_per_host``: each
    host's sglang_service_models. A host without the entry, or whose entry listens on loopback (the
    gateway on another host could not reach it), is an error naming the host and the variable.
    """
    if not model:
        raise ManifestError("sglang_service_gateway_model: set it to the name of the served-model entry "
                            "the gateway fronts")
    if not names:
        raise ManifestError("sglang_service_gateway_replica_group: the group has no hosts")
    workers = []
    for name, address, models in zip(names, addresses, models_per_host):
        matches = [(i, m) for i, m in enumerate(models or [])
                   if isinstance(m, dict) and m.get("name") == model]
        if not matches:
            raise ManifestError(f"host {name}: sglang_service_models has no entry named {model!r} "
                                f"(sglang_service_gateway_model)")
        index, entry = matches[0]
        if entry.get("nodes_group"):
            raise ManifestError(f"host {name}: sglang_service_models[{index}] is multi-node; put only "
                                f"its rank 0 host in sglang_service_gateway_replica_group")
        listen = entry.get("host", "127.0.0.1")
        if listen.startswith("127.") or listen in ("localhost", "::1"):
            raise ManifestError(f"host {name}: sglang_service_models[{index}].host is {listen}; the "
                                f"gateway cannot reach it from another host: set it to 0.0.0.0 or the "
                                f"host's address")
        target = address or name
        if listen not in ("0.0.0.0", "::"):
            target = listen
        workers.append({"id": worker_id(name, model), "address": target, "port": entry.get("port", 30000)})
    return workers
