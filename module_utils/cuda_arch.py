"""CUDA architecture names and compatibility rules, kept in one place.

Every module, role check and test that asks "does this code run on that GPU?" uses these functions.
Capabilities are always strings ("12.0"), never floats: YAML reads 12.1 and 12.10 as the same float, and
a float loses the difference between "12.0" and "12".

Rules (see shared upstream facts and the CUDA compatibility guide):
- SASS ``sm_XY`` runs on devices of the same major with minor >= Y.
- SASS ``sm_XYa`` (arch-specific) runs only on exactly X.Y.
- SASS ``sm_XYf`` (family) runs on the family members: same major, minor >= Y (sm_100f: 10.0, 10.3;
  sm_120f: 12.0, 12.1). "Same major, minor >=" is NVIDIA's family exactly for every capability in
  KNOWN_CAPABILITIES; that is why 10.1 is not listed (Thor's capability under CUDA 12.x, 11.0 since
  CUDA 13; no current device reports 10.1, and sm_100f code does not run on it).
- PTX ``compute_XY`` is JIT-compiled by the driver for any device >= X.Y.
- PTX ``compute_XYa`` only for exactly X.Y; ``compute_XYf`` for the family, like SASS ``f``.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import re
from collections import namedtuple

# Compute capabilities that current NVIDIA GPUs report (NVIDIA's list for Blackwell: 10.0, 10.3, 11.0,
# 12.0, 12.1). Binaries may still name sm_101 (Thor before CUDA 13): parse_arch accepts any number.
KNOWN_CAPABILITIES = (
    "5.0", "5.2", "5.3", "6.0", "6.1", "6.2", "7.0", "7.2", "7.5",
    "8.0", "8.6", "8.7", "8.8", "8.9", "9.0", "10.0", "10.3", "11.0", "12.0", "12.1",
)  # fmt: skip

SUFFIXES = ("", "a", "f")


class ArchError(ValueError):
    """Raised for a string that is not a CUDA architecture or capability."""


Arch = namedtuple("Arch", ["major", "minor", "suffix"])
"""A parsed architecture: ints major/minor and suffix '' (plain), 'a' (arch-specific) or 'f' (family)."""

_ARCH_RE = re.compile(
    r"""^\s*
    (?:(?P<kind>sm|compute|lto)_?)?          # optional sm_ / compute_ / lto_ prefix
    (?:
        (?P<dmaj>\d{1,2})\.(?P<dmin>\d)      # dotted: 12.0, 9.0a
      | (?P<num>\d{2,3})                     # numeric: 120, 90, 100
    )
    (?P<suffix>[af]?)
    \s*$""",
    re.VERBOSE | re.IGNORECASE,
)


def parse_arch(text):
    """Parse "12.0", "120", "sm_120a", "compute_120f", "lto_90" into (kind, Arch).

    ``kind`` is "sm", "compute", "lto" or None when the text had no prefix. Raises ArchError with a
    message that shows the accepted forms.
    """
    if isinstance(text, bool) or not isinstance(text, str):
        raise ArchError(
            f"CUDA architecture {text!r} must be a string such as \"12.0\", \"sm_120a\" or "
            f"\"compute_90\" (got {type(text).__name__}; quote numbers in YAML)"
        )
    match = _ARCH_RE.match(text)
    if not match:
        raise ArchError(
            f"{text!r} is not a CUDA architecture; use a capability like \"12.0\" or \"120\", or an "
            "arch like \"sm_120a\", \"sm_100f\", \"compute_90\""
        )
    if match.group("num"):
        num = match.group("num")
        major, minor = int(num[:-1]), int(num[-1])
    else:
        major, minor = int(match.group("dmaj")), int(match.group("dmin"))
    kind = match.group("kind").lower() if match.group("kind") else None
    return kind, Arch(major, minor, match.group("suffix").lower())


def parse_capability(text, known_only=True):
    """Return the canonical capability string "X.Y" for user input like "12.0", "120" or "sm_120".

    Suffixes are not allowed (a device has a capability, not an arch-specific target). With
    ``known_only`` the result must be a capability of a real GPU (KNOWN_CAPABILITIES).
    """
    if isinstance(text, float):
        raise ArchError(
            f"capability {text!r} is a number; write it as a quoted string, e.g. \"{text}\" (YAML "
            "turns 12.10 and 12.1 into the same float)"
        )
    _kind, arch = parse_arch(text)
    if arch.suffix:
        raise ArchError(
            f"{text!r} names an arch-specific/family target; a GPU capability has no suffix "
            f"(use \"{arch.major}.{arch.minor}\")"
        )
    capability = f"{arch.major}.{arch.minor}"
    if known_only and capability not in KNOWN_CAPABILITIES:
        raise ArchError(
            f"{text!r} is not the compute capability of any known NVIDIA GPU; "
            f"known: {', '.join(KNOWN_CAPABILITIES)}"
        )
    return capability


def parse_capabilities(values, known_only=True, param="require"):
    """Canonical capability strings for a list of user values, duplicates dropped, order kept.

    Raises ArchError whose message starts with ``param`` (the option the values came from).
    """
    capabilities = []
    for value in values or []:
        try:
            capability = parse_capability(value, known_only=known_only)
        except ArchError as exc:
            raise ArchError(f"{param}: {exc}") from None
        if capability not in capabilities:
            capabilities.append(capability)
    return capabilities


def unknown_capability_warnings(capabilities):
    """A warning for each canonical capability that no known GPU has (a newer GPU, or a typo)."""
    return [f"capability {capability} is not one of the known NVIDIA GPU capabilities "
            f"({', '.join(KNOWN_CAPABILITIES)}); it was rated with the same rules, which a new "
            "architecture may not follow"
            for capability in capabilities if capability not in KNOWN_CAPABILITIES]


def parse_requirements(require, fail_on_missing=None):
    """A module's ``require`` and ``fail_on_missing`` options: (capabilities, fail_on_missing, warnings).

    Any well-formed capability is accepted, so that ``require: "{{ gpu.capabilities }}"`` does not fail
    on a GPU newer than KNOWN_CAPABILITIES; an unknown one gets a warning. ``fail_on_missing`` defaults
    to true when something is required. Raises ArchError ("require: ...") for a malformed value.
    """
    capabilities = parse_capabilities(require, known_only=False)
    if fail_on_missing is None:
        fail_on_missing = bool(capabilities)
    return capabilities, fail_on_missing, unknown_capability_warnings(capabilities)


def capability_tuple(capability):
    """(major, minor) ints for a canonical capability string such as "12.0"."""
    _kind, arch = parse_arch(capability)
    return arch.major, arch.minor


def format_arch(arch, kind="sm"):
    """"sm_120a" / "compute_90" / "lto_100f" for an Arch."""
    return f"{kind}_{arch.major}{arch.minor}{arch.suffix}"


def arch_sort_key(name):
    """Sort key that orders arch strings numerically (sm_90 < sm_90a < sm_100 < sm_100f < sm_120a)."""
    _kind, arch = parse_arch(name)
    return arch.major, arch.minor, SUFFIXES.index(arch.suffix)


def sorted_archs(names):
    """Unique arch strings, sorted numerically."""
    return sorted(set(names), key=arch_sort_key)


def describe_archs(sass, ptx, lto=()):
    """"sm_80, sm_90a, compute_90" for the code of one file; "no device code" when it has none."""
    names = [*sass, *ptx, *(f"{name} (LTO-IR, runs only after a device link)" for name in lto)]
    return ", ".join(names) or "no device code"


def targets_for(capability):
    """Build targets whose code runs on ``capability``, the most useful first.

    Family (from 10.x, named after the oldest known member, so sm_120f for 12.1 also covers 12.0), then
    arch-specific (from 9.0), then plain SASS and PTX: a/f come first because plain sm_100/sm_120 builds
    of CUTLASS kernels compile to trap stubs (shared upstream facts).
    """
    major, minor = capability_tuple(capability)
    number = f"{major}{minor}"
    targets = []
    if major >= 10:
        family = [capability_tuple(c)[1] for c in KNOWN_CAPABILITIES
                  if capability_tuple(c)[0] == major and capability_tuple(c)[1] <= minor]
        targets.append(f"sm_{major}{min(family, default=minor)}f")
    if major >= 9:
        targets.append(f"sm_{number}a")
    return [*targets, f"sm_{number}", f"compute_{number}"]


def describe_targets(capability):
    """"sm_120f, sm_121a, sm_121 or compute_121 PTX": targets_for as advice in a message."""
    names = [f"{t} PTX" if t.startswith("compute_") else t for t in targets_for(capability)]
    return ", ".join(names[:-1]) + " or " + names[-1]


def sass_runs_on(arch, capability):
    """Can a cubin built for ``arch`` (Arch or "sm_XY[af]") run on a device of ``capability``?"""
    if not isinstance(arch, Arch):
        arch = parse_arch(arch)[1]
    major, minor = capability_tuple(capability)
    if arch.suffix == "a":
        return (arch.major, arch.minor) == (major, minor)
    # Plain and family cubins: same major, equal or newer minor.
    return arch.major == major and minor >= arch.minor


def ptx_runs_on(arch, capability):
    """Can PTX for ``arch`` (Arch or "compute_XY[af]") be JIT-compiled for ``capability``?"""
    if not isinstance(arch, Arch):
        arch = parse_arch(arch)[1]
    if arch.suffix:  # arch-specific and family PTX reach exactly the devices their SASS would
        return sass_runs_on(arch, capability)
    return capability_tuple(capability) >= (arch.major, arch.minor)


def runs_on(sass, ptx, capability):
    """How code with these SASS and PTX arches runs on ``capability``: "sass", "ptx-jit" or False.

    SASS wins when both would work (the driver picks a compatible cubin before JIT-compiling PTX).
    """
    if any(sass_runs_on(name, capability) for name in sass):
        return "sass"
    if any(ptx_runs_on(name, capability) for name in ptx):
        return "ptx-jit"
    return False


# The first CUDA release whose nvcc compiles each target, per capability: (plain sm_XY, sm_XYa, sm_XYf);
# None where the target does not exist. From NVIDIA's release notes and PTX ISA versions: 11.8 added
# sm_89/sm_90, 12.0 sm_90a, 12.8 sm_100/101/120 (+a), 12.9 sm_103, sm_121 and every `f` target, 13.0
# sm_88 and sm_110 (Thor, sm_101 under 12.x). A capability missing here (a GPU newer than this table)
# has no rule: the nvcc --list-gpu-arch check still decides whether the toolkit can target it.
FIRST_CUDA_FOR_TARGET = {
    "5.0": ("6.0", None, None), "5.2": ("6.5", None, None), "5.3": ("7.0", None, None),
    "6.0": ("8.0", None, None), "6.1": ("8.0", None, None), "6.2": ("8.0", None, None),
    "7.0": ("9.0", None, None), "7.2": ("10.0", None, None), "7.5": ("10.0", None, None),
    "8.0": ("11.0", None, None), "8.6": ("11.1", None, None), "8.7": ("11.4", None, None),
    "8.8": ("13.0", None, None), "8.9": ("11.8", None, None), "9.0": ("11.8", "12.0", None),
    "10.0": ("12.8", "12.8", "12.9"), "10.3": ("12.9", "12.9", "12.9"),
    "11.0": ("13.0", "13.0", "13.0"), "12.0": ("12.8", "12.8", "12.9"),
    "12.1": ("12.9", "12.9", "12.9"),
}  # fmt: skip

# CUDA 13.0 dropped offline compilation for Maxwell, Pascal and Volta: below 7.5 the last toolkit is 12.x.
LAST_CUDA_MAJOR_BELOW_TURING = 12


def cuda_version_tuple(version):
    """(major, minor) ints for a CUDA version such as "12.8" or "13.0.88" (ArchError otherwise)."""
    match = re.match(r"^\s*(\d+)\.(\d+)(?:\.\d+)*\s*$", str(version))
    if isinstance(version, (bool, float)) or not match:
        raise ArchError(f"{version!r} is not a CUDA version; write it as a quoted string such as \"13.0\"")
    return int(match.group(1)), int(match.group(2))


def min_cuda_for_target(name):
    """The first CUDA release ("12.8") whose nvcc compiles target ``name`` ("sm_120a", "compute_100f",
    "120"); None for a capability this table does not know. ArchError for a target that does not exist
    (an `a` target below 9.0, an `f` target below 10.0)."""
    _kind, arch = parse_arch(name)
    capability = f"{arch.major}.{arch.minor}"
    first = FIRST_CUDA_FOR_TARGET.get(capability)
    if first is None:
        return None
    version = first[SUFFIXES.index(arch.suffix)]
    if version is None:
        exists = "9.0 and later" if arch.suffix == "a" else "10.0 and later"
        raise ArchError(f"{name!r} is not a CUDA target: `{arch.suffix}` targets exist for capabilities "
                        f"{exists} (use {format_arch(Arch(arch.major, arch.minor, ''))})")
    return version


def kernel_target(capability):
    """The target whose first CUDA release bounds what a capability needs: sm_XYa from 9.0 on (plain
    sm_90/sm_100/sm_120 builds of CUTLASS kernels compile to trap stubs, shared upstream facts), plain
    sm_XY before."""
    major, minor = capability_tuple(capability)
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


def cuda_requirements(capabilities, extra_targets=()):
    """What a CUDA toolkit must offer to build real kernels for ``capabilities`` (canonical "X.Y"
    strings) and any ``extra_targets`` ("sm_120f"): a dict with

    - ``min_version``: the newest of the first releases the targets need ("12.8"), None when no rule
      applies; ``min_version_reason``: the target that sets it ("sm_120a needs CUDA >= 12.8");
    - ``compute_archs``: the ``compute_XY`` names that ``nvcc --list-gpu-arch`` must list;
    - ``max_major``: the newest CUDA major that still targets all of them (12 below 7.5), or None;
    - ``targets``: each target with the release it needs (None: unknown to the table).

    Raises ArchError for a malformed capability or a target that does not exist.
    """
    targets = [kernel_target(c) for c in capabilities] + list(extra_targets)
    needs = []
    for target in targets:
        version = min_cuda_for_target(target)
        needs.append({"target": format_arch(parse_arch(target)[1]), "min_version": version})
    known = [n for n in needs if n["min_version"] is not None]
    newest = max(known, key=lambda n: cuda_version_tuple(n["min_version"]), default=None)
    compute = sorted_archs(format_arch(Arch(a.major, a.minor, ""), "compute")
                          for a in (parse_arch(t)[1] for t in targets))
    old = [c for c in capabilities if capability_tuple(c) < (7, 5)]
    return {
        "min_version": newest["min_version"] if newest else None,
        "min_version_reason": f"{newest['target']} needs CUDA >= {newest['min_version']}" if newest else None,
        "compute_archs": compute,
        "max_major": LAST_CUDA_MAJOR_BELOW_TURING if old else None,
        "targets": needs,
    }
