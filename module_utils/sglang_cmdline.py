"""The SGLang server's command line and environment, rendered from one served-model entry.

Spellings are those of the pinned release (sglang 0.5.23): ``--cuda-graph-max-bs`` is ambiguous there
(``--cuda-graph-max-bs-decode``/``-prefill``), ``--disable-cuda-graph`` is deprecated
(``--cuda-graph-backend-decode disabled``). Every rule that rejects an entry names the variable, so the
role can stop before it renders a unit. The tests parse what this renders with the real sglang parser.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import re

LAUNCH_MODULE = "sglang.launch_server"
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")

# Backends that sglang 0.5.23 runs only on some GPU generations, as (option, backend) -> (capability majors
# it runs on, what it is). Every rule is one sglang itself enforces at start (the server exits with it);
# checking it here stops a run before anything changes. Source (sglang 0.5.23, python/sglang/srt/):
# - fa3: layers/attention/attention_registry.py, create_flashattention_v3_backend: major 8 (not for
#   MLA models) or 9.
# - trtllm_mha: arg_groups/attention_hook.py, handle_attention_backend_compatibility: SM90, SM100 or
#   SM120 (is_sm90/is_sm100/is_sm120 = major 9, 10, 12: utils/common.py, _check_cuda_device_version).
# - trtllm_mla: arg_groups/overrides.py, _mla_kv_cache_dtype_checks: is_blackwell (major 10, 11, 12).
# - cutedsl_mla (tokenspeed_mla is its alias): arg_groups/overrides.py, _cutedsl_prefill_backend_fill:
#   is_sm100 (major 10).
# - hpc_ops: layers/attention/hpc_ops_backend.py, HPCOpsAttnBackend.__init__, and for MoE
#   layers/moe/moe_runner/runner.py, MoeRunner.__init__: major 9 ("the HPC-Ops kernels ship sm90a only").
# - aiter, wave (AMD), ascend (Ascend NPU), intel_xpu (Intel GPU), intel_amx (CPU): other platforms'
#   backends (arg_groups/choices.py, ATTENTION_BACKEND_CHOICES / MOE_RUNNER_BACKEND_CHOICES), no NVIDIA
#   kernels at all.
# Backends not listed (flashinfer, triton, torch_native, flex_attention, fa4, flashmla, ...) have no
# capability rule in sglang 0.5.23's own checks; the kernel's arches are the sgl_kernel role's scan.
BACKEND_MAJORS = {
    ("attention_backend", "fa3"): ((8, 9), "FlashAttention 3"),
    ("attention_backend", "trtllm_mha"): ((9, 10, 12), "TensorRT-LLM MHA"),
    ("attention_backend", "trtllm_mla"): ((10, 11, 12), "TensorRT-LLM MLA"),
    ("attention_backend", "cutedsl_mla"): ((10,), "CuteDSL MLA"),
    ("attention_backend", "tokenspeed_mla"): ((10,), "CuteDSL MLA"),
    ("attention_backend", "hpc_ops"): ((9,), "HPC-Ops"),
    ("attention_backend", "aiter"): ((), "an AMD ROCm backend"),
    ("attention_backend", "wave"): ((), "an AMD ROCm backend"),
    ("attention_backend", "ascend"): ((), "an Ascend NPU backend"),
    ("attention_backend", "intel_xpu"): ((), "an Intel GPU backend"),
    ("attention_backend", "intel_amx"): ((), "an Intel AMX CPU backend"),
    ("moe_runner_backend", "hpc_ops"): ((9,), "HPC-Ops"),
    ("moe_runner_backend", "aiter"): ((), "an AMD ROCm backend"),
    ("moe_runner_backend", "intel_xpu"): ((), "an Intel GPU backend"),
}
# FA3 on Ampere (major 8) is for MHA models only (attention_registry.py, create_flashattention_v3_backend).
FA3_MLA_MAJORS = (9,)
# What runs on every NVIDIA capability, to suggest instead.
PORTABLE_BACKENDS = {"attention_backend": "flashinfer or triton", "moe_runner_backend": "auto or triton"}
DEFAULT_PORT = 30000
# GPUs without NVLink: tensor parallel all-reduce goes over PCIe (RTX PRO 6000, RTX 5090, GB10).
PCIE_ONLY_CAPABILITIES = ("12.0", "12.1")
# Listen addresses that mean "every address": the host's own probes use loopback for them.
WILDCARD_HOSTS = ("0.0.0.0", "::")
# Upstream's workaround for TP over PCIe with IOMMU/ACS (NCCL hangs on the first all-reduce, custom
# all-reduce then spins): peer-to-peer off for NCCL, and sglang's custom all-reduce off.
PCIE_TP_ENV = {"NCCL_P2P_DISABLE": "1"}
PCIE_TP_ARGS = ["--disable-custom-all-reduce"]
EAGLE_TUNING = ("num_steps", "eagle_topk", "num_draft_tokens")
SPECULATIVE_ALGORITHMS = ("EAGLE3", "EAGLE", "NEXTN")
# An entry's weights sources and the key of model_weights_staged each one's local directory is under.
STAGED_PATH_KEYS = (("weights", "model_path"), ("draft_weights", "draft_model_path"))
MODEL_KEYS = {
    "name", "model_path", "port", "host", "tp_size", "mem_fraction_static", "attention_backend",
    "moe_runner_backend", "served_model_name", "cuda_graph_max_bs_decode", "cuda_graph", "speculative",
    "pcie_allreduce_workaround", "mla", "extra_args", "env", "nodes_group", "dist_init_port",
    "weights", "draft_weights",
}
# flags the role renders itself: given in extra_args they would contradict the rendered ones
OWNED_FLAGS = ("--model-path", "--host", "--port", "--tp-size", "--nnodes", "--node-rank",
               "--dist-init-addr", "--speculative-algorithm")


class ConfigError(ValueError):
    """An invalid served-model entry; the message names the variable."""


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _var(prefix, key):
    return f"{prefix}.{key}"


def _check_types(model, prefix):
    unknown = sorted(set(model) - MODEL_KEYS)
    if unknown:
        raise ConfigError(f"{_var(prefix, unknown[0])}: unknown key "
                          f"(known: {', '.join(sorted(MODEL_KEYS))})")
    name = model.get("name")
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError(f"{_var(prefix, 'name')}: must be 1-40 lowercase letters, digits or '-' "
                          f"(it names the systemd unit), got {name!r}")
    if not isinstance(model.get("model_path"), str) or not model["model_path"].strip():
        raise ConfigError(f"{_var(prefix, 'model_path')}: required (a local path or a Hugging Face id)")
    limits = (("port", 1, 65535), ("tp_size", 1, 1024), ("cuda_graph_max_bs_decode", 1, 4096),
              ("dist_init_port", 1, 65535))
    for key, low, high in limits:
        value = model.get(key)
        if value is not None and not (_is_int(value) and low <= value <= high):
            raise ConfigError(f"{_var(prefix, key)}: must be an integer in {low}..{high}, got {model[key]!r}")
    fraction = model.get("mem_fraction_static")
    if fraction is not None and not (isinstance(fraction, (int, float)) and not isinstance(fraction, bool)
                                     and 0 < fraction < 1):
        raise ConfigError(f"{_var(prefix, 'mem_fraction_static')}: must be a number between 0 and 1 "
                          f"(exclusive), got {fraction!r}")
    for key in ("pcie_allreduce_workaround", "mla", "cuda_graph"):
        if model.get(key) is not None and not isinstance(model[key], bool):
            raise ConfigError(f"{_var(prefix, key)}: must be a boolean (true/false, unquoted), "
                              f"got {model[key]!r}")
    extra = model.get("extra_args", [])
    if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
        raise ConfigError(f"{_var(prefix, 'extra_args')}: must be a list of strings, got {extra!r}")
    for arg in extra:
        flag = arg.split("=", 1)[0]
        if flag in OWNED_FLAGS:
            raise ConfigError(f"{_var(prefix, 'extra_args')}: {flag} is rendered by the role; set the "
                              f"matching entry key instead")
    env = model.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, str)
                                            for k, v in env.items()):
        raise ConfigError(f"{_var(prefix, 'env')}: must map names to strings, got {env!r}")


def _check_speculative(spec, prefix):
    var = _var(prefix, "speculative")
    if not isinstance(spec, dict):
        raise ConfigError(f"{var}: must be a mapping (algorithm, draft_model_path, num_steps, eagle_topk, "
                          f"num_draft_tokens), got {spec!r}")
    unknown = sorted(set(spec) - {"algorithm", *EAGLE_TUNING, "draft_model_path"})
    if unknown:
        raise ConfigError(f"{var}.{unknown[0]}: unknown key")
    if spec.get("algorithm") not in SPECULATIVE_ALGORITHMS:
        raise ConfigError(f"{var}.algorithm: one of {', '.join(SPECULATIVE_ALGORITHMS)}, "
                          f"got {spec.get('algorithm')!r}")
    if spec["algorithm"].startswith("EAGLE") and not spec.get("draft_model_path"):
        raise ConfigError(f"{var}.draft_model_path: required with algorithm {spec['algorithm']}")
    given = [k for k in EAGLE_TUNING if spec.get(k) is not None]
    if given and len(given) != len(EAGLE_TUNING):
        missing = [k for k in EAGLE_TUNING if k not in given]
        raise ConfigError(f"{var}: num_steps, eagle_topk and num_draft_tokens go together or not at all "
                          f"(given {', '.join(given)}; missing {', '.join(missing)})")
    for key in given:
        if not (_is_int(spec[key]) and spec[key] >= 1):
            raise ConfigError(f"{var}.{key}: must be a positive integer, got {spec[key]!r}")
    if given and spec["num_draft_tokens"] > spec["num_steps"] * spec["eagle_topk"] + 1:
        raise ConfigError(f"{var}.num_draft_tokens: at most num_steps * eagle_topk + 1 "
                          f"({spec['num_steps'] * spec['eagle_topk'] + 1}), got {spec['num_draft_tokens']}")


def _majors_text(majors):
    return ", ".join(f"{major}.x" for major in majors) + " only" if majors else "no NVIDIA GPU"


def _check_backends(model, capabilities, prefix):
    for key in ("attention_backend", "moe_runner_backend"):
        backend = model.get(key)
        rule = BACKEND_MAJORS.get((key, backend))
        if not rule:
            continue
        majors, what = rule
        if backend == "fa3" and model.get("mla"):
            majors, what = FA3_MLA_MAJORS, "FlashAttention 3 with an MLA model"
        wrong = [c for c in capabilities if int(c.split(".")[0]) not in majors]
        if wrong:
            raise ConfigError(f"{_var(prefix, key)}: {backend} has no kernels for capability "
                              f"{', '.join(wrong)} (model {model['name']!r}): sglang 0.5.23 runs it on "
                              f"{_majors_text(majors)} ({what}). Leave {key} unset (sglang picks one for "
                              f"the GPU) or set one that runs there: {PORTABLE_BACKENDS[key]}")


def _multinode(model, group_hosts, hostname, rank0_address, prefix):
    """(nnodes, rank, dist-init address) or None for a single-node entry."""
    group = model.get("nodes_group")
    if not group:
        return None
    var = _var(prefix, "nodes_group")
    if not group_hosts:
        raise ConfigError(f"{var}: inventory group {group!r} has no hosts")
    if hostname not in group_hosts:
        raise ConfigError(f"{var}: this host ({hostname}) is not in group {group!r} "
                          f"({', '.join(group_hosts)})")
    nnodes = len(group_hosts)
    tp_size = model.get("tp_size") or 1
    if nnodes > 1 and tp_size % nnodes:
        raise ConfigError(f"{_var(prefix, 'tp_size')}: {tp_size} must be a multiple of the number of "
                          f"nodes in {group!r} ({nnodes}): each node runs tp_size / nnodes ranks")
    if not rank0_address:
        raise ConfigError(f"{var}: no address for rank 0 ({group_hosts[0]}); set its ansible_host")
    port = model.get("dist_init_port") or 50000
    host = f"[{rank0_address}]" if ":" in rank0_address else rank0_address
    return nnodes, group_hosts.index(hostname), f"{host}:{port}"


def unstaged_path(key):
    """What stands for the directory of ``key`` (weights, draft_weights) where only the addresses and
    ports of a rendering are read: preflight (before the weights stage) and the entry points that gate,
    probe, drain or restart units already written."""
    return f"/staged-by-model_weights/{key}"


def apply_staged(model, staged, prefix, require):
    """The entry with the weights the model_weights role staged: ``--model-path`` (and the draft's) the
    local directory, the served name kept (the entry's model_path, else the repository), and the Hub
    offline, so a restart never reaches the network. ``require``: an entry not in ``staged`` is an error
    (writing a unit); else its directory is ``unstaged_path``."""
    if not isinstance(model, dict) or not (model.get("weights") or model.get("draft_weights")):
        return model
    here = (staged or {}).get(model.get("name"), {})
    model = dict(model)
    for key, path_key in STAGED_PATH_KEYS:
        if not model.get(key):
            continue
        if not here.get(path_key):
            if require:
                raise ConfigError(f"{_var(prefix, key)}: not staged on this host; run the model_weights "
                                  f"role before sglang_service (playbooks/site.yml does)")
            here = dict(here, **{path_key: unstaged_path(key)})
        if key == "weights":
            if not model.get("served_model_name"):
                named = model.get("model_path") or (model["weights"] or {}).get("repo")
                if named:
                    model["served_model_name"] = named
            model["model_path"] = here[path_key]
        else:
            model["speculative"] = dict(model.get("speculative") or {}, draft_model_path=here[path_key])
    model["env"] = dict(model.get("env") or {}, HF_HUB_OFFLINE="1")
    return model


def render(model, capabilities=(), group_hosts=(), *, hostname="", rank0_address="",
           prefix="sglang_service_models[0]", staged=None, require_staged=True):
    """The server for one entry: {"args", "env", "rank", "nnodes", "serves_http", "port", "probe_host"}.

    ``args`` follow ``python -m sglang.launch_server``. ``capabilities`` are the host's target GPU
    capabilities ("12.0"); ``group_hosts`` the ordered hosts of the entry's ``nodes_group`` and
    ``rank0_address`` the first one's address. Raises ConfigError naming the variable.
    """
    if not isinstance(model, dict):
        raise ConfigError(f"{prefix}: must be a mapping, got {type(model).__name__}")
    model = apply_staged(model, staged, prefix, require_staged)
    _check_types(model, prefix)
    if model.get("speculative") is not None:
        _check_speculative(model["speculative"], prefix)
    capabilities = list(capabilities or ())
    _check_backends(model, capabilities, prefix)
    tp_size = model.get("tp_size") or 1
    host, port = model.get("host") or "127.0.0.1", model.get("port") or DEFAULT_PORT
    args = ["--model-path", model["model_path"], "--host", host, "--port", str(port),
            "--tp-size", str(tp_size)]
    env = {}
    if model.get("served_model_name"):
        args += ["--served-model-name", model["served_model_name"]]
    if model.get("mem_fraction_static") is not None:
        args += ["--mem-fraction-static", str(model["mem_fraction_static"])]
    attention = model.get("attention_backend")
    pcie_only = bool(capabilities) and all(c in PCIE_ONLY_CAPABILITIES for c in capabilities)
    if not attention and model.get("mla") and pcie_only:
        attention = "triton"  # MLA models on SM120: the backend upstream documents for that arch
    if attention:
        args += ["--attention-backend", attention]
    if model.get("moe_runner_backend"):
        args += ["--moe-runner-backend", model["moe_runner_backend"]]
    if model.get("cuda_graph_max_bs_decode"):
        args += ["--cuda-graph-max-bs-decode", str(model["cuda_graph_max_bs_decode"])]
    if model.get("cuda_graph") is False:
        args += ["--cuda-graph-backend-decode", "disabled", "--cuda-graph-backend-prefill", "disabled"]
    spec = model.get("speculative")
    if spec:
        args += ["--speculative-algorithm", spec["algorithm"]]
        if spec.get("draft_model_path"):
            args += ["--speculative-draft-model-path", spec["draft_model_path"]]
        if spec.get("num_steps") is not None:
            args += ["--speculative-num-steps", str(spec["num_steps"]),
                     "--speculative-eagle-topk", str(spec["eagle_topk"]),
                     "--speculative-num-draft-tokens", str(spec["num_draft_tokens"])]
    multinode = _multinode(model, list(group_hosts or ()), hostname, rank0_address, prefix)
    rank, nnodes = 0, 1
    if multinode:
        nnodes, rank, init = multinode
        args += ["--nnodes", str(nnodes), "--node-rank", str(rank), "--dist-init-addr", init]
    workaround = model.get("pcie_allreduce_workaround")
    if tp_size > 1 and pcie_only and workaround is not False:
        env.update(PCIE_TP_ENV)
        args += PCIE_TP_ARGS
    args += model.get("extra_args", [])
    env.update(model.get("env", {}))
    return {"args": args, "env": env, "rank": rank, "nnodes": nnodes, "serves_http": rank == 0,
            "port": port, "probe_host": probe_host(host)}


def probe_host(host):
    """Where this host's own probes reach a server listening on ``host``: loopback for a wildcard."""
    return "127.0.0.1" if host in WILDCARD_HOSTS else host


_SAFE = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def systemd_quote(argv):
    """A command line for ExecStart=: each word double-quoted when needed, '$' and '%' escaped."""
    words = []
    for raw in argv:
        word = raw.replace("%", "%%")
        if _SAFE.fullmatch(word):
            words.append(word)
        else:
            quoted = word.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$")
            # a unit file line ends at a line break, quotes or not: systemd reads the C escape back
            words.append('"' + quoted.replace("\n", "\\n").replace("\r", "\\r") + '"')
    return " ".join(words)
