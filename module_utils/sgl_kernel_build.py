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


def gencode_flag(virtual, code):
    return f"-gencode=arch={virtual},code={code}"


def needed_variants(capabilities):
    """Loader variants the capabilities select, sorted ("sm90" only for 9.0, else "sm100")."""
    return sorted({loader_subdir(capability) for capability in capabilities})


def narrow_gencodes(capabilities, available, cuda_version=None):
    """(kept, extra): the gencode flags of ``available`` (the build's default list) the capabilities need,
    and the flags to add for capabilities that no available gencode covers.

    For each capability the first available code that runs there is kept, in ``cuda_arch.targets_for``
    order (family, arch-specific, plain, PTX). An uncovered capability (12.1 when the list has only
    sm_120a) gets its best target added when ``cuda_version`` can compile it; else BuildPlanError.
    """
    parsed = [(flag, parse_gencode(flag)) for flag in available if parse_gencode(flag)]
    keep, extra, uncovered = [], [], []
    for capability in capabilities:
        ranked = []
        for flag, (_virtual, codes) in parsed:
            for code in codes.split(","):
                kind, _arch = parse_arch(code)
                if runs_on([code] if kind == "sm" else [], [code] if kind == "compute" else [], capability):
                    ranked.append((_rank(code, capability), flag))
        if ranked:
            best = min(ranked)[1]
            if best not in keep:
                keep.append(best)
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


def _rank(code, capability):
    names = targets_for(capability)
    kind, arch = parse_arch(code)
    name = f"{kind}_{arch.major}{arch.minor}{arch.suffix}"
    return names.index(name) if name in names else len(names) + (1 if kind == "compute" else 0)


def gencode_for_target(target):
    """"-gencode=arch=compute_120f,code=sm_120f" for "sm_120f" (SASS plus its matching virtual arch)."""
    kind, arch = parse_arch(target)
    number = f"{arch.major}{arch.minor}{arch.suffix}"
    return gencode_flag(f"compute_{number}", f"sm_{number}" if kind == "sm" else f"compute_{number}")


_FLAG_LIST = re.compile(r"^\s*(?:set\s*\(\s*|list\s*\(\s*APPEND\s+)(\w+)", re.I)
_GENCODE_IN_CMAKE = re.compile(r'"(-gencode[= ]arch=compute_\w+,code=\[?[\w,]+\]?)"')


def cmake_gencodes(text):
    """Every quoted ``-gencode=...`` string of a CMakeLists, in order, duplicates dropped."""
    seen = []
    code = "\n".join(line.split("#", 1)[0] for line in text.splitlines())
    for flag in _GENCODE_IN_CMAKE.findall(code):
        if flag not in seen:
            seen.append(flag)
    return seen


def narrow_cmake_gencodes(text, keep, extra=()):
    """Rewrite a CMakeLists so that only ``keep`` gencodes remain; ``extra`` ones are added to each list.

    Each ``"-gencode=..."`` line not kept becomes a comment; the first kept line of each list gets the
    extra flags after it. Returns (new text, [removed flags]). Flags inside a target whose gencodes are
    all removed leave it with none: the caller builds only the targets it needs.
    """
    removed = []
    added = set()  # (CMake variable, flag): extras go once into each flag variable that had a gencode
    lines = []
    variable = None
    for line in text.splitlines(keepends=True):
        opened = _FLAG_LIST.match(line)
        if opened:
            variable = opened.group(1)
        flags = _GENCODE_IN_CMAKE.findall(line.split("#", 1)[0])
        if not flags:
            lines.append(line)
            continue
        drop = [f for f in flags if f not in keep]
        removed.extend(drop)
        if drop and len(drop) == len(flags) and line.strip().startswith('"'):
            indent = line[:len(line) - len(line.lstrip())]
            lines.append(f"{indent}# sgl_kernel narrowed: {line.strip()}\n")
        else:
            kept_line = line
            for flag in drop:  # a flag inside a one-line set()/list(): drop the string, keep the call
                kept_line = kept_line.replace(f'"{flag}"', "")
            lines.append(kept_line)
        for flag in extra:
            if (variable, flag) not in added and flag not in flags:
                indent = line[:len(line) - len(line.lstrip())]
                lines.append(f'{indent}"{flag}"\n')
                added.add((variable, flag))
    return "".join(lines), removed


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


_DECLARE = re.compile(r"FetchContent_Declare\s*\((?P<body>[^()]*(?:\([^()]*\)[^()]*)*)\)", re.I | re.S)


def fetchcontent_dependencies(text):
    """Configure-time downloads declared in a CMakeLists: [{name, url, sha256, git_repository, git_tag}]."""
    deps = []
    for match in _DECLARE.finditer(text):
        body = re.sub(r"#[^\n]*", "", match.group("body"))
        tokens = body.split()
        if not tokens:
            continue
        dep = {"name": tokens[0], "url": None, "sha256": None, "git_repository": None, "git_tag": None}
        for key, value in zip(tokens[1:], tokens[2:]):
            if key == "URL":
                dep["url"] = value.strip('"')
            elif key == "URL_HASH" and value.upper().startswith("SHA256="):
                dep["sha256"] = value.split("=", 1)[1].strip('"').lower()
            elif key == "GIT_REPOSITORY":
                dep["git_repository"] = value.strip('"')
            elif key == "GIT_TAG":
                dep["git_tag"] = value.strip('"')
        deps.append(dep)
    return deps


