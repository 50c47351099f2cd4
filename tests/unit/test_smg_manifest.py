"""module_utils/smg_manifest: the file-discovery manifest of smg 1.13.0 (format checked against the
released binary; tests/integration/fleet/test_sglang_gateway.py runs the real smg on it)."""

from __future__ import annotations

import json

import pytest
from ansible.module_utils.smg_manifest import (
    ManifestError,
    build_manifest,
    render_manifest,
    worker_id,
    workers_from_replicas,
)

WORKERS = [{"id": "a-main", "address": "10.0.0.1", "port": 30000},
           {"id": "b-main", "address": "10.0.0.2", "port": 30001},
           {"id": "c-main", "address": "fd00::3", "port": 30000}]


def test_all_in_rotation():
    manifest, kept, left = build_manifest(WORKERS)
    assert manifest == {"version": 1, "workers": [
        {"id": "a-main", "url": "http://10.0.0.1:30000", "worker_type": "regular"},
        {"id": "b-main", "url": "http://10.0.0.2:30001", "worker_type": "regular"},
        {"id": "c-main", "url": "http://[fd00::3]:30000", "worker_type": "regular"}]}
    assert kept == ["a-main", "b-main", "c-main"]
    assert left == []


def test_out_of_rotation_is_left_out_and_comes_back():
    manifest, _kept, left = build_manifest(WORKERS, ["b-main"])
    assert [w["id"] for w in manifest["workers"]] == ["a-main", "c-main"]
    assert left == ["b-main"]
    assert render_manifest(build_manifest(WORKERS, [])[0]) == render_manifest(build_manifest(WORKERS)[0])


def test_text_is_stable_json():
    text = render_manifest(build_manifest(WORKERS, model_id="llama")[0])
    assert text.endswith("\n")
    assert json.loads(text)["workers"][0]["model_id"] == "llama"
    assert text == render_manifest(json.loads(text))


@pytest.mark.parametrize(("workers", "out", "message"), [
    (WORKERS, ["typo"], "out_of_rotation names no worker: typo"),
    ([*WORKERS, WORKERS[0]], [], "unique: a-main"),
    ([{"id": "x", "address": "h", "port": "30000"}], [], "workers[0].port"),
    ([{"id": "x", "port": 1}], [], "workers[0]: needs id and address"),
    ([{"id": "x", "address": "h", "port": 1, "worker_type": "router"}], [], "worker_type"),
])
def test_rejects(workers, out, message):
    with pytest.raises(ManifestError) as exc:
        build_manifest(workers, out)
    assert message in str(exc.value)


def test_worker_id():
    assert worker_id("gpu-1.example", "main") == "gpu-1.example-main"
    assert worker_id("a b", "m/x") == "a-b-m-x"


def test_workers_from_replicas():
    models = [[{"name": "main", "model_path": "/m", "host": "0.0.0.0", "port": 30001}],
              [{"name": "other", "model_path": "/o"},
               {"name": "main", "model_path": "/m", "host": "10.9.0.2"}]]
    workers = workers_from_replicas(["a", "b"], ["10.0.0.1", ""], models, "main")
    assert workers == [{"id": "a-main", "address": "10.0.0.1", "port": 30001},
                       {"id": "b-main", "address": "10.9.0.2", "port": 30000}]


@pytest.mark.parametrize(("models", "model", "message"), [
    ([[{"name": "x"}]], "main", "host a: sglang_service_models has no entry named 'main'"),
    ([[{"name": "main"}]], "main", "host a: sglang_service_models[0].host is 127.0.0.1"),
    ([[{"name": "main", "host": "0.0.0.0", "nodes_group": "g"}]], "main", "multi-node"),
    ([[]], "", "sglang_service_gateway_model"),
])
def test_workers_from_replicas_rejects(models, model, message):
    with pytest.raises(ManifestError) as exc:
        workers_from_replicas(["a"], [""], models, model)
    assert message in str(exc.value)
