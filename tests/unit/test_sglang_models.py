"""module_utils/sglang_models: one host's served models checked as a whole, every message word for word."""

from __future__ import annotations

import pytest
from ansible.module_utils.sglang_cmdline import ConfigError
from ansible.module_utils.sglang_models import check_host_models, check_models, check_sources, model_targets

M = "sglang_service_models"
FA3_ON_12 = (f"{M}[0].attention_backend: fa3 has no kernels for capability 12.0 (model 'chat'): "
             "sglang 0.5.23 runs it on 8.x, 9.x only (FlashAttention 3). Leave attention_backend unset "
             "(sglang picks one for the GPU) or set one that runs there: flashinfer or triton")


def entry(name="chat", **extra):
    return {"name": name, "model_path": "/m", **extra}


def test_a_clean_list_has_no_problems():
    models = [entry(port=30000, attention_backend="fa3"), entry("embed", port=30001),
              entry("big", port=30002, nodes_group="g", tp_size=2)]
    assert check_models(models, ["9.0"], {"g": ["h1", "h2"]}, hostname="h1") == []
    assert check_models([]) == []


def test_not_a_list():
    assert check_models({"name": "chat"}) == [f"{M}: must be a list of model entries, got dict"]
    assert check_models("chat") == [f"{M}: must be a list of model entries, got str"]


def test_each_entry_goes_through_the_service_rules_and_all_are_reported():
    models = [entry(attention_backend="fa3"), "oops", entry("x", port="30000"), entry("ok", port=30005)]
    assert check_models(models, ["12.0"]) == [
        FA3_ON_12,
        f"{M}[1]: must be a mapping, got str",
        f"{M}[2].port: must be an integer in 1..65535, got '30000'",
    ]


def test_backends_unchecked_without_capabilities():
    assert check_models([entry(attention_backend="fa3")]) == []


def test_same_name_twice():
    models = [entry(port=1), entry("b", port=2), entry(port=3), entry("b", port=4)]
    assert check_models(models) == [
        f"{M}[2].name: 'chat' is also the name of {M}[0]; each model needs its own name (it names the unit "
        "sglang-chat.service)",
        f"{M}[3].name: 'b' is also the name of {M}[1]; each model needs its own name (it names the unit "
        "sglang-b.service)",
    ]


def test_same_port_twice():
    models = [entry("a", port=8001), entry("b", port=8002), entry("c", port=8001), entry("d", port=8002)]
    assert check_models(models) == [
        f"{M}[2].port: 8001 is also the port of {M}[0] (a); each model on a host needs its own port",
        f"{M}[3].port: 8002 is also the port of {M}[1] (b); each model on a host needs its own port",
    ]


def test_unset_ports_are_the_default_and_clash():
    models = [entry("a"), entry("b", port=30000), entry("c")]
    assert check_models(models) == [
        f"{M}[1].port: 30000 is also the port of {M}[0] (a); each model on a host needs its own port",
        f"{M}[2].port: 30000 (the default: port is not set) is also the port of {M}[0] (a); each model on a "
        "host needs its own port",
    ]


def test_a_name_clash_is_reported_with_a_port_clash_of_the_same_entry():
    assert check_models([entry(), entry()]) == [
        f"{M}[1].name: 'chat' is also the name of {M}[0]; each model needs its own name (it names the unit "
        "sglang-chat.service)",
        f"{M}[1].port: 30000 (the default: port is not set) is also the port of {M}[0] (chat); each model "
        "on a host needs its own port",
    ]


def test_other_ranks_of_a_multinode_model_serve_no_http():
    models = [entry("big", nodes_group="g", tp_size=2), entry("small")]
    groups = {"g": ["h1", "h2"]}
    assert check_models(models, (), groups, hostname="h2") == []
    assert check_models(models, (), groups, hostname="h1") == [
        f"{M}[1].port: 30000 (the default: port is not set) is also the port of {M}[0] (big); each model "
        "on a host needs its own port"]


def test_multinode_entries_use_the_inventory_groups():
    assert check_models([entry(nodes_group="g")], hostname="h1") == [
        f"{M}[0].nodes_group: inventory group 'g' has no hosts"]
    assert check_models([entry(nodes_group="g")], (), {"g": ["h2"]}, hostname="h1") == [
        f"{M}[0].nodes_group: this host (h1) is not in group 'g' (h2)"]
    assert check_models([entry(nodes_group="g", tp_size=3)], (), {"g": ["h1", "h2"]}, hostname="h1") == [
        f"{M}[0].tp_size: 3 must be a multiple of the number of nodes in 'g' (2): each node runs "
        "tp_size / nnodes ranks"]


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, ([], None)),
    ({"gpu_capabilities": ["9.0"]}, ([], None)),
    ({"gpu_capability": "12.0"}, (["12.0"], "gpu_capability in the inventory")),
    ({"gpu_capability": "12.0", "gpus_read": True, "gpu_capabilities": ["9.0"]},
     (["12.0"], "gpu_capability in the inventory")),
    ({"gpus_read": True, "gpu_capabilities": ["12.0", "9.0"]}, (["9.0", "12.0"], "the host's GPUs")),
    ({"gpus_read": True}, (["10.0", "12.0"], "the default targets: no gpu_capability and no GPU seen")),
    ({"gpus_read": True, "default_targets": ["8.0"]},
     (["8.0"], "the default targets: no gpu_capability and no GPU seen")),
    ({"gpu_capability": "12.0", "capabilities": ["9.0"]}, (["9.0"], "sglang_service_capabilities")),
    ({"capabilities": []}, ([], "sglang_service_capabilities")),
])
def test_model_targets(kwargs, expected):
    assert model_targets(**kwargs) == expected


