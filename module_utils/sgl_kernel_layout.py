"""Which sgl_kernel ``common_ops`` variant the upstream loader picks, and whether it runs on a GPU.

sgl_kernel ships the same ops compiled twice, ``sgl_kernel/sm90/common_ops.*`` and
``sgl_kernel/sm100/common_ops.*``; its loader (``sgl_kernel/load_utils.py``, unchanged from 0.3.21 to
0.4.10) picks ``sm90`` for capability 9.0 and ``sm100`` for every other capability and for no GPU at
all, then falls back to ``sgl_kernel/common_ops.*``. So a 12.0 GPU runs the ``sm100`` file: whether that
file holds code for 12.0 is what decides, not the directory's name. This module replicates that choice
without importing anything and reads the arches of each file with the fatbin scanner.

Limit of a static answer: the loader also falls back to the package-root ``common_ops`` when the variant
file exists but fails to load (a torch ABI mismatch, a missing CUDA library), and last tries a top-level
``import common_ops`` from sys.path. Whether a file loads is only known by loading it, so what is
reported here is the file the loader tries first; the import check (sgl_kernel_probe, on a GPU host)
reports what actually loaded.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import glob
import os
import re

from ansible.module_utils.cuda_arch import capability_tuple, describe_archs, describe_targets, runs_on
from ansible.module_utils.cuda_fatbin import FatbinError, scan_file

PACKAGE = "sgl_kernel"
ROOT_VARIANT = "root"  # the package-root sgl_kernel/common_ops.* fallback
HOPPER_VARIANT, DEFAULT_VARIANT = "sm90", "sm100"
_COMPILED_EXTENSIONS = (".so", ".pyd", ".dll")


class LayoutError(Exception):
    """The package directory cannot be inspected; the message says what to do."""


def filter_compiled_extensions(file_list):
    """Upstream ``_filter_compiled_extensions``: compiled files first, glob order kept in each group.

    Upstream tests ``ext in str(path)`` on the whole path, so a ".so" anywhere in the directory name
    counts; kept as is because the point is to pick the same file the loader picks.
    """
    compiled = [f for f in file_list if _is_compiled(f)]
    others = [f for f in file_list if f not in compiled]
    return compiled + others


def _is_compiled(path):
    """Upstream's test for a compiled extension, as is (see filter_compiled_extensions)."""
    return any(str(path).endswith(e) or e in str(path) for e in _COMPILED_EXTENSIONS)


def loader_subdir(capability):
    """The directory the loader tries first: sm90 for exactly 9.0, sm100 for anything else or None."""
    if capability is not None and capability_tuple(capability) == (9, 0):
        return HOPPER_VARIANT
    return DEFAULT_VARIANT


def _list(directory):
    try:
        return os.listdir(directory)
    except OSError as exc:
        raise LayoutError(f"cannot list {directory}: {exc.strerror}; check that the user running the module "
                          "may read the sgl_kernel package") from None


def _candidates(directory):
    _list(directory)  # glob reports an unreadable directory as empty: that would be a wrong answer
    # Same glob as upstream, so the order (the directory's listing order) is the loader's order.
    return filter_compiled_extensions(glob.glob(os.path.join(directory, "common_ops.*")))


def find_variants(package_dir):
    """{variant name: [candidate files, the one the loader would load first]} for subdirs and root."""
    variants = {}
    for entry in sorted(_list(package_dir)):
        directory = os.path.join(package_dir, entry)
        if os.path.isdir(directory) and not entry.startswith("__"):
            files = _candidates(directory)
            if files:
                variants[entry] = files
    root = _candidates(package_dir)
    if root:
        variants[ROOT_VARIANT] = root
    return variants


def package_version(package_dir):
    """``__version__`` from sgl_kernel/version.py, read as text (importing would load torch).

    None when the file is missing or unreadable, or is not UTF-8 (Python could not import it either).
    """
    try:
        with open(os.path.join(package_dir, "version.py"), encoding="utf-8") as handle:
            match = re.search(r"""__version__\s*=\s*["']([^"']+)["']""", handle.read())
    except (OSError, UnicodeDecodeError):
        return None
    return match.group(1) if match else None


