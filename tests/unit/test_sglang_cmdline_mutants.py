"""module_utils/sglang_cmdline: the details the mutation run (bench/mutation_score.py) found untested.

Every rejection word for word (the message is the user's only guide), the limits of every bounded
value, whole rendered command lines, and systemd quoting character by character.
"""

from __future__ import annotations

import pytest
from ansible.module_utils.sglang_cmdline import MODEL_KEYS, ConfigError, probe_host, render, systemd_quote

P = "sglang_service_models[0]"
BASE = {"name": "m", "model_path": "/m"}


def message(model, *args, **kwargs):
    with pytest.raises(ConfigError) as info:
        render(model, *args, **kwargs)
    return str(info.value)


def model(**extra):
    return dict(BASE, **extra)


def test_minimal_entry_whole_render():
    assert render(model()) == {
        "args": ["--model-path", "/m", "--host", "127.0.0.1", "--port", "30000", "--tp-size", "1"],
        "env": {}, "rank": 0, "nnodes": 1, "serves_http": True, "port": 30000, "probe_host": "127.0.0.1"}


def test_full_entry_whole_render():
    entry = model(host="0.0.0.0", port=8000, tp_size=2, served_model_name="served", mem_fraction_static=0.8,
                  attention_backend="flashinfer", moe_runner_backend="cutlass", cuda_graph_max_bs_decode=64,
                  cuda_graph=False,
                  speculative={"algorithm": "EAGLE3", "draft_model_path": "/d", "num_steps": 3,
                               "eagle_topk": 1, "num_draft_tokens": 4},
                  extra_args=["--log-level", "debug"], env={"A": "1"})
    assert render(entry, ["9.0"]) == {"args": [
        "--model-path", "/m", "--host", "0.0.0.0", "--port", "8000", "--tp-size", "2",
        "--served-model-name", "served", "--mem-fraction-static", "0.8", "--attention-backend", "flashinfer",
        "--moe-runner-backend", "cutlass", "--cuda-graph-max-bs-decode", "64",
        "--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled",
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "/d",
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4",
        "--log-level", "debug"], "env": {"A": "1"}, "rank": 0, "nnodes": 1, "serves_http": True,
        "port": 8000, "probe_host": "127.0.0.1"}


@pytest.mark.parametrize(("listen", "probe"), [
    ("0.0.0.0", "127.0.0.1"), ("::", "127.0.0.1"), ("10.0.0.7", "10.0.0.7"), ("127.0.0.2", "127.0.0.2"),
    ("fd00::7", "fd00::7"), ("0.0.0.0.", "0.0.0.0."), (":::", ":::")])
def test_probe_host_is_loopback_for_a_wildcard_only(listen, probe):
    assert probe_host(listen) == probe


def _where(server):
    return server["port"], server["probe_host"]


def test_port_and_probe_host_follow_the_entry():
    # the drain and the readiness gate read these: the entry's own port and where this host reaches it
    assert _where(render(model(host="::", port=1))) == (1, "127.0.0.1")
    assert _where(render(model(host="10.1.2.3", port=65535))) == (65535, "10.1.2.3")
    assert _where(render(model(host="", port=None))) == (30000, "127.0.0.1")
    assert render(model(port=8080))["args"][4:6] == ["--port", "8080"]
    assert isinstance(render(model(port=8080))["port"], int)


def test_nextn_without_draft_model_or_tuning():
    args = render(model(speculative={"algorithm": "NEXTN"}))["args"]
    assert args[-2:] == ["--speculative-algorithm", "NEXTN"]


def test_cuda_graph_true_and_mem_fraction_zero_point_five():
    args = render(model(cuda_graph=True, mem_fraction_static=0.5))["args"]
    assert args[-2:] == ["--mem-fraction-static", "0.5"]
    assert "--cuda-graph-backend-decode" not in args