def test_host_check_names_the_host_and_the_targets():
    assert check_host_models("bw-01", [entry(attention_backend="fa3")], gpu_capability="12.0") == {
        "capabilities": ["12.0"], "source": "gpu_capability in the inventory",
        "problems": [f"host bw-01 (targets 12.0 from gpu_capability in the inventory): {FA3_ON_12}"]}
    assert check_host_models("h1", [entry(), entry()], {}) == {
        "capabilities": [], "source": None,
        "problems": [f"host h1: {M}[1].name: 'chat' is also the name of {M}[0]; each model needs its own "
                     "name (it names the unit sglang-chat.service)",
                     f"host h1: {M}[1].port: 30000 (the default: port is not set) is also the port of {M}[0] "
                     "(chat); each model on a host needs its own port"]}


def test_host_check_on_the_host_group_and_several_targets():
    result = check_host_models("h1", [entry(attention_backend="fa3", nodes_group="g")], {"g": ["h1"]},
                               gpus_read=True, gpu_capabilities=["12.0", "10.0"])
    assert result["problems"] == [
        f"host h1 (targets 10.0, 12.0 from the host's GPUs): {M}[0].attention_backend: fa3 has no kernels "
        "for capability 10.0, 12.0 (model 'chat'): sglang 0.5.23 runs it on 8.x, 9.x only "
        "(FlashAttention 3). Leave attention_backend unset (sglang picks one for the GPU) or set one that "
        "runs there: flashinfer or triton"]


def test_host_check_with_a_bad_capability_is_a_problem_not_a_traceback():
    assert check_host_models("h1", [entry()], gpus_read=True, gpu_capabilities=["x.y"]) == {
        "capabilities": [], "source": None,
        "problems": ["host h1: GPU capability: 'x.y' is not a CUDA architecture; use a capability like "
                     "\"12.0\" or \"120\", or an arch like \"sm_120a\", \"sm_100f\", \"compute_90\""]}


def test_entries_after_another_rank_are_still_checked():
    models = [entry("big", nodes_group="g", tp_size=2), entry("a", port=1), entry("b", port=1)]
    assert check_models(models, (), {"g": ["h1", "h2"]}, hostname="h2") == [
        f"{M}[2].port: 1 is also the port of {M}[1] (a); each model on a host needs its own port"]


def test_without_a_hostname_no_group_holds_the_host():
    assert check_models([entry(nodes_group="g")], (), {"g": ["h1"]}) == [
        f"{M}[0].nodes_group: this host () is not in group 'g' (h1)"]


def test_host_check_passes_the_groups_and_the_host_on():
    assert check_host_models("h2", [entry(nodes_group="g", tp_size=2)], {"g": ["h1", "h2"]}) == {
        "capabilities": [], "source": None, "problems": []}


HUB = {"repo": "org/m", "revision": "v1"}


def test_entries_with_weights_pass_before_anything_is_staged():
    """Preflight runs before the model_weights stage: a weights source stands for its directory."""
    models = [entry(weights=HUB, port=1),
              entry("spec", port=2, weights={"path": "/data/t"}, draft_weights={"path": "/data/d"},
                    speculative={"algorithm": "EAGLE3", "num_steps": 3, "eagle_topk": 1,
                                 "num_draft_tokens": 4})]
    assert check_models(models, ["12.0"]) == []


def test_check_sources_passes_good_sources_and_names_a_bad_one():
    assert check_sources(entry(), f"{M}[0]") is None
    assert check_sources(entry(weights=HUB, draft_weights={"path": "/d"}), f"{M}[0]") is None
    with pytest.raises(ConfigError, match=r"^sglang_service_models\[3\]\.draft_weights\.path: must"):
        check_sources(entry(weights=HUB, draft_weights={"path": "d"}), f"{M}[3]")
    with pytest.raises(ConfigError, match=r"^sglang_service_models\[0\]\.weights\.revision: main is a"):
        check_sources(entry(weights={"repo": "org/m", "revision": "main"}), f"{M}[0]")


def test_a_bad_weights_source_is_a_problem_naming_the_entry():
    models = [entry(weights={"repo": "org/m", "revision": "main"}),
              entry("b", port=2, weights=HUB, draft_weights={"path": "rel"})]
    assert check_models(models) == [
        f"{M}[0].weights.revision: main is a branch and moves; pin a commit sha or a tag",
        f"{M}[1].draft_weights.path: must be an absolute path, got 'rel'",
    ]
