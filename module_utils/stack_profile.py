"""Stack profiles: the versions that belong together, checked, and the stack they name.

A profile (``profiles/<name>.yml``) is a plain mapping of versions and canonical index URLs. This module
validates it against one schema (an unknown key is an error naming it), checks that the torch build's
CUDA tag fits the toolkit, resolves a host's target capabilities, and computes the stack fingerprint:
sha256 over the canonical JSON of everything that decides what a stack holds. The stack directory is
``<profile>-<first 12 hex of the fingerprint>``, so a changed profile makes a new stack beside the old
one instead of changing it in place.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import difflib
import hashlib
import json
import os
import re

from ansible.module_utils.cuda_arch import ArchError, capability_tuple, parse_capability
from ansible.module_utils.sgl_kernel_build import BuildPlanError, cmake_args_defines

# Bumped when the meaning of the fingerprint inputs changes (every stack then gets a new name).
FINGERPRINT_VERSION = 1
DEFAULT_TARGETS = ("12.0", "10.0")
STACK_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*-[0-9a-f]{12}$")
_PROFILE_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_MAJOR_MINOR_RE = re.compile(r"^\d+\.\d+$")
_CUDA_TAG_RE = re.compile(r"^cu(\d+)(\d)$")
_CHANNEL_RE = re.compile(r"^(cu\d+|cpu|rocm[\d.]+|xpu)$")


class ProfileError(ValueError):
    """A profile that cannot be used; the message lists every problem found."""


def _leaf(kind, required=True, choices=None, pattern=None):
    return {"_leaf": True, "kind": kind, "required": required, "choices": choices, "pattern": pattern}


_VERSION = _leaf("str")
# The one profile schema. Keys not listed here are errors, so a typo never silently falls back to a
# default. sgl_kernel's keys mean what the sgl_kernel role (issue 8) says they mean.
SCHEMA = {
    "name": _leaf("str", pattern=_PROFILE_NAME_RE),
    "description": _leaf("str", required=False),
    "python": _leaf("str", pattern=_MAJOR_MINOR_RE),
    "cuda": {"version": _leaf("str", pattern=_MAJOR_MINOR_RE)},
    "torch": {"version": _VERSION, "cuda_tag": _leaf("str"), "index_url": _leaf("str")},
    "sgl_kernel": {
        "package": _leaf("str"),
        "version": _VERSION,
        "install": _leaf("str", choices=("auto", "wheel", "source")),
        "source": {"git_url": _leaf("str"), "ref": _leaf("str"), "archive_url": _leaf("str"),
                   "subdir": _leaf("str")},
        "build": {"enable_fa3": _leaf("bool"), "enable_below_sm90": _leaf("bool"),
                  "extra_cmake_args": _leaf("list")},
    },
    "sglang": {"version": _VERSION},
    "flashinfer": {"package": _leaf("str"), "version": _VERSION, "extras": _leaf("list")},
    "smg": {"version": _VERSION},
    "uv": {"version": _VERSION},
}

_KINDS = {"str": str, "bool": bool, "list": list}


def _describe(value):
    return f"{type(value).__name__} {value!r}"


def _check(value, schema, path, problems):
    if not isinstance(value, dict):
        problems.append(f"{path or 'the profile'} must be a mapping, got {_describe(value)}")
        return
    for key in sorted(value, key=str):
        if key not in schema:
            where = (path + ".") if path else ""
            hint = difflib.get_close_matches(str(key), list(schema), n=1)
            suggestion = f" (did you mean '{where}{hint[0]}'?)" if hint else ""
            under = f" under {path}" if path else ""
            problems.append(f"unknown key '{where}{key}'{suggestion}; known keys{under}: "
                            f"{', '.join(sorted(schema))}")
    for key, spec in schema.items():
        name = (path + "." + key) if path else key
        if key not in value:
            if not spec.get("_leaf") or spec["required"]:
                problems.append(f"missing key '{name}'")
            continue
        if not spec.get("_leaf"):
            _check(value[key], spec, name, problems)
            continue
        _check_leaf(value[key], spec, name, problems)


def _check_leaf(item, spec, name, problems):
    kind = _KINDS[spec["kind"]]
    if not isinstance(item, kind) or (kind is not bool and isinstance(item, bool)):
        quote = spec["kind"] == "str" and isinstance(item, (int, float))
        hint = f' (quote it: "{item}")' if quote else ""
        problems.append(f"{name} must be a {spec['kind']}, got {_describe(item)}{hint}")
        return
    if spec["kind"] == "list" and not all(isinstance(element, str) for element in item):
        problems.append(f"{name} must be a list of strings, got {item!r}")
    if spec["choices"] and item not in spec["choices"]:
        problems.append(f"{name} must be one of {', '.join(spec['choices'])}, got {item!r}")
    if spec["pattern"] and not spec["pattern"].match(item):
        problems.append(f"{name} has an invalid value {item!r}")


def cuda_tag_version(tag):
    """'cu130' -> '13.0', 'cu128' -> '12.8'; None for a tag that names no CUDA version."""
    match = _CUDA_TAG_RE.match(tag or "")
    return f"{match.group(1)}.{match.group(2)}" if match else None


def torch_cuda_problems(profile):
    """Why the profile's torch build does not fit its CUDA toolkit (empty list: it fits)."""
    torch, toolkit = profile["torch"], profile["cuda"]["version"]
    tag = torch["cuda_tag"]
    tag_version = cuda_tag_version(tag)
    if tag_version is None:
        return [f"torch.cuda_tag {tag!r} is not a CUDA build tag (cu130, cu129, cu128 ...): a CPU or ROCm "
                "torch cannot run SGLang's CUDA kernels"]
    problems = []
    tag_major, tag_minor = (int(part) for part in tag_version.split("."))
    major, minor = (int(part) for part in toolkit.split("."))
    if major != tag_major or minor < tag_minor:
        problems.append(
            f"torch.cuda_tag {tag} (CUDA {tag_version}) does not match cuda.version {toolkit}: extensions "
            f"built for this torch (sglang-kernel) need a toolkit of CUDA {tag_major}.x, at least "
            f"{tag_version}; change torch.cuda_tag and torch.index_url to the toolkit's build, or "
            f"cuda.version to {tag_version}")
    _, _, local = torch["version"].partition("+")
    if local and local != tag:
        problems.append(f"torch.version {torch['version']} carries the local tag +{local} but "
                        f"torch.cuda_tag is {tag}")
    channel = torch["index_url"].rstrip("/").rsplit("/", 1)[-1]
    if _CHANNEL_RE.match(channel) and channel != tag:
        problems.append(f"torch.index_url {torch['index_url']} serves {channel} builds but "
                        f"torch.cuda_tag is {tag}")
    return problems


