"""Find a CUDA toolkit, read what its nvcc says about itself, and check it against what targets need.

``nvcc --version`` gives the release ("Cuda compilation tools, release 13.0, V13.0.88"),
``nvcc --list-gpu-arch`` the virtual architectures it can compile for (compute_75 ... compute_121, no
a/f suffixes), and ``nvcc --dryrun`` the toolkit root it resolves itself from (``#$ TOP=...``), which is
the right CUDA_HOME even when the nvcc on PATH is a wrapper script or a symlink. What targets need comes
from ``cuda_arch.cuda_requirements`` (the one home of arch rules).

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import os
import re

from ansible.module_utils.bounded_run import RunTimeout, run_bounded
from ansible.module_utils.cuda_arch import cuda_requirements, cuda_version_tuple, sorted_archs

_RELEASE_RE = re.compile(r"release\s+(\d+\.\d+)\s*,\s*V(\d+\.\d+(?:\.\d+)*)")
_ARCH_RE = re.compile(r"\bcompute_\d{2,3}[af]?\b")
_TOP_RE = re.compile(r"^#\$\s*TOP=(.+?)\s*$", re.MULTILINE)


class ToolkitError(Exception):
    """A toolkit that cannot be found or whose nvcc does not answer as nvcc does."""


def parse_nvcc_version(text):
    """("13.0", "13.0.88") from ``nvcc --version`` output; ToolkitError when it has no release line."""
    match = _RELEASE_RE.search(text or "")
    if not match:
        raise ToolkitError("its --version output has no \"release X.Y, VX.Y.Z\" line: "
                           + (" ".join((text or "").split())[:200] or "no output"))
    return match.group(1), match.group(2)


def parse_gpu_arch_list(text):
    """The ``compute_XY`` names in ``nvcc --list-gpu-arch`` output, sorted; ToolkitError when none."""
    names = sorted_archs(_ARCH_RE.findall(text or ""))
    if not names:
        raise ToolkitError("its --list-gpu-arch output names no compute_XY architecture: "
                           + (" ".join((text or "").split())[:200] or "no output"))
    return names


def parse_toolkit_root(text):
    """The toolkit root nvcc resolved (``#$ TOP=`` of ``nvcc --dryrun``), normalised; None if absent."""
    match = _TOP_RE.search(text or "")
    return os.path.normpath(match.group(1)) if match else None


def find_nvcc(nvcc=None, home=None, search=(), path_env=None):
    """The nvcc to check: ``nvcc`` if given, else ``home``/bin/nvcc, else the first of ``search`` homes
    that has one, else nvcc on ``path_env``. None when nothing is found (given paths must exist)."""
    if nvcc:
        if not _is_executable(nvcc):
            raise ToolkitError(f"nvcc {nvcc} does not exist or is not executable")
        return nvcc
    if home:
        candidate = os.path.join(home, "bin", "nvcc")
        if not _is_executable(candidate):
            raise ToolkitError(f"CUDA home {home} has no executable bin/nvcc")
        return candidate
    for directory in search or ():
        candidate = os.path.join(directory, "bin", "nvcc")
        if _is_executable(candidate):
            return candidate
    for directory in (path_env if path_env is not None else os.environ.get("PATH", "")).split(os.pathsep):
        candidate = os.path.join(directory, "nvcc")
        if directory and _is_executable(candidate):
            return candidate
    return None


def _is_executable(path):
    return os.path.isfile(path) and os.access(path, os.X_OK)


def _run(nvcc, args, timeout):
    try:
        returncode, stdout, _stderr = run_bounded([nvcc, *args], timeout, merge_stderr=True)
    except RunTimeout as exc:
        raise ToolkitError(f"{nvcc} {' '.join(args)}: {exc}") from None
    except OSError as exc:
        raise ToolkitError(f"cannot run {nvcc}: {exc.strerror or exc}") from None
    text = stdout.decode("utf-8", "replace")
    if returncode != 0:
        raise ToolkitError(f"{nvcc} {' '.join(args)} exited with {returncode}: "
                           + (" ".join(text.split())[:300] or "no output"))
    return text


def inspect_toolkit(nvcc, timeout=60):
    """Facts about the toolkit of ``nvcc``: nvcc, home, version, version_full, gpu_archs."""
    try:
        version, version_full = parse_nvcc_version(_run(nvcc, ["--version"], timeout))
        gpu_archs = parse_gpu_arch_list(_run(nvcc, ["--list-gpu-arch"], timeout))
    except ToolkitError as exc:
        raise ToolkitError(f"{nvcc} is not a working nvcc: {exc}") from None
    # --dryrun prints the commands it would run (TOP among the settings) and reads no input file.
    try:
        home = parse_toolkit_root(_run(nvcc, ["--dryrun", "-c", "sglang-fleet-probe.cu", "-o", os.devnull],
                                       timeout))
    except ToolkitError:
        home = None
    if home is None:
        home = os.path.dirname(os.path.dirname(os.path.realpath(nvcc)))
    return {"nvcc": nvcc, "home": home, "version": version, "version_full": version_full,
            "gpu_archs": gpu_archs}


def check_toolkit(facts, capabilities, extra_targets=(), version=None):
    """Problems (a list of sentences) of a toolkit (``facts`` from inspect_toolkit, or only
    {"version": ...} to check a version before installing it) for ``capabilities`` and
    ``extra_targets``, plus the requirements and the compute archs nvcc lacks.

    ``version`` is the release the stack asks for ("13.0"): a toolkit of another major.minor is a
    problem, because the stack's torch and kernels are built for that CUDA.
    """
    requirements = cuda_requirements(capabilities, extra_targets)
    found = facts["version"]
    problems = []
    if version and cuda_version_tuple(found) != cuda_version_tuple(version):
        problems.append(f"the stack asks for CUDA {version} but the toolkit is CUDA {found}")
    wanted = requirements["min_version"]
    if wanted and cuda_version_tuple(found) < cuda_version_tuple(wanted):
        problems.append(f"CUDA {found} is older than the targets need: {requirements['min_version_reason']} "
                        f"(targets {', '.join(t['target'] for t in requirements['targets'])})")
    if requirements["max_major"] is not None and cuda_version_tuple(found)[0] > requirements["max_major"]:
        old = [c for c in capabilities if tuple(map(int, c.split("."))) < (7, 5)]
        problems.append(f"CUDA {found} cannot target capability {', '.join(old)}: CUDA 13 dropped "
                        f"Maxwell, Pascal and Volta; use CUDA {requirements['max_major']}.x for them")
    missing = []
    if "gpu_archs" in facts:
        missing = [a for a in requirements["compute_archs"] if a not in facts["gpu_archs"]]
        if missing:
            problems.append(f"nvcc {facts['version_full']} ({facts['nvcc']}) cannot target "
                            f"{', '.join(missing)}: its --list-gpu-arch has {', '.join(facts['gpu_archs'])}")
    return problems, requirements, missing


def toolkit_env(home, nvcc, path_env=None):
    """Environment for build steps and services: CUDA_HOME/CUDA_PATH, CUDACXX (CMake's CUDA compiler)
    and PATH with the toolkit's bin first (the remote's own PATH after it, without duplicates)."""
    bin_dir = os.path.join(home, "bin")
    rest = [d for d in (path_env if path_env is not None else os.environ.get("PATH", "")).split(os.pathsep)
            if d and d != bin_dir]
    path = os.pathsep.join(dict.fromkeys([bin_dir, *rest]))
    return {"CUDA_HOME": home, "CUDA_PATH": home, "CUDACXX": nvcc, "PATH": path}
