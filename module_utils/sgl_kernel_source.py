"""An sglang-kernel source checkout made ready for a controlled build (in a staging copy).

- Gencodes: upstream hard-codes them in CMakeLists.txt from the CUDA version and ignores
  ``TORCH_CUDA_ARCH_LIST``/``CMAKE_CUDA_ARCHITECTURES``, so narrowing rewrites the quoted
  ``"-gencode=..."`` strings; the variants no target selects are left out of ``all`` and of the install.
- Configure-time downloads are read from ``FetchContent_Declare`` blocks (CMakeLists.txt and cmake/*.cmake)
  and pointed at a mirror prefix or at pre-fetched directories; their SHA256 pins stay.
- The torch pin of pyproject.toml becomes the stack's torch, because the wheel's ``Requires-Dist`` must
  name the torch its ``.so`` files are built against.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import os
import re
import shutil

from ansible.module_utils.cuda_arch import capability_tuple
from ansible.module_utils.sgl_kernel_build import (
    VARIANT_TARGETS,
    BuildPlanError,
    below_sm90,
    build_fingerprint,
    capability_sort,
    cmake_args_defines,
    narrow_gencodes,
    needed_variants,
)

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
    """CMake's cache variable for a pre-fetched source dir: FETCHCONTENT_SOURCE_DIR_<UPPER NAME>.

    FetchContent only upper-cases the name (``string(TOUPPER)``): "repo-cutlass" is read from
    FETCHCONTENT_SOURCE_DIR_REPO-CUTLASS, and a variable with ``_`` for ``-`` is ignored (CMake downloads).
    """
    return "FETCHCONTENT_SOURCE_DIR_" + name.upper()


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


def gencodes_by_variable(text):
    """{CMake flag variable: [gencode flags]} of a CMake file (comments skipped)."""
    found, variable = {}, None
    for line in text.splitlines():
        code = line.split("#", 1)[0]
        opened = _FLAG_LIST.match(code)
        if opened:
            variable = opened.group(1)
        flags = _GENCODE_IN_CMAKE.findall(code)
        if flags:
            found.setdefault(variable, []).extend(flags)
    return found


def targets_using(text, variable):
    """Targets whose ``target_compile_options`` use ``${variable}``."""
    pattern = rf"target_compile_options\s*\(\s*([\w-]+)[^)]*\$\{{{re.escape(variable)}\}}"
    return sorted(set(re.findall(pattern, text)))


def drop_targets(text, targets):
    """Exclude ``targets`` from ``all`` and comment out their ``install(TARGETS ...)`` lines."""
    lines = text.splitlines(keepends=True)
    for target in targets:
        pattern = re.compile(rf"^\s*install\s*\(\s*TARGETS\s+{re.escape(target)}\s")
        for i, line in enumerate(lines):
            if pattern.match(line):
                lines[i] = f"# sgl_kernel narrowed: {line.lstrip()}"
    if targets:
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        lines.append(f"set_target_properties({' '.join(targets)} PROPERTIES EXCLUDE_FROM_ALL ON)"
                     "  # sgl_kernel narrowed\n")
    return "".join(lines)


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


PRISTINE_SUFFIX = ".sgl-kernel-orig"


def _pristine(path, check_mode):
    """The file's text as checked out: the first prepare keeps a copy, later ones start from it."""
    keep = path + PRISTINE_SUFFIX
    source = keep if os.path.exists(keep) else path
    with open(source, encoding="utf-8") as handle:
        text = handle.read()
    if source == path and not check_mode:
        shutil.copy2(path, keep)
    return text


def _write_if_changed(path, text, check_mode):
    with open(path, encoding="utf-8") as handle:
        if handle.read() == text:
            return False
    if not check_mode:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    return True


