"""Lock files: what a working host really runs, written by snapshot.yml, enforced by reproduce.yml and
compared by verify.yml.

A lock (``locks/<name>.lock.yml``) records the toolkit and driver, torch (version, git hash, index,
wheel sha256), the kernel and sglang (versions, wheel sha256s, build fingerprint), every installed Python
distribution with the sha256 of the wheels it can be reinstalled from, the model unit's hash and the
target capabilities. Functions here build one from facts the playbooks collect, check a lock read from
disk, list drift between a lock and a host, and list the wheels a lock needs that a wheel store lacks.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import os
import re

from ansible.module_utils.python_dists import canonical_name

LOCK_VERSION = 1

# Top-level keys of a lock and whether a value is required (None allowed where a host may lack it).
LOCK_KEYS = ("lock_version", "name", "captured_from", "captured_at", "profile", "stack",
             "target_capabilities", "cuda", "driver", "torch", "sgl_kernel", "sglang", "unit",
             "distributions")

# Scalar facts compared by drift(): (dotted path, what it is, in words).
TRACKED = (
    ("stack.fingerprint", "stack fingerprint"),
    ("stack.python", "stack Python version"),
    ("target_capabilities", "target capabilities"),
    ("cuda.toolkit_version", "CUDA toolkit version"),
    ("driver.version", "driver version"),
    ("torch.version", "torch version"),
    ("torch.git_version", "torch git hash"),
    ("sgl_kernel.version", "sgl_kernel version"),
    ("sgl_kernel.build_fingerprint", "sgl_kernel build fingerprint"),
    ("sglang.version", "sglang version"),
    ("unit.sha256", "model unit file hash"),
)

# Drift outside the stack's environment: reproduce.yml cannot install it away (the cuda_toolchain,
# nvidia_driver and sglang_service roles own these); every other tracked item is the stack's.
HOST_ITEMS = ("cuda.toolkit_version", "driver.version", "unit.sha256")

_WHEEL_RE = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(?:-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


class LockError(ValueError):
    """A lock file that cannot be used; the message names the file's problem and what to do."""


def parse_wheel_filename(filename):
    """(canonical name, version) of a wheel file name, or None when it is not one."""
    match = _WHEEL_RE.match(filename)
    if not match:
        return None
    return canonical_name(match.group("name")), match.group("version")


def wheel_index(store):
    """{(canonical name, version): [{"file", "sha256"}, ...]} for a store listing {file name: sha256}."""
    index = {}
    for filename, sha256 in sorted((store or {}).items()):
        key = parse_wheel_filename(filename)
        if key:
            index.setdefault(key, []).append({"file": filename, "sha256": sha256})
    return index


def _get(data, dotted):
    for part in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def build_lock(name, facts, store, kernel_store=None):
    """A lock from the facts snapshot.yml collected on one host and the wheel store's listing.

    ``facts`` holds the lock's sections (see LOCK_KEYS) plus ``distributions`` as python_dists returns
    them; each distribution gets the wheels of its name and version found in ``store`` (``{file:
    sha256}``); torch, sgl_kernel and sglang get the sha256 of their own wheels the same way.
    ``kernel_store`` (``{file: sha256}`` of the sgl_kernel artifact store's directory for the kernel's
    build fingerprint), when given, is the only source of the kernel's wheels: a source build carries
    the released version number, so a released wheel of that version in ``store`` is another build.
    """
    index = wheel_index(store)
    kernel = _kernel_package(facts) if kernel_store is not None else None
    kernel_index = wheel_index(kernel_store)
    distributions = []
    for dist in sorted(facts.get("distributions") or [], key=lambda d: canonical_name(d["name"])):
        key = (canonical_name(dist["name"]), dist["version"])
        distributions.append({"name": key[0], "version": key[1],
                              "record_sha256": dist.get("record_sha256"),
                              "wheels": (kernel_index if key[0] == kernel else index).get(key, [])})
    lock = {"lock_version": LOCK_VERSION, "name": name}
    for key in LOCK_KEYS[2:-1]:
        value = facts.get(key)
        lock[key] = dict(value) if isinstance(value, dict) else value
    for section in ("torch", "sgl_kernel", "sglang"):
        entry = lock.get(section)
        if isinstance(entry, dict) and entry.get("version"):
            package = canonical_name(entry.get("package") or section)
            wheels = (kernel_index if package == kernel else index).get((package, entry["version"]), [])
            entry["wheel_sha256"] = sorted(w["sha256"] for w in wheels)
    lock["distributions"] = distributions
    return lock


