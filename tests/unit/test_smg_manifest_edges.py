"""module_utils/smg_manifest, the edges: whole error messages, port bounds, worker types and model ids,
and which address a replica's worker is reached at."""

from __future__ import annotations

import pytest
from ansible.module_utils.smg_manifest import (
    ManifestError,
    build_manifest,
    render_manifest,
    worker_id,
    worker_url,
    workers_from_replicas,
)


def test_worker_url():
    assert worker_url("10.0.0.1", 30000) == "http://10.0.0.1:30000"
    assert worker_url("gpu-1", 1) == "http://gpu-1:1"
    assert worker_url("fd00::3", 8) == "http://[fd00::3]:8"


@pytest.mark.parametrize("port", [1, 65535])
def test_ports_at_the_bounds(port):
    manifest, _, _ = build_manifest([{"id": "a", "address": "h", "port": port}])
    assert manifest["workers"][0]["url"] == f"http://h:{port}"


@pytest.mark.parametrize("port", [0, 65536, True, None, 1.5])
def test_ports_out_of_bounds(port):
    with pytest.raises(ManifestError) as caught:
        build_manifest([{"id": "a", "address": "h", "port": 1}, {"id": "b", "address": "h", "port": port}])
    assert str(caught.value) == f"workers[1].port: must be an integer in 1..65535, got {port!r}"


@pytest.mark.parametrize("worker", [{"id": "", "address": "h", "port": 1}, {"address": "h", "port": 1},
                                    {"id": "a", "address": "", "port": 1}, ["a", "h", 1]])
def test_a_worker_needs_id_and_address(worker):
    with pytest.raises(ManifestError) as caught:
        build_manifest([worker])
    assert str(caught.value) == f"workers[0]: needs id and address, got {worker!r}"


def test_worker_types():
    workers = [{"id": "p", "address": "h", "port": 1, "worker_type": "prefill"},
               {"id": "d", "address": "h", "port": 2, "worker_type": "decode"},
               {"id": "e", "address": "h", "port": 3, "worker_type": "encode"},
               {"id": "r", "address": "h", "port": 4, "worker_type": "regular"}]
    manifest, _, _ = build_manifest(workers)
    assert [w["worker_type"] for w in manifest["workers"]] == ["prefill", "decode", "encode", "regular"]
    with pytest.raises(ManifestError) as caught:
        build_manifest([{"id": "x", "address": "h", "port": 1}, {"id": "y", "address": "h", "port": 1,
                                                                  "worker_type": "Regular"}])
    assert str(caught.value) == "workers[1].worker_type: one of regular, prefill, decode, encode"


def test_errors_name_every_offender_sorted():
    workers = [{"id": i, "address": "h", "port": 1} for i in ("c", "a", "c", "b", "a")]
    with pytest.raises(ManifestError) as caught:
        build_manifest(workers)
    assert str(caught.value) == "worker ids must be unique: a, c"
    unique = [{"id": i, "address": "h", "port": 1} for i in ("b", "a")]
    with pytest.raises(ManifestError) as caught:
        build_manifest(unique, ["z", "a", "y"])
    assert str(caught.value) == "out_of_rotation names no worker: y, z (workers: b, a)"


def test_ids_are_text_and_model_ids_per_worker_or_default():
    workers = [{"id": 7, "address": "h", "port": 1, "model_id": "own"},
               {"id": "b", "address": "h", "port": 2},
               {"id": "c", "address": "h", "port": 3, "model_id": ""}]
    manifest, kept, left = build_manifest(workers, ["7"], model_id="default")
    assert manifest == {"version": 1, "workers": [
        {"id": "b", "url": "http://h:2", "worker_type": "regular", "model_id": "default"},
        {"id": "c", "url": "http://h:3", "worker_type": "regular", "model_id": "default"}]}
    assert (kept, left) == (["b", "c"], ["7"])
    manifest, _, _ = build_manifest(workers)
    assert [w.get("model_id") for w in manifest["workers"]] == ["own", None, None]
    assert "model_id" not in manifest["workers"][1]


def test_everything_out_of_rotation():
    manifest, kept, left = build_manifest([{"id": "a", "address": "h", "port": 1}], ["a"])
    assert manifest == {"version": 1, "workers": []}
    assert (kept, left) == ([], ["a"])


def test_rendering_is_sorted_and_indented():
    assert render_manifest({"workers": [], "version": 1}) == '{\n  "version": 1,\n  "workers": []\n}\n'


def test_worker_id_keeps_what_a_file_name_may_hold():
    assert worker_id("Gpu_1.a-b", "m.v2") == "Gpu_1.a-b-m.v2"
    assert worker_id("h", "a:b@c") == "h-a-b-c"


def test_replica_addresses():
    models = [[{"name": "m", "host": "0.0.0.0"}], [{"name": "m", "host": "::", "port": 1}],
              [{"name": "m", "host": "10.1.0.3", "port": 2}], [{"name": "m", "host": "0.0.0.0", "port": 3}]]
    addresses = ["10.0.0.1", "fd00::2", "10.0.0.3", ""]
    workers = workers_from_replicas(["a", "b", "c", "d"], addresses, models, "m")
    assert workers == [{"id": "a-m", "address": "10.0.0.1", "port": 30000},
                       {"id": "b-m", "address": "fd00::2", "port": 1},
                       {"id": "c-m", "address": "10.1.0.3", "port": 2},
                       {"id": "d-m", "address": "d", "port": 3}]


def test_the_first_entry_of_the_name_counts():
    models = [["not a dict", {"name": "m", "host": "0.0.0.0", "port": 1},
               {"name": "m", "host": "0.0.0.0", "port": 2}]]
    assert workers_from_replicas(["a"], [""], models, "m")[0]["port"] == 1
    with pytest.raises(ManifestError, match=r"sglang_service_models\[2\] is multi-node"):
        workers_from_replicas(["a"], [""], [[{"name": "x"}, "y", {"name": "m", "nodes_group": "g"}]], "m")


@pytest.mark.parametrize("listen", ["127.0.0.1", "127.1.2.3", "localhost", "::1"])
def test_loopback_listeners_are_refused(listen):
    with pytest.raises(ManifestError) as caught:
        workers_from_replicas(["a", "b"], ["", ""], [[{"name": "m", "host": "0.0.0.0"}],
                                                     [{"name": "m", "host": listen}]], "m")
    assert str(caught.value) == (f"host b: sglang_service_models[0].host is {listen}; the gateway cannot "
                                 "reach it from another host: set it to 0.0.0.0 or the host's address")


def test_replica_errors_in_full():
    with pytest.raises(ManifestError) as caught:
        workers_from_replicas(["a"], [""], [None], "m")
    assert str(caught.value) == ("host a: sglang_service_models has no entry named 'm' "
                                 "(sglang_service_gateway_model)")
    with pytest.raises(ManifestError) as caught:
        workers_from_replicas(["a"], [""], [[{"name": "m", "nodes_group": "g"}]], "m")
    assert str(caught.value) == ("host a: sglang_service_models[0] is multi-node; put only its rank 0 host "
                                 "in sglang_service_gateway_replica_group")
    with pytest.raises(ManifestError) as caught:
        workers_from_replicas([], [], [], "m")
    assert str(caught.value) == "sglang_service_gateway_replica_group: the group has no hosts"
    with pytest.raises(ManifestError) as caught:
        workers_from_replicas(["a"], [""], [[]], "")
    assert str(caught.value) == ("sglang_service_gateway_model: set it to the name of the served-model entry "
                                 "the gateway fronts")
