"""Plans for an sgl_kernel source build: parallelism, arch narrowing, fingerprint, offline dependencies.

Upstream facts this encodes (shared upstream facts; re-check when the pinned version changes):
- Gencodes are hard-coded in CMakeLists.txt from the CUDA version; ``TORCH_CUDA_ARCH_LIST`` and
  ``CMAKE_CUDA_ARCHITECTURES`` are ignored. Narrowing therefore rewrites the ``-gencode=...`` strings of
  the checked-out CMakeLists (``narrow_cmake_gencodes``), in the staging copy only.
- ``sm90/`` and ``sm100/`` common_ops are the same sources built twice; the loader picks ``sm90`` only
  for capability 9.0. Building only the needed variants = building only their CMake targets.
- ``CMAKE_BUILD_PARALLEL_LEVEL`` (env) = translation units at once; ``SGL_KERNEL_COMPILE_THREADS``
  (CMake cache var, upstream default 32) = ``nvcc --threads`` per unit, which compiles that many gencodes
  of the unit at once. Peak memory ~ jobs x min(threads, gencodes) x memory of one device compile.
- Configure-time downloads are ``FetchContent_Declare`` blocks, ``URL https://${GITHUB_ARTIFACTORY}/...``
  with ``URL_HASH SHA256=...`` (0.4.x) or ``GIT_REPOSITORY``/``GIT_TAG`` (0.3.x).

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import hashlib
import json
import re

from ansible.module_utils.cuda_arch import (
    capability_tuple,
    parse_arch,
    runs_on,
    sorted_archs,
    targets_for,
)
from ansible.module_utils.sgl_kernel_layout import loader_subdir

MIB = 1 << 20
UPSTREAM_COMPILE_THREADS = 32
VARIANT_TARGETS = {"sm90": "common_ops_sm90_build", "sm100": "common_ops_sm100_build"}


class BuildPlanError(ValueError):
    """A plan cannot be made from these inputs; the message says which input and what to do."""


def _positive_int(name, value, allow_none=True):
    if value is None or value == "":
        if allow_none:
            return None
        raise BuildPlanError(f"{name} is required")
    if isinstance(value, bool):
        raise BuildPlanError(f"{name} must be a whole number, not a boolean")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise BuildPlanError(f"{name} must be a whole number (got {value!r})") from None
    if number < 1:
        raise BuildPlanError(f"{name} must be at least 1 (got {number})")
    return number


def plan_parallelism(cores, memory_mb, per_compile_mb, *, budget_mb=None, gencodes=1, jobs=None,
                     threads=None, reserve_mb=2048):
    """Choose ``CMAKE_BUILD_PARALLEL_LEVEL`` (jobs) and ``SGL_KERNEL_COMPILE_THREADS`` (threads).

    ``budget_mb`` defaults to the host's memory minus ``reserve_mb`` for its other services. A device
    compile slot costs ``per_compile_mb``; slots = min(cores, budget // per_compile). nvcc --threads helps
    only up to the number of gencodes of a unit, so threads = min(gencodes, slots) and jobs use the rest.
    A user's ``jobs``/``threads`` win; the reason then says whether the estimate exceeds the budget.
    Returns {jobs, threads, budget_mb, estimated_peak_mb, slots, reason}.
    """
    cores = _positive_int("cores", cores, allow_none=False)
    memory_mb = _positive_int("memory_mb", memory_mb, allow_none=False)
    per_compile_mb = _positive_int("per_compile_mb", per_compile_mb, allow_none=False)
    gencodes = _positive_int("gencodes", gencodes, allow_none=False)
    jobs = _positive_int("sgl_kernel_build_jobs", jobs)
    threads = _positive_int("sgl_kernel_compile_threads", threads)
    budget_mb = _positive_int("sgl_kernel_build_memory_mb", budget_mb)
    if budget_mb is None:
        budget_mb = max(per_compile_mb, memory_mb - reserve_mb)
    slots = max(1, min(cores, budget_mb // per_compile_mb))
    facts = (f"{cores} cores, {memory_mb} MiB memory, budget {budget_mb} MiB, {per_compile_mb} MiB per "
             f"device compile, {gencodes} gencode(s) per unit")
    chosen_threads = threads or max(1, min(gencodes, slots))
    chosen_jobs = jobs or max(1, slots // min(chosen_threads, gencodes))
    peak = chosen_jobs * min(chosen_threads, gencodes) * per_compile_mb
    if jobs or threads:
        given = ", ".join(f"{k}={v}" for k, v in (("jobs", jobs), ("threads", threads)) if v)
        verdict = ("within" if peak <= budget_mb else "OVER; the memory limit stops the build if it really "
                   "uses that much:")
        reason = (f"user override ({given}); estimated peak {peak} MiB is {verdict} the budget "
                  f"({facts})")
    else:
        limit = "cores" if cores <= budget_mb // per_compile_mb else "memory budget"
        reason = (f"{slots} compile slot(s) limited by {limit} ({facts}): {chosen_jobs} unit(s) at once x "
                  f"{chosen_threads} nvcc thread(s), estimated peak {peak} MiB")
    return {"jobs": chosen_jobs, "threads": chosen_threads, "budget_mb": budget_mb,
            "estimated_peak_mb": peak, "slots": slots, "reason": reason}


def parse_gencode(flag):
    """("compute_90a", "sm_90a") for "-gencode=arch=compute_90a,code=sm_90a"; None for other flags."""
    match = re.match(r"^-gencode[= ]arch=(compute_\w+),code=\[?([\w,]+)\]?$", flag.strip())
    if not match:
        return None
    return match.group(1), match.group(2)


def below_sm90(flag):
    """Whether a gencode flag compiles for an arch older than 9.0 (sm_80, sm_86, sm_87, sm_89...): what
    upstream's ``ENABLE_BELOW_SM90`` adds. False for other flags."""
    pair = parse_gencode(flag)
    return pair is not None and parse_arch(pair[0])[1].major < 9


# CMake settings the build plan sets itself, and the setting that controls each: extra_cmake_args
# naming one would be overridden, or would contradict a key of its own.
PLANNED_DEFINES = {
    "SGL_KERNEL_ENABLE_FA3": "sgl_kernel.build.enable_fa3",
    "ENABLE_BELOW_SM90": "sgl_kernel.build.enable_below_sm90",
    "SGL_KERNEL_COMPILE_THREADS": "the sgl_kernel_compile_threads role variable",
    "CMAKE_C_COMPILER_LAUNCHER": "the sgl_kernel_compiler_cache role variable",
    "CMAKE_CXX_COMPILER_LAUNCHER": "the sgl_kernel_compiler_cache role variable",
    "CMAKE_CUDA_COMPILER_LAUNCHER": "the sgl_kernel_compiler_cache role variable",
}
_CMAKE_DEFINE = re.compile(r"^-D(?P<name>[^=:]*)(?P<type>:[^=]*)?(?P<eq>=?)(?P<value>.*)\Z")
_CMAKE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.+-]*\Z")