def _kernel_package(lock):
    """Canonical name of the kernel distribution whose wheel comes from the sgl_kernel artifact store
    (the lock, or facts, record its package and build fingerprint), else None."""
    entry = lock.get("sgl_kernel") or {}
    if entry.get("package") and entry.get("build_fingerprint"):
        return canonical_name(entry["package"])
    return None


def validate_lock(lock, where="lock"):
    """Raise LockError when ``lock`` is not a usable lock (wrong version, missing keys, bad entries)."""
    if not isinstance(lock, dict):
        raise LockError(f"{where} is not a mapping; it must be a file written by playbooks/snapshot.yml")
    if lock.get("lock_version") != LOCK_VERSION:
        raise LockError(f"{where} has lock_version {lock.get('lock_version')!r}; this project reads version "
                        f"{LOCK_VERSION}: take a new snapshot with playbooks/snapshot.yml")
    absent = [key for key in LOCK_KEYS if key not in lock]
    if absent:
        raise LockError(f"{where} lacks {', '.join(absent)}; take a new snapshot with playbooks/snapshot.yml")
    unknown = sorted(set(lock) - set(LOCK_KEYS))
    if unknown:
        raise LockError(f"{where} has unknown keys {', '.join(unknown)}; a lock is written by "
                        "playbooks/snapshot.yml and not edited by hand")
    if not isinstance(lock["distributions"], list) or not lock["distributions"]:
        raise LockError(f"{where} lists no Python distributions")
    for index, dist in enumerate(lock["distributions"]):
        if not isinstance(dist, dict) or not dist.get("name") or not dist.get("version"):
            raise LockError(f"{where}: distributions[{index}] needs a name and a version")
        for wheel in dist.get("wheels") or []:
            if not _SHA256_RE.match(str(wheel.get("sha256", ""))):
                raise LockError(f"{where}: {dist['name']} wheel {wheel.get('file')!r} has no valid sha256")
    return lock


def drift(lock, current):
    """Differences between a lock and a host's current facts (same shape as a lock), as a list of
    {"item", "locked", "found", "scope", "message"}: tracked facts first, then distributions by name.
    ``scope`` is "stack" for what reproduce.yml installs away, "host" for the toolkit, driver and unit."""
    found = []
    for path, what in TRACKED:
        locked, now = _get(lock, path), _get(current, path)
        if locked != now:
            found.append({"item": path, "locked": locked, "found": now,
                          "scope": "host" if path in HOST_ITEMS else "stack",
                          "message": f"{what} is {now!r}, the lock has {locked!r}"})
    locked_dists = {d["name"]: d for d in lock.get("distributions") or []}
    current_dists = {canonical_name(d["name"]): d for d in current.get("distributions") or []}
    for name in sorted(set(locked_dists) | set(current_dists)):
        was, now = locked_dists.get(name), current_dists.get(name)
        if now is None:
            message = f"{name} {was['version']} is locked but not installed"
        elif was is None:
            message = f"{name} {now['version']} is installed but not in the lock"
        elif was["version"] != now["version"]:
            message = f"{name} is {now['version']}, the lock has {was['version']}"
        elif was.get("record_sha256") and was.get("record_sha256") != now.get("record_sha256"):
            message = (f"{name} {now['version']} was reinstalled from other files (its RECORD differs "
                       "from the lock's)")
        else:
            continue
        found.append({"item": f"distribution {name}", "locked": was and was["version"],
                      "found": now and now["version"], "scope": "stack", "message": message})
    return found


# Tracked facts of the stack that follow from its distributions: reinstalling the drifted distributions
# puts them back (the kernel's build record is written again by every reproduce install).
FOLLOW_DISTRIBUTIONS = ("torch.version", "torch.git_version", "sgl_kernel.version",
                        "sgl_kernel.build_fingerprint", "sglang.version")
_DISTRIBUTION = "distribution "


