"""Scan binaries and rate them against GPU capabilities: the logic behind the cuda_binary_archs module.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

from ansible.module_utils.cuda_arch import describe_archs, describe_targets, runs_on
from ansible.module_utils.cuda_fatbin import iter_candidate_files, scan_file

MAX_FILES_IN_MESSAGE = 10


def inspect_binaries(paths, capabilities):
    """Scan ``paths`` (files and directories) and rate each file with device code on ``capabilities``.

    ``capabilities`` are canonical strings (cuda_arch.parse_requirements); raises FatbinError for a
    missing path or an unreadable, truncated or corrupt binary. Returns
    {"files": [...], "missing": {capability: [paths]}, "counts": {...}}: see the module's RETURN.
    """
    files, with_code = [], 0
    missing = {capability: [] for capability in capabilities}
    for path in iter_candidate_files(paths):
        code = scan_file(path)
        entry = {"path": path, "sass": code.sass, "ptx": code.ptx, "runs_on": {}}
        if code.lto:
            entry["lto"] = code.lto
        if code.sass or code.ptx or code.lto:
            with_code += 1
            for capability in capabilities:
                how = runs_on(code.sass, code.ptx, capability)
                entry["runs_on"][capability] = how
                if not how:
                    missing[capability].append(path)
        files.append(entry)
    counts = {"files": len(files), "with_device_code": with_code,
              "without_device_code": len(files) - with_code}
    return {"files": files, "missing": missing, "counts": counts}


def missing_message(report):
    """One actionable sentence per capability that some files cannot run on; "" when none."""
    by_path = {entry["path"]: entry for entry in report["files"]}
    with_code = report["counts"]["with_device_code"]
    sentences = []
    for capability, paths in report["missing"].items():
        if not paths:
            continue
        shown = []
        for path in paths[:MAX_FILES_IN_MESSAGE]:
            entry = by_path[path]
            shown.append(f"{path} (has {describe_archs(entry['sass'], entry['ptx'], entry.get('lto', ()))})")
        if len(paths) > MAX_FILES_IN_MESSAGE:
            shown.append(f"and {len(paths) - MAX_FILES_IN_MESSAGE} more")
        sentences.append(
            f"no code for capability {capability} in {len(paths)} of {with_code} files with device code: "
            f"{', '.join(shown)}; rebuild them for {describe_targets(capability)}"
        )
    return "; ".join(sentences)