def cmake_args_defines(args, key="sgl_kernel.build.extra_cmake_args"):
    """{name: value} of ``-DNAME=VALUE`` strings (the profile's extra_cmake_args), in order.

    The build passes CMake cache settings through scikit-build-core (``cmake.define.NAME=VALUE``), which
    chooses the generator, the source and build directories and each setting's type itself, so only
    ``-DNAME=VALUE`` is accepted. Raises BuildPlanError naming ``key`` and the argument for anything else,
    a name given twice, or a name the plan sets itself (PLANNED_DEFINES, FETCHCONTENT_SOURCE_DIR_*).
    """
    defines = {}
    for arg in args:
        match = _CMAKE_DEFINE.match(arg) if isinstance(arg, str) else None
        if match is None:
            raise BuildPlanError(f"{key}: {arg!r} is not a CMake cache setting; write each as one string "
                                 "-DNAME=VALUE (other CMake options cannot be passed: scikit-build-core "
                                 "chooses the generator and the directories)")
        name = match.group("name")
        if not _CMAKE_NAME.match(name) or not match.group("eq"):
            raise BuildPlanError(f"{key}: {arg!r} is not -DNAME=VALUE (one string, no space after -D, a "
                                 "name of letters, digits and _ . + -, then =)")
        if match.group("type"):
            raise BuildPlanError(f"{key}: {arg!r} gives a type; write -D{name}={match.group('value')} "
                                 "(scikit-build-core sets the type of each setting)")
        owner = PLANNED_DEFINES.get(name)
        if owner is None and name.startswith("FETCHCONTENT_SOURCE_DIR_"):
            owner = "the sgl_kernel_prefetched_sources role variable"
        if owner:
            raise BuildPlanError(f"{key}: {arg!r} sets {name}, which the build plan sets from {owner}; "
                                 "set it there")
        if name in defines:
            raise BuildPlanError(f"{key}: {name} is given twice ({defines[name]!r} and "
                                 f"{match.group('value')!r}); keep one")
        defines[name] = match.group("value")
    return defines


