"""Scan binaries and rate them against GPU capabilities: the logic behind the cuda_binary_archs module.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

from ansible.module_utils.cuda_arch import capability_tuple, parse_capability, runs_on
from ansible.module_utils.cuda_fatbin import iter_candidate_files, scan_file

MAX_FILES_IN_MESSAGE = 10


def inspect_binaries(paths, capabilities):
    """Scan ``paths`` (files and directories) and rate each file with device code on ``capabilities``.

    ``capabilities`` is a list of user strings ("12.0", "120", "sm_120"); raises ArchError for a bad one
    and FatbinError for a missing path or an unreadable, truncated or corrupt binary. Returns
    {"files": [...], "missing": {capability: [paths]}, "counts": {...}}: see the module's RETURN.
    """
    capabilities = list(dict.fromkeys(parse_capability(text) for text in capabilities))
    files = []
    missing = {capability: [] for capability in capabilities}
    for path in iter_candidate_files(paths):
        code = scan_file(path)
        entry = {"path": path, "sass": code.sass, "ptx": code.ptx, "runs_on": {}}
        if code.lto:
            entry["lto"] = code.lto
        if code.sass or code.ptx or code.lto:
            for capability in capabilities:
                how = runs_on(code.sass, code.ptx, capability)
                entry["runs_on"][capability] = how
                if not how:
                    missing[capability].append(path)
        files.append(entry)
    with_code = sum(1 for entry in files if entry["sass"] or entry["ptx"] or entry.get("lto"))
    counts = {"files": len(files), "with_device_code": with_code,
              "without_device_code": len(files) - with_code}
    return {"files": files, "missing": missing, "counts": counts}


def describe_code(entry):
    """"sm_80, sm_90, compute_90" for a file entry of inspect_binaries."""
    names = entry["sass"] + entry["ptx"]
    if entry.get("lto"):
        names = names + [f"{name} (LTO-IR, runs only after a device link)" for name in entry["lto"]]
    return ", ".join(names)


def rebuild_hint(capability):
    """What code would run on ``capability`` ("12.0" -> sm_120, sm_120a, sm_120f or compute_120 PTX)."""
    major, _minor = capability_tuple(capability)
    number = capability.replace(".", "")
    # Arch-specific targets (sm_XYa) exist from Hopper (9.0), family targets (sm_XYf) from Blackwell (10.x).
    also = []
    if major >= 9:
        also.append(f"sm_{number}a")
    if major >= 10:
        also.append(f"sm_{number}f")
    also.append(f"compute_{number} PTX")
    alternatives = ", ".join(also[:-1]) + " or " + also[-1] if len(also) > 1 else also[0]
    return f"rebuild them for sm_{number} ({alternatives} also works)"


def missing_message(report):
    """One actionable sentence per capability that some files cannot run on; "" when none."""
    by_path = {entry["path"]: entry for entry in report["files"]}
    with_code = report["counts"]["with_device_code"]
    sentences = []
    for capability, paths in report["missing"].items():
        if not paths:
            continue
        shown = [f"{path} (has {describe_code(by_path[path])})" for path in paths[:MAX_FILES_IN_MESSAGE]]
        if len(paths) > MAX_FILES_IN_MESSAGE:
            shown.append(f"and {len(paths) - MAX_FILES_IN_MESSAGE} more")
        sentences.append(
            f"no code for capability {capability} in {len(paths)} of {with_code} files with device code: "
            f"{', '.join(shown)}; {rebuild_hint(capability)}"
        )
    return "; ".join(sentences)