def _scan(package_dir, path):
    if not _is_compiled(path):
        return [], []  # a Python source fallback holds no device code
    try:
        code = scan_file(path)
    except FatbinError as exc:
        raise LayoutError(f"{os.path.relpath(path, package_dir)} in {package_dir} is not a readable shared "
                          f"object ({exc}); reinstall sglang-kernel") from None
    return list(code.sass), list(code.ptx)


def loader_choice(variants, capability):
    """(variant name or None, why) the loader tries first for ``capability`` among ``variants``."""
    first_choice = loader_subdir(capability)
    if first_choice in variants:
        return first_choice, f"the loader picks {first_choice}/ for capability {capability}"
    if ROOT_VARIANT in variants:
        return ROOT_VARIANT, (f"{first_choice}/common_ops.* is missing, so the loader falls back to the "
                              "package-root common_ops")
    return None, None


def inspect_layout(package_dir, capability):
    """Variants, the loader's selection for ``capability`` (canonical string or None) and coverage."""
    if not os.path.isdir(package_dir):
        raise LayoutError(f"package_dir {package_dir} is not a directory; give the sgl_kernel package "
                          "directory (…/site-packages/sgl_kernel)")
    found = find_variants(package_dir)
    variants = {}
    for name, files in found.items():
        sass, ptx = _scan(package_dir, files[0])
        variants[name] = {"path": files[0], "sass": sass, "ptx": ptx, "other_files": files[1:],
                          "runs_on": runs_on(sass, ptx, capability) if capability else None}
    first_choice = loader_subdir(capability)
    selected, how = loader_choice(variants, capability)
    result = {"package_dir": package_dir, "package_version": package_version(package_dir),
              "capability": capability, "variants": variants, "selected_variant": selected,
              "selected_path": variants[selected]["path"] if selected else None,
              "selected_covers": None}
    if selected is None:
        result["selected_covers"] = False
        result["message"] = (f"no {first_choice}/common_ops.* and no package-root common_ops.* in "
                             f"{package_dir}: the loader finds nothing to load in the package, so import "
                             "sgl_kernel could only succeed through its last fallback, a top-level "
                             "common_ops module elsewhere on sys.path (else \"Could not load any common_ops "
                             "library\"); reinstall sglang-kernel")
        return result
    chosen = variants[selected]
    name = os.path.relpath(chosen["path"], package_dir)
    if capability is None:
        result["message"] = (f"no GPU capability given or found, so coverage is unknown; without a GPU "
                             f"the loader tries {name} first, which holds "
                             f"{describe_archs(chosen['sass'], chosen['ptx'])}")
        return result
    result["selected_covers"] = bool(chosen["runs_on"])
    if chosen["runs_on"]:
        how_runs = "native SASS" if chosen["runs_on"] == "sass" else "PTX JIT-compiled by the driver"
        result["message"] = f"{how}: {name} runs on {capability} ({how_runs})"
        return result
    advice = [f"install an sglang-kernel build whose {first_choice}/common_ops has code for {capability} "
              f"({describe_targets(capability)}) or build it from source for that target"]
    for other, variant in variants.items():
        if other == selected or not variant["runs_on"]:
            continue
        other_name = os.path.relpath(variant["path"], package_dir)
        if other == ROOT_VARIANT:
            advice.append(f"{other_name} has code for {capability}, but the loader falls back to it only "
                          f"when {name} fails to load")
        else:
            advice.append(f"{other_name} has code for {capability} but the loader does not pick it for "
                          "this capability")
    code = describe_archs(chosen["sass"], chosen["ptx"])
    result["message"] = f"{name} has no code for {capability}: {code} ({how}); " + "; ".join(advice)
    return result