def prepare_source(package_dir, capabilities, cuda_version, torch_version, source_commit, *, narrow=True,
                   enable_fa3="auto", enable_below_sm90=True, extra_cmake_args=(), extra_cmake_defines=None,
                   mirror_url="", prefetched=None, check_mode=False):
    """Adapt a checked-out sglang-kernel source in place (staging copy) and plan its build.

    Narrowing comments out the gencodes no target needs (adding the ones only a newer target needs) and
    drops the loader variants no target selects; configure-time URLs point at ``mirror_url`` or at
    pre-fetched dirs; the torch pin becomes the stack's. The files are rewritten from their pristine
    copies, so a second run gives the same files.

    The profile's ``sgl_kernel.build`` keys: ``enable_fa3`` (True, False or "auto": on only for 8.x/9.0
    targets when narrowing, FA3 having no other code) sets ``SGL_KERNEL_ENABLE_FA3``;
    ``enable_below_sm90=False`` sets ``ENABLE_BELOW_SM90=OFF``, comments out every gencode older than 9.0
    in every CMake file (narrowed or not) and refuses a target older than 9.0; True lets narrowing keep
    them for such targets, and without narrowing sets ``ENABLE_BELOW_SM90=ON`` (upstream's default is
    OFF on aarch64); ``extra_cmake_args`` (``-DNAME=VALUE`` strings) become CMake cache settings, and
    ``extra_cmake_defines`` (the role's) come last. Returns a dict with changed, gencodes (kept),
    gencodes_default, variants, dropped_targets, dependencies, cmake_defines, fingerprint,
    fingerprint_inputs.
    """
    cmakelists = os.path.join(package_dir, "CMakeLists.txt")
    pyproject = os.path.join(package_dir, "pyproject.toml")
    for path in (cmakelists, pyproject):
        if not os.path.isfile(path):
            raise BuildPlanError(f"{path} is missing: {package_dir} is not an sglang-kernel source directory "
                                 "(set sgl_kernel_source_subdir to sgl-kernel or python/sglang/kernels/aot)")
    capabilities = capability_sort(capabilities)
    too_old = [c for c in capabilities if capability_tuple(c) < (9, 0)]
    if too_old and not enable_below_sm90:
        raise BuildPlanError(
            f"target capabilities {', '.join(too_old)} are older than 9.0, but the profile's "
            "sgl_kernel.build.enable_below_sm90 is false, so the kernel would hold no code for them: set it "
            "to true, or leave those hosts out of the play")
    args_defines = cmake_args_defines(extra_cmake_args)
    text = _pristine(cmakelists, check_mode)
    default = cmake_gencodes(text)
    if not default:
        raise BuildPlanError(f"{cmakelists} names no -gencode flag; upstream changed how it picks arches, "
                             "so narrowing cannot work: set sgl_kernel_narrow=false")
    variants = needed_variants(capabilities) if narrow else sorted(VARIANT_TARGETS)
    dropped = []
    if narrow:
        keep, extra = narrow_gencodes(capabilities, default, cuda_version)
        text, _removed = narrow_cmake_gencodes(text, keep, extra)
        text, dropped = drop_variant_targets(text, [v for v in sorted(VARIANT_TARGETS) if v not in variants])
    elif not enable_below_sm90:
        text, _removed = narrow_cmake_gencodes(text, [g for g in default if not below_sm90(g)])
    cmake_files = {cmakelists: text}
    cmake_dir = os.path.join(package_dir, "cmake")
    if os.path.isdir(cmake_dir):
        for name in sorted(os.listdir(cmake_dir)):
            if name.endswith(".cmake"):
                path = os.path.join(cmake_dir, name)
                cmake_files[path] = _pristine(path, check_mode)
    if narrow or not enable_below_sm90:
        # Other libraries keep their gencodes that run on a target (or, not narrowed, those of 9.0 and
        # newer); a library left with none (FlashMLA, sm_90a/sm_100f/sm_103a only, on a 12.0 fleet) has no
        # code for any target: it is not built.
        for path in list(cmake_files):
            before = gencodes_by_variable(cmake_files[path])
            if path != cmakelists:
                kept_here = keep if narrow else [g for g in cmake_gencodes(cmake_files[path])
                                                 if not below_sm90(g)]
                cmake_files[path], _removed = narrow_cmake_gencodes(cmake_files[path], kept_here)
            after = gencodes_by_variable(cmake_files[path])
            emptied = [v for v in before if v and not after.get(v)]
            useless = sorted({t for v in emptied for t in targets_using(cmake_files[path], v)} - set(dropped))
            if useless:
                cmake_files[path] = drop_targets(cmake_files[path], useless)
                dropped.extend(useless)
    deps, mirrored = [], set()
    for path in list(cmake_files):
        deps.extend(fetchcontent_dependencies(cmake_files[path]))
        if mirror_url:
            cmake_files[path], changes = rewrite_fetchcontent_urls(cmake_files[path], mirror_url)
            mirrored.update(old for old, _new in changes)
    prefetched = prefetched or {}
    defines = {fetchcontent_source_var(d["name"]): prefetched[d["name"]]
               for d in deps if d["name"] in prefetched}
    online = [d["name"] for d in deps if d["name"] not in prefetched and d["url"] not in mirrored]
    if online:
        raise BuildPlanError(
            f"configure-time dependencies {', '.join(online)} would be downloaded from the internet: set "
            "sgl_kernel_source_mirror_url (a prefix that replaces https://${GITHUB_ARTIFACTORY} and "
            "https://github.com) or sgl_kernel_prefetched_sources (name: directory) for them")
    if enable_fa3 == "auto":
        enable_fa3 = any(capability_tuple(c)[0] in (8, 9) for c in capabilities) if narrow else True
    defines["SGL_KERNEL_ENABLE_FA3"] = "ON" if enable_fa3 else "OFF"
    below = bool(too_old) if narrow else enable_below_sm90
    defines["ENABLE_BELOW_SM90"] = "ON" if below else "OFF"
    defines.update(args_defines)
    defines.update({str(k): str(v) for k, v in (extra_cmake_defines or {}).items()})
    py_text, _count = repin_torch(_pristine(pyproject, check_mode), torch_version)
    changed = _write_if_changed(pyproject, py_text, check_mode)
    for path, new_text in cmake_files.items():
        changed = _write_if_changed(path, new_text, check_mode) or changed
    kept = cmake_gencodes(cmake_files[cmakelists])
    flags = sorted(f"{k}={v}" for k, v in defines.items() if not k.startswith("FETCHCONTENT_SOURCE_DIR_"))
    fingerprint, inputs = build_fingerprint(source_commit, cuda_version, torch_version, gencodes=kept,
                                            variants=variants, flags=flags)
    return {"changed": changed, "gencodes": kept, "gencodes_default": default, "variants": variants,
            "dropped_targets": dropped, "dependencies": deps, "cmake_defines": defines,
            "fingerprint": fingerprint, "fingerprint_inputs": inputs, "capabilities": capabilities}