def repair(lock, current, found):
    """What reproduce.yml reinstalls to put the host back onto ``lock``, from its ``drift`` (``found``):
    {"reinstall": the locked distributions that differ (not installed, another version, or the same
    version from other files, which `uv pip sync` alone keeps), "in_place": the stack in use is the
    lock's own (same name) and all of its drift is in its distributions, so the wheels of ``reinstall``
    are the only ones the install needs; otherwise every wheel of the lock is}."""
    reinstall = [entry["item"][len(_DISTRIBUTION):] for entry in found
                 if entry["item"].startswith(_DISTRIBUTION) and entry["locked"] is not None]
    in_place = _get(current, "stack.name") == lock["stack"]["name"] and all(
        entry["scope"] == "host" or entry["item"].startswith(_DISTRIBUTION)
        or entry["item"] in FOLLOW_DISTRIBUTIONS for entry in found)
    return {"reinstall": reinstall, "in_place": in_place}


def missing_wheels(lock, store, kernel_store=None):
    """Distributions of ``lock`` that cannot be reinstalled from ``store`` ({file: sha256}), as messages:
    no wheel recorded, the wheel file gone, or present with another sha256. ``kernel_store`` (the
    artifact store's listing for the lock's kernel build), when given, is where the kernel's wheel must be."""
    return wheel_sources(lock, store, kernel_store)[1]


def wheel_sources(lock, store, kernel_store=None):
    """(usable, problems) for reinstalling ``lock`` from the wheel cache ``store`` and, for the kernel,
    the artifact store ``kernel_store`` (both {file: sha256}; see build_lock).

    ``usable``: every wheel whose file is present with the recorded sha256, as {"name", "version",
    "file", "sha256", "store": "wheel_cache" | "kernel_store"}; ``problems``: one message per
    distribution that has none.
    """
    kernel = _kernel_package(lock) if kernel_store is not None else None
    usable_all, problems = [], []
    for dist in lock["distributions"]:
        label = f"{dist['name']}=={dist['version']}"
        in_kernel_store = dist["name"] == kernel
        source, where = (kernel_store, "kernel artifact store") if in_kernel_store else (store, "wheel cache")
        wheels = dist.get("wheels") or []
        if not wheels:
            problems.append(f"{label}: the lock records no wheel for it (it was not in the {where} "
                            "when the snapshot was taken)")
            continue
        usable = [w for w in wheels if source.get(w["file"]) == w["sha256"]]
        if usable:
            usable_all.extend({"name": dist["name"], "version": dist["version"], "file": w["file"],
                               "sha256": w["sha256"],
                               "store": "kernel_store" if in_kernel_store else "wheel_cache"} for w in usable)
            continue
        present = [w["file"] for w in wheels if w["file"] in source]
        if present:
            problems.append(f"{label}: {', '.join(present)} in the {where} has another sha256 than "
                            "the lock records")
        else:
            problems.append(f"{label}: {', '.join(w['file'] for w in wheels)} is no longer in the {where}")
    return usable_all, problems


def hashed_requirements(lock):
    """Requirement lines pinning every distribution to its version and locked wheel hashes (for
    ``uv pip sync --require-hashes``)."""
    lines = []
    for dist in lock["distributions"]:
        hashes = " ".join(f"--hash=sha256:{w['sha256']}" for w in dist.get("wheels") or [])
        lines.append(f"{dist['name']}=={dist['version']}" + (f" {hashes}" if hashes else ""))
    return "\n".join(lines) + "\n"


def store_listing(directory, hash_file, wanted=None):
    """{wheel file name: sha256} of the wheels in ``directory``.

    ``hash_file(path)`` computes a sha256 (injected so the caller picks the reader; Ansible modules pass
    AnsibleModule.digest_from_file). Only ``*.whl`` files directly in ``directory`` count, and of those
    only the names ``wanted(name)`` accepts, when given (hashing a CUDA wheel cache takes seconds).
    """
    listing = {}
    for entry in sorted(os.listdir(directory)):
        path = os.path.join(directory, entry)
        if entry.endswith(".whl") and os.path.isfile(path) and (wanted is None or wanted(entry)):
            listing[entry] = hash_file(path)
    return listing


def wanted_by_facts(facts):
    """A ``wanted`` filter for store_listing: the wheel files of a distribution (name and version)
    that ``facts`` lists."""
    keys = {(canonical_name(d["name"]), d["version"]) for d in facts.get("distributions") or []}
    return lambda filename: parse_wheel_filename(filename) in keys


def wanted_by_lock(lock):
    """A ``wanted`` filter for store_listing: the wheel files ``lock`` records."""
    files = {w["file"] for d in lock["distributions"] for w in d.get("wheels") or []}
    return lambda filename: filename in files