@pytest.mark.parametrize(("capabilities", "tp", "workaround", "pcie"), [
    (["12.0"], 2, None, True), (["12.1", "12.0"], 4, True, True), (["12.0"], 2, False, False),
    (["12.0"], 1, None, False), (["12.0", "10.0"], 2, None, False), ([], 2, None, False)])
def test_pcie_workaround(capabilities, tp, workaround, pcie):
    entry = model(tp_size=tp, env={"NCCL_DEBUG": "INFO"})
    if workaround is not None:
        entry["pcie_allreduce_workaround"] = workaround
    server = render(entry, capabilities)
    if pcie:
        assert server["env"] == {"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "INFO"}
        assert server["args"][-1] == "--disable-custom-all-reduce"
    else:
        assert server["env"] == {"NCCL_DEBUG": "INFO"}
        assert "--disable-custom-all-reduce" not in server["args"]


def test_the_entry_env_wins_over_the_workaround():
    server = render(model(tp_size=2, env={"NCCL_P2P_DISABLE": "0"}), ["12.0"])
    assert server["env"] == {"NCCL_P2P_DISABLE": "0"}


@pytest.mark.parametrize(("capabilities", "mla", "attention"), [
    (["12.0"], True, "triton"), (["12.0", "12.1"], True, "triton"), (["12.0", "10.0"], True, None),
    ([], True, None), (["12.0"], False, None)])
def test_mla_on_pcie_only_gpus_gets_triton(capabilities, mla, attention):
    args = render(model(mla=mla), capabilities)["args"]
    if attention:
        assert args[-2:] == ["--attention-backend", attention]
    else:
        assert "--attention-backend" not in args
    # an explicit backend is kept
    assert render(model(mla=mla, attention_backend="flashinfer"), capabilities)["args"][-1] == "flashinfer"


def test_not_a_mapping():
    assert message(["m"]) == f"{P}: must be a mapping, got list"
    assert message("m", prefix="x[1]") == "x[1]: must be a mapping, got str"


def test_unknown_key_names_the_first_and_lists_the_known():
    assert message(model(zz=1, aa=2)) == f"{P}.aa: unknown key (known: {', '.join(sorted(MODEL_KEYS))})"


@pytest.mark.parametrize("name", [None, 1, "", "M", "-m", "a" * 41, "a_b", "a.b"])
def test_bad_names(name):
    assert message(model(name=name)) == (f"{P}.name: must be 1-40 lowercase letters, digits or '-' (it names "
                                         f"the systemd unit), got {name!r}")


@pytest.mark.parametrize("name", ["m", "0", "a" * 40, "a-1"])
def test_good_names(name):
    assert render(model(name=name))["rank"] == 0


@pytest.mark.parametrize("path", [None, "", "  ", 3])
def test_bad_model_path(path):
    assert message(model(model_path=path)) == (f"{P}.model_path: required (a local path or a Hugging Face "
                                               "id)")


@pytest.mark.parametrize(("key", "low", "high"), [("port", 1, 65535), ("tp_size", 1, 1024),
                                                  ("cuda_graph_max_bs_decode", 1, 4096),
                                                  ("dist_init_port", 1, 65535)])
def test_integer_limits(key, low, high):
    for good in (low, high):
        render(model(**{key: good}))
    for bad in (low - 1, high + 1, True, "8", 2.0):
        assert message(model(**{key: bad})) == f"{P}.{key}: must be an integer in {low}..{high}, got {bad!r}"


@pytest.mark.parametrize("fraction", [0, 1, 1.5, -0.1, True, "0.5"])
def test_bad_mem_fraction(fraction):
    assert message(model(mem_fraction_static=fraction)) == (
        f"{P}.mem_fraction_static: must be a number between 0 and 1 (exclusive), got {fraction!r}")


@pytest.mark.parametrize("key", ["pcie_allreduce_workaround", "mla", "cuda_graph"])
def test_booleans(key):
    assert message(model(**{key: "false"})) == (f"{P}.{key}: must be a boolean (true/false, unquoted), "
                                                "got 'false'")
    assert message(model(**{key: 0})) == f"{P}.{key}: must be a boolean (true/false, unquoted), got 0"


@pytest.mark.parametrize("extra", ["--x", ["--x", 1], {"--x": 1}])
def test_extra_args_must_be_strings(extra):
    assert message(model(extra_args=extra)) == f"{P}.extra_args: must be a list of strings, got {extra!r}"


@pytest.mark.parametrize("arg", ["--port", "--port=1", "--speculative-algorithm=EAGLE", "--dist-init-addr"])
def test_extra_args_cannot_repeat_owned_flags(arg):
    flag = arg.split("=")[0]
    assert message(model(extra_args=["--log-level", "info", arg])) == (
        f"{P}.extra_args: {flag} is rendered by the role; set the matching entry key instead")


def test_extra_args_with_an_equals_sign_pass():
    assert render(model(extra_args=["--chat-template=a=b"]))["args"][-1] == "--chat-template=a=b"


@pytest.mark.parametrize("env", [["A=1"], {"A": 1}, {1: "a"}])
def test_env_must_map_strings(env):
    assert message(model(env=env)) == f"{P}.env: must map names to strings, got {env!r}"


S = f"{P}.speculative"
EAGLE = {"algorithm": "EAGLE", "draft_model_path": "/d"}


@pytest.mark.parametrize(("spec", "expected"), [
    ("EAGLE", f"{S}: must be a mapping (algorithm, draft_model_path, num_steps, eagle_topk, "
              "num_draft_tokens), got 'EAGLE'"),
    (dict(EAGLE, zz=1, aa=1), f"{S}.aa: unknown key"),
    ({"algorithm": "eagle"}, f"{S}.algorithm: one of EAGLE3, EAGLE, NEXTN, got 'eagle'"),
    ({}, f"{S}.algorithm: one of EAGLE3, EAGLE, NEXTN, got None"),
    ({"algorithm": "EAGLE3"}, f"{S}.draft_model_path: required with algorithm EAGLE3"),
    ({"algorithm": "EAGLE", "draft_model_path": ""}, f"{S}.draft_model_path: required with algorithm EAGLE"),
    (dict(EAGLE, num_steps=3), f"{S}: num_steps, eagle_topk and num_draft_tokens go together or not at all "
                               "(given num_steps; missing eagle_topk, num_draft_tokens)"),
    (dict(EAGLE, eagle_topk=1, num_draft_tokens=2), f"{S}: num_steps, eagle_topk and num_draft_tokens go "
     "together or not at all (given eagle_topk, num_draft_tokens; missing num_steps)"),
    (dict(EAGLE, num_steps=0, eagle_topk=1, num_draft_tokens=1),
     f"{S}.num_steps: must be a positive integer, got 0"),
    (dict(EAGLE, num_steps=1, eagle_topk=True, num_draft_tokens=1), f"{S}.eagle_topk: must be a positive "
                                                                   "integer, got True"),
    (dict(EAGLE, num_steps=1, eagle_topk=1, num_draft_tokens="2"), f"{S}.num_draft_tokens: must be a "
                                                                  "positive integer, got '2'"),
    (dict(EAGLE, num_steps=3, eagle_topk=2, num_draft_tokens=8), f"{S}.num_draft_tokens: at most num_steps * "
                                                                "eagle_topk + 1 (7), got 8"),
])
def test_speculative_rejections(spec, expected):
    assert message(model(speculative=spec)) == expected


def test_speculative_limits_that_pass():
    args = render(model(speculative=dict(EAGLE, num_steps=3, eagle_topk=2, num_draft_tokens=7)))["args"]
    assert args[-6:] == ["--speculative-num-steps", "3", "--speculative-eagle-topk", "2",
                         "--speculative-num-draft-tokens", "7"]
    nextn = {"algorithm": "NEXTN", "num_steps": 1, "eagle_topk": 1, "num_draft_tokens": 1}
    assert render(model(speculative=nextn))["args"][-8:-6] == ["--speculative-algorithm", "NEXTN"]


def backend_message(option, backend, found, name="m"):
    (key, instead), (wrong, runs_on, what) = option, found
    return (f"{P}.{key}: {backend} has no kernels for capability {wrong} (model {name!r}): sglang 0.5.23 "
            f"runs it on {runs_on} ({what}). Leave {key} unset (sglang picks one for the GPU) or set one "
            f"that runs there: {instead}")


ATTENTION = ("attention_backend", "flashinfer or triton")
MOE = ("moe_runner_backend", "auto or triton")


# Every rule of BACKEND_MAJORS, each on the nearest capability outside it (sglang 0.5.23's own checks)
@pytest.mark.parametrize(("option", "backend", "capabilities", "found"), [
    (ATTENTION, "fa3", ["12.0", "9.0", "10.0"], ("12.0, 10.0", "8.x, 9.x only", "FlashAttention 3")),
    (ATTENTION, "fa3", ["7.5"], ("7.5", "8.x, 9.x only", "FlashAttention 3")),
    (ATTENTION, "trtllm_mha", ["8.9", "11.0"], ("8.9, 11.0", "9.x, 10.x, 12.x only", "TensorRT-LLM MHA")),
    (ATTENTION, "trtllm_mla", ["9.0"], ("9.0", "10.x, 11.x, 12.x only", "TensorRT-LLM MLA")),
    (ATTENTION, "cutedsl_mla", ["12.0", "11.0", "9.0"], ("12.0, 11.0, 9.0", "10.x only", "CuteDSL MLA")),
    (ATTENTION, "tokenspeed_mla", ["12.1"], ("12.1", "10.x only", "CuteDSL MLA")),
    (ATTENTION, "hpc_ops", ["10.0", "8.0"], ("10.0, 8.0", "9.x only", "HPC-Ops")),
    (ATTENTION, "aiter", ["9.0"], ("9.0", "no NVIDIA GPU", "an AMD ROCm backend")),
    (ATTENTION, "wave", ["12.0"], ("12.0", "no NVIDIA GPU", "an AMD ROCm backend")),
    (ATTENTION, "ascend", ["10.0"], ("10.0", "no NVIDIA GPU", "an Ascend NPU backend")),
    (ATTENTION, "intel_xpu", ["8.6"], ("8.6", "no NVIDIA GPU", "an Intel GPU backend")),
    (ATTENTION, "intel_amx", ["12.0"], ("12.0", "no NVIDIA GPU", "an Intel AMX CPU backend")),
    (MOE, "hpc_ops", ["12.0"], ("12.0", "9.x only", "HPC-Ops")),
    (MOE, "aiter", ["9.0"], ("9.0", "no NVIDIA GPU", "an AMD ROCm backend")),
    (MOE, "intel_xpu", ["10.0"], ("10.0", "no NVIDIA GPU", "an Intel GPU backend")),
])
def test_backend_for_other_gpus(option, backend, capabilities, found):
    assert message(model(**{option[0]: backend}), capabilities) == backend_message(option, backend, found)


def test_fa3_on_ampere_is_for_mha_models_only():
    assert render(model(attention_backend="fa3", mla=False), ["8.0", "8.6", "9.0"])["args"][-1] == "fa3"
    assert message(model(name="ds", attention_backend="fa3", mla=True), ["8.6", "9.0", "8.0"]) == (
        backend_message(ATTENTION, "fa3", ("8.6, 8.0", "9.x only", "FlashAttention 3 with an MLA model"),
                        name="ds"))


def test_attention_rule_checked_before_the_moe_rule():
    entry = model(attention_backend="fa3", moe_runner_backend="hpc_ops")
    assert message(entry, ["12.0"]).startswith(f"{P}.attention_backend: fa3 ")
    assert message(model(attention_backend="triton", moe_runner_backend="hpc_ops"), ["12.0"]).startswith(
        f"{P}.moe_runner_backend: hpc_ops ")


@pytest.mark.parametrize(("key", "backend", "capabilities"), [
    ("attention_backend", "fa3", ["9.0", "8.0"]), ("attention_backend", "fa3", ["8.9"]),
    ("attention_backend", "fa3", ["9.0"]), ("attention_backend", "trtllm_mla", ["10.3", "11.0", "12.1"]),
    ("attention_backend", "trtllm_mha", ["9.0", "10.0", "12.0"]),
    ("attention_backend", "cutedsl_mla", ["10.3"]),
    ("attention_backend", "hpc_ops", ["9.0"]), ("attention_backend", "triton", ["12.0"]),
    ("attention_backend", "flashinfer", ["7.5"]), ("attention_backend", "fa3", []),
    ("attention_backend", "aiter", []), ("moe_runner_backend", "hpc_ops", ["9.0"]),
    ("moe_runner_backend", "triton", ["12.0"]), ("moe_runner_backend", "fa3", ["12.0"])])
def test_backend_that_fits(key, backend, capabilities):
    flag = "--" + key.replace("_", "-")
    args = render(model(**{key: backend}), capabilities)["args"]
    assert args[args.index(flag) + 1] == backend


G = model(nodes_group="g", tp_size=4)


def test_multinode_rejections_word_for_word():
    assert message(G, (), (), hostname="a") == f"{P}.nodes_group: inventory group 'g' has no hosts"
    assert message(G, (), ["a", "b"], hostname="c", rank0_address="10.0.0.1") == (
        f"{P}.nodes_group: this host (c) is not in group 'g' (a, b)")
    assert message(dict(G, tp_size=3), (), ["a", "b"], hostname="a", rank0_address="10.0.0.1") == (
        f"{P}.tp_size: 3 must be a multiple of the number of nodes in 'g' (2): each node runs tp_size / "
        "nnodes ranks")
    assert message(dict(G, tp_size=None), (), ["a", "b"], hostname="a", rank0_address="10.0.0.1").startswith(
        f"{P}.tp_size: 1 must be a multiple")
    assert message(G, (), ["a", "b"], hostname="b") == (
        f"{P}.nodes_group: no address for rank 0 (a); set its ansible_host")


def test_multinode_render():
    server = render(dict(G, dist_init_port=6000, extra_args=["--x"]), (), ["a", "b"], hostname="b",
                    rank0_address="fd00::1")
    assert server["args"][8:] == ["--nnodes", "2", "--node-rank", "1", "--dist-init-addr", "[fd00::1]:6000",
                                  "--x"]
    assert (server["rank"], server["nnodes"], server["serves_http"]) == (1, 2, False)
    assert _where(server) == (30000, "127.0.0.1")  # its rank 0's port, not served on this host
    one = render(dict(G, tp_size=3), (), ["a"], hostname="a", rank0_address="10.0.0.1")
    assert one["args"][-6:] == ["--nnodes", "1", "--node-rank", "0", "--dist-init-addr", "10.0.0.1:50000"]
    assert render(dict(G, nodes_group=""))["nnodes"] == 1


@pytest.mark.parametrize(("argv", "line"), [
    (["a", "b"], "a b"),
    (["A-z_0@%+=:,./9"], "A-z_0@%%+=:,./9"),
    (["a b"], '"a b"'),
    (["$X"], '"$$X"'),
    (['say "hi"'], '"say \\"hi\\""'),
    (["back\\slash"], '"back\\\\slash"'),
    (["50% off"], '"50%% off"'),
    ([""], '""'),
    (["x\ny"], '"x\\ny"'),                   # a line break is written as its C escape
])
def test_systemd_quote_exact(argv, line):
    assert systemd_quote(argv) == line


def test_an_owned_flag_is_found_before_the_first_equals_sign():
    assert message(model(extra_args=["--port=a=b"])) == (
        f"{P}.extra_args: --port is rendered by the role; set the matching entry key instead")


def test_a_group_without_a_hostname_names_the_empty_host():
    assert message(G, (), ["a"], rank0_address="10.0.0.1") == (
        f"{P}.nodes_group: this host () is not in group 'g' (a)")
