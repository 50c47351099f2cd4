"""What a torch install was built for, asked of the environment's own interpreter.

torch is imported only in a child process (see python_probe). The arch list comes from
``torch._C._cuda_getArchFlags()`` when present: it is the compiled list on every CUDA build, GPU or not,
whereas ``torch.cuda.get_arch_list()`` returns ``[]`` on GPU-less hosts before torch 2.13. That list is
what torch was configured with (TORCH_CUDA_ARCH_LIST); its libraries may hold more cubins than it names.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

from ansible.module_utils.cuda_arch import ArchError, parse_arch, parse_capability, runs_on
from ansible.module_utils.python_probe import ProbeError, run_probe

# Runs in the inspected interpreter (stdlib + torch only, Python 3.8+); PRELUDE defines answer().
PROBE = r"""
import warnings
try:
    import torch
except ModuleNotFoundError as exc:
    if exc.name == "torch":
        answer({"error": "not-installed", "detail": str(exc), "executable": sys.executable})
    answer({"error": "import-failed", "detail": "%s: %s" % (type(exc).__name__, exc)})
except BaseException as exc:
    answer({"error": "import-failed", "detail": "%s: %s" % (type(exc).__name__, exc)})
if getattr(torch, "__file__", None) is None:
    answer({"error": "import-failed", "detail": "torch in %s is a directory without __init__.py (a namespace "
            "package, e.g. left over from an uninstall), not an installed torch" % ", ".join(torch.__path__)})


def facts():
    result = {
        "torch_version": str(torch.__version__),
        "cuda_version": getattr(torch.version, "cuda", None),
        "hip_version": getattr(torch.version, "hip", None),
        "git_version": getattr(torch.version, "git_version", None),
        "executable": sys.executable,
    }
    arch_flags = getattr(torch._C, "_cuda_getArchFlags", None)
    if arch_flags is not None:
        result["arch_list"] = (arch_flags() or "").split()
        result["arch_list_source"] = "torch._C._cuda_getArchFlags"
    else:
        result["arch_list"] = list(torch.cuda.get_arch_list())
        result["arch_list_source"] = "torch.cuda.get_arch_list"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            available = bool(torch.cuda.is_available())
            devices = []
            for index in range(torch.cuda.device_count() if available else 0):
                major, minor = torch.cuda.get_device_capability(index)
                devices.append({"index": index, "name": torch.cuda.get_device_name(index),
                                "capability": "%d.%d" % (major, minor)})
            result["cuda_error"] = None
        except Exception as exc:
            available, devices = False, []
            result["cuda_error"] = "%s: %s" % (type(exc).__name__, exc)
    result["cuda_available"] = available
    result["devices"] = devices
    result["cuda_warnings"] = sorted(set(str(w.message).strip() for w in caught))
    return result


# A torch that imports but lacks what every release has (__version__, torch.version, torch._C) is broken.
try:
    result = facts()
except Exception as exc:
    answer({"error": "import-failed", "detail": "%s: %s" % (type(exc).__name__, exc)})
answer(result)
"""


class TorchProbeError(Exception):
    """The environment cannot answer (no torch, broken torch, bad input); message says what to do."""


def probe_torch(python, timeout=120):
    """Facts about the torch installed for ``python`` (see PROBE for the keys)."""
    try:
        facts = run_probe(python, PROBE, timeout=timeout, what="the torch probe")
    except ProbeError as exc:
        raise TorchProbeError(str(exc)) from None
    error = facts.get("error")
    if error == "not-installed":
        raise TorchProbeError(
            f"torch is not installed for {facts.get('executable') or python} ({facts.get('detail')}); "
            "point python at the interpreter of the environment that has torch (e.g. <venv>/bin/python) "
            "or install torch there"
        )
    if error:
        raise TorchProbeError(f"import torch failed in {python}: {facts.get('detail')}; the install is "
                              "broken or incomplete: reinstall torch in that environment")
    facts["python"] = facts.pop("executable")
    facts["build"] = "rocm" if facts.get("hip_version") else ("cuda" if facts.get("cuda_version") else "cpu")
    return facts


def split_arch_list(arch_list):
    """(sass, ptx) from torch's arch list ("sm_90", "sm_90a", "compute_90"); other entries are ignored."""
    sass, ptx = [], []
    for entry in arch_list:
        try:
            kind, _arch = parse_arch(entry)
        except ArchError:
            continue  # e.g. gfx942 on a ROCm build: not a CUDA target
        if kind == "compute":
            ptx.append(entry)
        elif kind == "sm":
            sass.append(entry)
    return sass, ptx