def read_profile(path):
    """The profile in the YAML file ``path``; ProfileError naming the file (and line) when unusable.

    Controller side (PyYAML comes with ansible-core).
    """
    import yaml  # noqa: PLC0415 (only the controller reads profile files; hosts lack PyYAML)

    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise ProfileError(f"there is no profile {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfileError(f"{path} cannot be read: {exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ProfileError(f"{path} is not valid YAML{where}: {problem}") from None


def kernel_build_problems(profile):
    """Why the profile's sgl_kernel.build.extra_cmake_args cannot reach a build (empty list: they can),
    so that a bad one fails preflight instead of the source build."""
    try:
        cmake_args_defines(profile["sgl_kernel"]["build"]["extra_cmake_args"])
    except BuildPlanError as exc:
        return [str(exc)]
    return []


def validate_profile(profile, source="profile"):
    """Raise ProfileError naming every problem of ``profile`` (schema, then torch vs CUDA)."""
    problems = []
    _check(profile, SCHEMA, "", problems)
    if not problems:
        problems = torch_cuda_problems(profile) + kernel_build_problems(profile)
    if problems:
        raise ProfileError(f"{source}: {'; '.join(problems)}")
    return profile


def resolve_targets(inventory_capability=None, gpu_capabilities=(), defaults=DEFAULT_TARGETS):
    """(targets, source, notice): the inventory's gpu_capability, else the host's GPUs, else defaults.

    ``source`` is 'inventory', 'gpu' or 'default'; ``notice`` is a sentence when defaults were used.
    Capabilities are canonical "X.Y" strings sorted oldest first; ArchError for a bad one.
    """
    def canonical(values, what):
        try:
            found = {parse_capability(value, known_only=False) for value in values}
        except ArchError as exc:
            raise ArchError(f"{what}: {exc}") from None
        return sorted(found, key=capability_tuple)

    if inventory_capability not in (None, ""):
        return canonical([inventory_capability], "gpu_capability"), "inventory", None
    if gpu_capabilities:
        return canonical(gpu_capabilities, "GPU capability"), "gpu", None
    targets = canonical(defaults, "default target capabilities")
    notice = ("no gpu_capability in the inventory and no GPU seen on this host: targeting the default "
              f"capabilities {', '.join(targets)} (Blackwell); set gpu_capability to build for other GPUs")
    return targets, "default", notice


def fingerprint_inputs(profile, targets):
    """Everything that decides a stack's content, as a JSON-able dict (documented in the README)."""
    kernel = profile["sgl_kernel"]
    kernel_inputs = {"package": kernel["package"], "version": kernel["version"], "install": kernel["install"]}
    if kernel["install"] != "wheel":
        # a source build (or auto, which may build) is decided by its source and build settings too
        kernel_inputs["source"] = kernel["source"]
        kernel_inputs["build"] = kernel["build"]
    return {
        "fingerprint_version": FINGERPRINT_VERSION,
        "python": profile["python"],
        "cuda": profile["cuda"]["version"],
        "torch": {key: profile["torch"][key] for key in ("version", "cuda_tag", "index_url")},
        "sgl_kernel": kernel_inputs,
        "sglang": profile["sglang"]["version"],
        "flashinfer": profile["flashinfer"]["version"],
        "targets": sorted(targets, key=capability_tuple),
    }


def canonical_json(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def fingerprint(inputs):
    return hashlib.sha256(canonical_json(inputs).encode("ascii")).hexdigest()


def stack_name(profile_name, digest):
    return f"{profile_name}-{digest[:12]}"


def constraints(profile):
    """Lines of the stack's constraints file: the profile's pins that every install must keep."""
    pins = [("torch", profile["torch"]["version"]),
            (profile["sgl_kernel"]["package"], profile["sgl_kernel"]["version"]),
            ("sglang", profile["sglang"]["version"]),
            (profile["flashinfer"]["package"], profile["flashinfer"]["version"])]
    return [f"{name}=={version}" for name, version in pins]


def free_space(path):
    """(directory measured, bytes free for unprivileged writers) of ``path``.

    The path may not exist yet: its nearest existing parent is measured (the stack will live there).
    """
    probe = os.path.abspath(path)
    while not os.path.isdir(probe):
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    stat = os.statvfs(probe)
    return probe, stat.f_bavail * stat.f_frsize


def stacks_to_prune(stacks, current, keep, protect=()):
    """Names of the stacks to remove: all but ``current`` and ``keep`` others.

    The others kept are the protected ones first (``protect``: never removed, even beyond ``keep``), then
    the newest of the rest, so ``keep`` counts every old stack that stays: keep 2 with a protected
    previous stack keeps it and one more. ``stacks``: list of (name, mtime). Names that are not stack
    names are never returned.
    """
    if keep < 0:
        raise ValueError(f"stack_keep must be >= 0, got {keep}")
    old = [(mtime, name) for name, mtime in stacks if STACK_NAME_RE.match(name) and name != current]
    protected = [name for _mtime, name in old if name in protect]
    rest = sorted((item for item in old if item[1] not in protected), reverse=True)
    return sorted(name for _mtime, name in rest[max(keep - len(protected), 0):])
