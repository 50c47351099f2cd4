"""One host's served models (``sglang_service_models``), checked as a whole before anything changes.

Preflight runs this for every host: each entry through the same rules the service role renders it
with (``sglang_cmdline.render``: types, speculative settings, multi-node groups, and backends against
the host's target capabilities), then what only the whole list shows: two entries with one name (the
second would overwrite the first's unit) and two entries that serve HTTP on one port. Preflight runs
before the model_weights stage, so an entry that names ``weights`` / ``draft_weights`` has each source
checked (``model_weights.parse_source``) and is rendered with a stand-in for the directory it will be
staged in.

The capabilities are the stack's targets, resolved the way the stack role resolves them
(``stack_profile.resolve_targets``: the inventory's gpu_capability, else the host's GPUs, else the
default targets), so preflight refuses exactly what the service play would refuse after the stack
was built.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

from ansible.module_utils.cuda_arch import ArchError
from ansible.module_utils.model_weights import WeightsError, parse_source
from ansible.module_utils.sglang_cmdline import DEFAULT_PORT, ConfigError, render
from ansible.module_utils.stack_profile import DEFAULT_TARGETS, resolve_targets

VARIABLE = "sglang_service_models"
_SOURCES = {
    "inventory": "gpu_capability in the inventory",
    "gpu": "the host's GPUs",
    "default": "the default targets: no gpu_capability and no GPU seen",
}


def model_targets(gpu_capability="", gpu_capabilities=(), gpus_read=False, default_targets=DEFAULT_TARGETS,
                  capabilities=None):
    """(capabilities, where they come from) the entries are checked against.

    ``capabilities`` (sglang_service_capabilities set in the inventory) wins; else the stack's targets.
    Before the host's GPUs were read (``gpus_read`` false) only the inventory's gpu_capability is known:
    without it the result is ``([], None)`` and the backend rules wait for the GPU step.
    """
    if capabilities is not None:
        return list(capabilities), "sglang_service_capabilities"
    if not gpu_capability and not gpus_read:
        return [], None
    targets, source, _notice = resolve_targets(gpu_capability, gpu_capabilities, default_targets)
    return targets, _SOURCES[source]


def check_sources(model, prefix):
    """Check each weights source the entry names (``weights``, ``draft_weights``); ConfigError names it."""
    for key in ("weights", "draft_weights"):
        if model.get(key):
            try:
                parse_source(model[key], f"{prefix}.{key}")
            except WeightsError as exc:
                raise ConfigError(str(exc)) from None


def check_models(models, capabilities=(), groups=None, *, hostname=""):
    """Every problem with one host's model list, each naming the entry (at most one per entry, then clashes).

    ``groups``: inventory group -> hosts, for entries with ``nodes_group``. Addresses are not checked
    here (the service play renders them); rank 0's inventory name stands in for its address.
    """
    if not isinstance(models, list):
        return [f"{VARIABLE}: must be a list of model entries, got {type(models).__name__}"]
    groups = groups or {}
    problems, names, ports = [], {}, {}
    for index, model in enumerate(models):
        prefix = f"{VARIABLE}[{index}]"
        group_hosts = list(groups.get(model.get("nodes_group"), ())) if isinstance(model, dict) else []
        try:
            if isinstance(model, dict):
                check_sources(model, prefix)
            # before the weights stage: render stands a placeholder in for each directory to be staged
            server = render(model, capabilities, group_hosts, hostname=hostname,
                            rank0_address=group_hosts[0] if group_hosts else "", prefix=prefix,
                            require_staged=False)
        except ConfigError as exc:
            problems.append(str(exc))
            continue
        name = model["name"]
        if name in names:
            problems.append(f"{prefix}.name: {name!r} is also the name of {VARIABLE}[{names[name]}]; each "
                            f"model needs its own name (it names the unit sglang-{name}.service)")
        else:
            names[name] = index
        if not server["serves_http"]:
            continue  # a multi-node entry's other ranks serve no HTTP
        port = model.get("port") or DEFAULT_PORT
        if port in ports:
            other = ports[port]
            given = "" if model.get("port") else " (the default: port is not set)"
            problems.append(f"{prefix}.port: {port}{given} is also the port of {VARIABLE}[{other}] "
                            f"({models[other]['name']}); each model on a host needs its own port")
        else:
            ports[port] = index
    return problems


def check_host_models(host, models, groups=None, **targets):
    """{capabilities, source, problems}: check_models with the host's targets (model_targets' arguments),
    each problem naming the host and where its targets come from."""
    try:
        capabilities, source = model_targets(**targets)
    except ArchError as exc:
        return {"capabilities": [], "source": None, "problems": [f"host {host}: {exc}"]}
    where = f" (targets {', '.join(capabilities)} from {source})" if source else ""
    problems = [f"host {host}{where}: {problem}"
                for problem in check_models(models, capabilities, groups, hostname=host)]
    return {"capabilities": capabilities, "source": source, "problems": problems}