def missing_capabilities(arch_list, capabilities):
    """The capabilities (canonical strings) that no entry of ``arch_list`` can run on."""
    sass, ptx = split_arch_list(arch_list)
    return [cap for cap in capabilities if not runs_on(sass, ptx, cap)]


def cuda_index_hint(facts, index_url):
    """Where a CUDA build of the same torch version comes from; the pip command when the index is known.

    The repository names no registry host: without ``index_url`` the hint describes the index.
    """
    version = facts["torch_version"].split("+", 1)[0]
    if index_url:
        return (f"Install a CUDA build from {index_url}, e.g. "
                f"`pip install --index-url {index_url} torch=={version}`")
    return (f"Install a CUDA build of torch {version}: the PyTorch CUDA wheel index serves them (its "
            f"whl/cu130 channel, or your mirror of it; set cuda_index_url for the exact command), and on "
            f"x86_64 torch=={version} from PyPI is a CUDA build too")


def check_requirements(facts, index_url=None):
    """Error message when torch cannot serve ``facts["require"]`` (see rate), else None."""
    require = facts["require"]
    if not require:
        return None
    where = f"torch {facts['torch_version']} in {facts['python']}"
    wanted = ", ".join(require)
    if facts["build"] == "cpu":
        return (f"{where} is a CPU build (torch.version.cuda is None): it cannot run on GPUs of capability "
                f"{wanted}. {cuda_index_hint(facts, index_url)}")
    if facts["build"] == "rocm":
        return (f"{where} is a ROCm build (HIP {facts['hip_version']}): it cannot run on NVIDIA GPUs of "
                f"capability {wanted}. {cuda_index_hint(facts, index_url)}")
    if facts["missing"]:
        arch_list = " ".join(facts["arch_list"]) or "(empty)"
        return (f"{where} (CUDA {facts['cuda_version']}) has no code for capability "
                f"{', '.join(facts['missing'])}: its arch list is {arch_list}. "
                "Install a torch build whose arch list covers it (newer torch/CUDA, or a build with "
                "TORCH_CUDA_ARCH_LIST including it)")
    return None


def rate(facts, require):
    """Add ``require``, ``missing`` (all of it for a non-CUDA build) and ``covered`` per device to facts."""
    arch_list = facts["arch_list"] if facts["build"] == "cuda" else []
    facts["require"] = list(require)
    facts["missing"] = list(require) if facts["build"] != "cuda" else missing_capabilities(arch_list, require)
    for device in facts.get("devices", []):
        try:
            capability = parse_capability(device["capability"], known_only=False)
            device["covered"] = not missing_capabilities(arch_list, [capability])
        except ArchError:
            device["covered"] = None
    return facts


def inspect_torch(python, require=(), timeout=120):
    """probe_torch, rated for ``require`` (canonical capabilities)."""
    return rate(probe_torch(python, timeout=timeout), require)


# What an answer of probe_torch always holds, with the type each must have.
_ANSWER_KEYS = (("python", str), ("torch_version", str), ("build", str), ("arch_list", list),
                ("devices", list))


def rate_answer(answer, require=()):
    """An earlier answer of probe_torch (stack_facts returns it as ``torch_probe``), checked and rated for
    ``require`` like inspect_torch, without importing torch again. The answer is not changed."""
    if not isinstance(answer, dict):
        raise TorchProbeError(f"probe must be an answer of the torch probe (a mapping), got "
                              f"{type(answer).__name__}: pass the torch_probe that stack_facts returns, or "
                              "python to probe the interpreter")
    for key, kind in _ANSWER_KEYS:
        if not isinstance(answer.get(key), kind):
            raise TorchProbeError(f"probe is not an answer of the torch probe: its {key} is "
                                  f"{answer.get(key)!r}, not a {kind.__name__}; pass the torch_probe that "
                                  "stack_facts returns, or python to probe the interpreter")
    if answer["build"] not in ("cuda", "cpu", "rocm"):
        raise TorchProbeError(f"probe is not an answer of the torch probe: its build is {answer['build']!r}, "
                              "not cuda, cpu or rocm")
    for device in answer["devices"]:
        if not isinstance(device, dict) or not isinstance(device.get("capability"), str):
            raise TorchProbeError(f"probe is not an answer of the torch probe: device {device!r} has no "
                                  "capability string")
    rated = {**answer, "devices": [dict(device) for device in answer["devices"]]}
    return rate(rated, require)