def fetchcontent_source_var(name):
    """CMake's cache variable for a pre-fetched source dir: FETCHCONTENT_SOURCE_DIR_<UPPER NAME>."""
    return "FETCHCONTENT_SOURCE_DIR_" + re.sub(r"[^A-Za-z0-9_]", "_", name).upper()


def resolve_url(url, variables):
    """``url`` with ``${VAR}`` replaced from ``variables``; unknown variables stay as they are."""
    return re.sub(r"\$\{(\w+)\}", lambda m: str(variables.get(m.group(1), m.group(0))), url)


def offline_cmake_defines(deps, mirror_prefix=None, prefetched=None):
    """CMake ``-D`` settings that serve every dependency from a mirror or a pre-fetched directory.

    ``mirror_prefix`` is what ``${GITHUB_ARTIFACTORY}`` becomes (host[/path], no scheme, as upstream
    writes ``https://${GITHUB_ARTIFACTORY}/owner/repo/archive/...``). ``prefetched`` maps a dependency
    name to a source directory and wins over the mirror. Raises BuildPlanError naming each dependency
    that neither covers.
    """
    prefetched = prefetched or {}
    defines, missing = [], []
    uses_artifactory = any(d["url"] and "${GITHUB_ARTIFACTORY}" in d["url"] for d in deps)
    for dep in deps:
        if dep["name"] in prefetched:
            defines.append(f"-D{fetchcontent_source_var(dep['name'])}={prefetched[dep['name']]}")
        elif not (mirror_prefix and dep["url"] and "${GITHUB_ARTIFACTORY}" in dep["url"]):
            missing.append(dep["name"])
    if mirror_prefix and uses_artifactory:
        defines.insert(0, f"-DGITHUB_ARTIFACTORY={mirror_prefix.rstrip('/')}")
    if missing:
        raise BuildPlanError(
            f"configure-time dependencies {', '.join(missing)} would be downloaded from the internet: set "
            "sgl_kernel_github_mirror (used as ${GITHUB_ARTIFACTORY}) or sgl_kernel_prefetched_sources "
            "(name: directory) for them")
    return defines


def capability_sort(capabilities):
    return sorted(set(capabilities), key=capability_tuple)


def drop_variant_targets(text, variants):
    """Stop building and installing the common_ops variants in ``variants`` ("sm90", "sm100").

    Their ``install(TARGETS <target> ...)`` lines become comments and the targets are excluded from
    ``all`` (a line appended at the end, where the targets exist). Returns (text, [targets dropped]);
    raises BuildPlanError when a target is not installed by a line of its own (upstream changed).
    """
    dropped = []
    lines = text.splitlines(keepends=True)
    for variant in variants:
        target = VARIANT_TARGETS[variant]
        pattern = re.compile(rf"^\s*install\s*\(\s*TARGETS\s+{re.escape(target)}\s")
        hits = [i for i, line in enumerate(lines) if pattern.match(line)]
        if not hits:
            raise BuildPlanError(f"the CMakeLists has no 'install(TARGETS {target} ...)' line, so the "
                                 f"{variant} variant cannot be left out; set sgl_kernel_narrow=false")
        for i in hits:
            lines[i] = f"# sgl_kernel narrowed: {lines[i].lstrip()}"
        dropped.append(target)
    if dropped:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines.append(f"set_target_properties({' '.join(dropped)} PROPERTIES EXCLUDE_FROM_ALL ON)"
                     "  # sgl_kernel narrowed\n")
    return "".join(lines), dropped


_URL_LINE = re.compile(r"^(\s*URL\s+)(\S+)", re.M)


def rewrite_fetchcontent_urls(text, mirror_url):
    """Point every ``URL https://${GITHUB_ARTIFACTORY}/...`` or ``URL https://github.com/...`` at
    ``mirror_url`` (a full prefix such as ``http://10.0.0.1:8000/gh``); the SHA256 pins stay, so what
    the mirror serves is still checked. Returns (text, [(old, new)])."""
    changes = []
    prefix = mirror_url.rstrip("/") + "/"

    def swap(match):
        url = match.group(2)
        new = re.sub(r"^https?://(?:\$\{GITHUB_ARTIFACTORY\}|github\.com)/", prefix, url)
        if new != url:
            changes.append((url, new))
        return match.group(1) + new

    return _URL_LINE.sub(swap, text), changes


def repin_torch(pyproject, torch_version):
    """pyproject.toml text with every ``torch==X`` pin set to ``torch==<torch_version>`` (public part):
    the wheel's Requires-Dist must name the torch it is built against. Returns (text, count)."""
    version = str(torch_version).split("+", 1)[0]
    return re.subn(r'"torch\s*==\s*[^"\s;,]+', f'"torch=={version}', pyproject)