def gencode_flag(virtual, code):
    return f"-gencode=arch={virtual},code={code}"


def needed_variants(capabilities):
    """Loader variants the capabilities select, sorted ("sm90" only for 9.0, else "sm100")."""
    return sorted({loader_subdir(capability) for capability in capabilities})


def narrow_gencodes(capabilities, available, cuda_version=None):
    """(kept, extra): the gencode flags of ``available`` (the build's default list) whose code runs on a
    target capability, and the flags to add for capabilities that none of them covers.

    Every available code that runs on a target is kept (for 9.0 both sm_90 and, when the build adds it,
    sm_90a), so a narrowed build holds for each target exactly what the default build holds for it. An
    uncovered capability (12.1 when the list has only sm_120a) gets its best target from
    ``cuda_arch.targets_for`` when ``cuda_version`` can compile it; else BuildPlanError.
    """
    parsed = [(flag, parse_gencode(flag)) for flag in available if parse_gencode(flag)]
    keep, extra, uncovered = [], [], []
    for capability in capabilities:
        covering = []
        for flag, (_virtual, codes) in parsed:
            for code in codes.split(","):
                kind, _arch = parse_arch(code)
                if runs_on([code] if kind == "sm" else [], [code] if kind == "compute" else [], capability):
                    covering.append(flag)
        if covering:
            keep.extend(flag for flag in covering if flag not in keep)
            continue
        target = next((t for t in targets_for(capability) if cuda_can_compile(t, cuda_version)), None)
        if target is None:
            uncovered.append(capability)
        elif gencode_for_target(target) not in extra:
            extra.append(gencode_for_target(target))
    if uncovered:
        codes = ", ".join(sorted_archs(c for _f, (_v, cs) in parsed for c in cs.split(","))) or "none"
        raise BuildPlanError(
            f"no gencode of this build runs on capability {', '.join(uncovered)} (it compiles {codes}) and "
            f"CUDA {cuda_version or 'of unknown version'} cannot add one "
            f"({', '.join(targets_for(uncovered[0]))}); use a newer CUDA toolkit")
    return [flag for flag, _pair in parsed if flag in keep], extra


def cuda_can_compile(target, cuda_version):
    """Whether nvcc ``cuda_version`` ("13.0") knows ``target``: ``f`` needs 12.9, sm_10x/12x 12.8."""
    if not cuda_version:
        return False
    _kind, arch = parse_arch(target)
    version = capability_tuple(str(cuda_version))
    if arch.suffix == "f":
        return version >= (12, 9)
    if arch.major >= 10:
        return version >= (12, 8)
    return version >= (11, 8)


def gencode_for_target(target):
    """"-gencode=arch=compute_120f,code=sm_120f" for "sm_120f" (SASS plus its matching virtual arch)."""
    kind, arch = parse_arch(target)
    number = f"{arch.major}{arch.minor}{arch.suffix}"
    return gencode_flag(f"compute_{number}", f"sm_{number}" if kind == "sm" else f"compute_{number}")


def build_fingerprint(source_commit, cuda_version, torch_version, *, gencodes, variants, flags,
                      python_tag=""):
    """sha256 of everything that makes one kernel build differ from another; identical input, same hex.

    Returns (hex, the canonical inputs) so that the inputs can be recorded next to the wheel.
    """
    if not source_commit:
        raise BuildPlanError("the source commit is unknown; give sgl_kernel_source_ref as a commit or an "
                             "archive whose sha256 identifies it")
    inputs = {"source_commit": str(source_commit), "cuda": str(cuda_version), "torch": str(torch_version),
              "gencodes": sorted(set(gencodes)), "variants": sorted(set(variants)),
              "flags": [str(f) for f in flags], "python_tag": str(python_tag)}
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest(), inputs


def capability_sort(capabilities):
    return sorted(set(capabilities), key=capability_tuple)
