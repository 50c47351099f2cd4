"""A profile's lock: one PEP 751 ``pylock.toml`` resolution, read, checked and narrowed to one host.

``make lock PROFILE=<name>`` writes ``profiles/pylock.<name>.toml`` with the profile's pinned uv
(``uv pip compile --universal --format pylock.toml``) for the profile's Python on Linux x86_64 and
aarch64. Hosts never resolve: the stack role narrows the lock to the host's platform and Python here
(one wheel per package, the one the host's tags prefer), and installs exactly those files,
hash-checked, with ``uv pip sync``.

A file's identity is its name and sha256, not the URL the lock recorded: a mirror, the controller's
wheel cache or an offline bundle satisfies the lock as long as the hashes match.

Runs on the controller (Python >= 3.11: tomllib; ``packaging`` comes with ansible-core).
"""

import hashlib
import json
import re

try:
    import tomllib
except ImportError:  # pragma: no cover - the controller's Python is >= 3.11 (ansible-core 2.19)
    tomllib = None

try:
    from packaging.markers import InvalidMarker, Marker
    from packaging.tags import Tag, compatible_tags, cpython_tags
    from packaging.utils import canonicalize_name
except ImportError:  # pragma: no cover - ansible-core depends on packaging
    Marker = None

# The platforms a lock is made for (GB10 and GB200 hosts are ARM).
LOCK_MACHINES = ("x86_64", "aarch64")
# The oldest glibc a manylinux wheel may need, when the host's is not known.
DEFAULT_GLIBC = "2.28"
# Not part of a stack: the lock carries the pinned uv (for the tools directory), not the environment.
TOOL_PACKAGES = ("uv",)


class LockError(ValueError):
    """A lock that cannot be used; the message says which file and what to do."""


def lock_file_name(profile_name):
    """PEP 751 names a lock ``pylock.<name>.toml``."""
    return f"pylock.{profile_name}.toml"


def read_lock(path):
    """(lock mapping, sha256 of the file) of ``path``; LockError naming the file when it is unusable."""
    if tomllib is None:  # pragma: no cover
        raise LockError("reading a pylock.toml needs Python >= 3.11 on the controller")
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        raise LockError(f"{path} does not exist") from None
    except OSError as exc:
        raise LockError(f"{path} cannot be read: {exc.strerror}") from None
    try:
        lock = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise LockError(f"{path} is not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise LockError(f"{path} is not valid TOML: {exc}") from None
    if not isinstance(lock.get("lock-version"), str) or not isinstance(lock.get("packages"), list):
        raise LockError(f"{path} is not a PEP 751 lock (no lock-version or no [[packages]])")
    return lock, hashlib.sha256(data).hexdigest()


def _name(package):
    return canonicalize_name(package.get("name", ""))


def lock_versions(lock):
    """{canonical name: version} of every package in the lock."""
    return {_name(package): str(package.get("version", "")) for package in lock["packages"]}


def profile_pins(profile):
    """(canonical name, version) of every pin a profile makes that its lock must hold."""
    pins = [
        ("torch", profile["torch"]["version"]),
        ("sglang", profile["sglang"]["version"]),
        (profile["flashinfer"]["package"], profile["flashinfer"]["version"]),
        ("uv", profile["uv"]["version"]),
    ]
    if profile["sgl_kernel"]["install"] != "source":
        pins.append((profile["sgl_kernel"]["package"], profile["sgl_kernel"]["version"]))
    return [(canonicalize_name(name), version) for name, version in pins]


def lock_requirements(profile):
    """The requirements ``make lock`` resolves: the profile's pins, on Linux x86_64 and aarch64."""
    marker = (
        'sys_platform == "linux" and ('
        + " or ".join(f'platform_machine == "{machine}"' for machine in LOCK_MACHINES)
        + ")"
    )
    flashinfer = profile["flashinfer"]
    extras = f"[{','.join(flashinfer['extras'])}]" if flashinfer["extras"] else ""
    lines = [
        f"torch=={profile['torch']['version']}",
        f"sglang=={profile['sglang']['version']}",
        f"{flashinfer['package']}{extras}=={flashinfer['version']}",
        f"uv=={profile['uv']['version']}",
    ]
    kernel = profile["sgl_kernel"]
    if kernel["install"] != "source":
        lines.append(f"{kernel['package']}=={kernel['version']}")
    return [f"{line} ; {marker}" for line in lines]


def pin_problems(profile, lock, lock_path, profile_name):
    """Why the lock no longer matches the profile's pins (empty: it matches)."""
    versions = lock_versions(lock)
    problems = []
    for name, version in profile_pins(profile):
        have = versions.get(name)
        if have is None:
            problems.append(f"{name}: the profile pins {version}, {lock_path} has no {name}")
        elif have != version:
            problems.append(f"{name}: the profile pins {version}, {lock_path} has {have}")
    if problems:
        problems.append(f"run `make lock PROFILE={profile_name}` and commit {lock_path}")
    return problems


def marker_environment(machine, python_version):
    """The PEP 508 environment of a Linux CPython host of ``machine`` running ``python_version``."""
    full = python_version if python_version.count(".") >= 2 else python_version + ".0"
    return {
        "implementation_name": "cpython",
        "implementation_version": full,
        "os_name": "posix",
        "platform_machine": machine,
        "platform_python_implementation": "CPython",
        "platform_release": "",
        "platform_system": "Linux",
        "platform_version": "",
        "python_full_version": full,
        "python_version": ".".join(full.split(".")[:2]),
        "sys_platform": "linux",
    }


def host_tags(machine, python_version, glibc=DEFAULT_GLIBC):
    """Wheel tags such a host installs, most preferred first (as pip and uv order them)."""
    major, minor = (int(part) for part in python_version.split(".")[:2])
    glibc_major, glibc_minor = (int(part) for part in glibc.split(".")[:2])
    platforms = [
        f"manylinux_{glibc_major}_{m}_{machine}"
        for m in range(glibc_minor, -1, -1)
        if (glibc_major, m) >= (2, 5)
    ]
    legacy = {(2, 17): "manylinux2014", (2, 12): "manylinux2010", (2, 5): "manylinux1"}
    for (gmaj, gmin), alias in legacy.items():
        if (glibc_major, glibc_minor) >= (gmaj, gmin):
            platforms.insert(platforms.index(f"manylinux_{gmaj}_{gmin}_{machine}") + 1, f"{alias}_{machine}")
    platforms.append(f"linux_{machine}")
    tags = list(cpython_tags((major, minor), platforms=platforms))
    tags += list(compatible_tags((major, minor), f"cp{major}{minor}", platforms=platforms))
    return tags


def _wheel_tags(filename):
    stem = filename[:-4] if filename.endswith(".whl") else filename
    parts = stem.split("-")
    if len(parts) < 5:
        return set()
    pythons, abis, platforms = parts[-3], parts[-2], parts[-1]
    return {
        Tag(py, abi, plat)
        for py in pythons.split(".")
        for abi in abis.split(".")
        for plat in platforms.split(".")
    }


def _file_name(entry):
    where = entry.get("url") or entry.get("path") or ""
    return entry.get("name") or where.rstrip("/").rsplit("/", 1)[-1]


def _applies(package, environment):
    marker = package.get("marker")
    if not marker:
        return True
    try:
        return Marker(marker).evaluate(environment)
    except InvalidMarker as exc:
        raise LockError(f"{package.get('name')}: invalid marker {marker!r}: {exc}") from None


def select(lock, machine, python_version, glibc=DEFAULT_GLIBC, lock_path="the lock", *, every_variant=False):
    """The one file per package that a Linux ``machine`` host with CPython ``python_version`` installs.

    Returns (files, problems): files are dicts name/version/filename/url/sha256/size, sorted by name;
    problems name each package the lock has no usable wheel for on that host (an sdist is never built
    on a host: that is a lock made for another platform or Python). With ``every_variant`` every wheel
    a host of that machine and Python may pick is returned (any glibc up to ``glibc``): what an offline
    bundle must carry for hosts whose glibc it does not know.
    """
    requires = lock.get("requires-python")
    environment = marker_environment(machine, python_version)
    problems = []
    if requires:
        try:
            fits = Marker(f"python_full_version {_spec(requires)}").evaluate(environment)
        except InvalidMarker:
            fits = True
        if not fits:
            problems.append(
                f"{lock_path} is for Python {requires}, the host's stack Python is {python_version}"
            )
            return [], problems
    ranking = {tag: index for index, tag in enumerate(host_tags(machine, python_version, glibc))}
    files = []
    for package in lock["packages"]:
        if not _applies(package, environment):
            continue
        best = None
        for wheel in package.get("wheels") or []:
            ranks = [ranking[tag] for tag in _wheel_tags(_file_name(wheel)) if tag in ranking]
            if ranks and (best is None or min(ranks) < best[0]):
                best = (min(ranks), wheel)
        if best is None:
            problems.append(
                f"{package.get('name')} {package.get('version')}: {lock_path} has no wheel for "
                f"CPython {python_version} on Linux {machine} (glibc {glibc})"
            )
            continue
        wheel = best[1]
        sha256 = (wheel.get("hashes") or {}).get("sha256")
        if not sha256:
            problems.append(f"{_file_name(wheel)}: {lock_path} records no sha256 for it")
            continue
        files.append(
            {
                "name": _name(package),
                "version": str(package.get("version", "")),
                "filename": _file_name(wheel),
                "url": wheel.get("url") or "",
                "sha256": sha256,
                "size": wheel.get("size"),
            }
        )
    files.sort(key=lambda item: (item["name"], item["filename"]))
    return files, problems


def _spec(requires):
    """'>=3.11' -> '>= "3.11"' for a marker; several clauses joined with 'and'."""
    clauses = []
    for clause in requires.split(","):
        match = re.match(r"\s*(~=|==|!=|<=|>=|<|>)\s*([\w.*]+)\s*$", clause)
        if not match:
            raise InvalidMarker(clause)
        clauses.append(f"{match.group(1)} '{match.group(2)}'")
    return (" and python_full_version ").join(clauses)


def requirements_text(files):
    """A requirements file of exact pins with their one hash each, for ``uv pip sync --require-hashes``."""
    return "".join(f"{item['name']}=={item['version']} --hash=sha256:{item['sha256']}\n" for item in files)


def coverage(lock, python_version, glibc=DEFAULT_GLIBC, machines=LOCK_MACHINES):
    """{machine: [problems]} for each platform a lock should cover (empty list: fully covered)."""
    return {machine: select(lock, machine, python_version, glibc)[1] for machine in machines}


def coverage_header(covered, python_version, glibc):
    """Comment lines that head a lock: the platforms it covers, and each package without a wheel."""
    states = "; ".join(
        f"Linux {machine} {'complete' if not missing else 'INCOMPLETE'}"
        for machine, missing in covered.items()
    )
    lines = [f"# Platforms: {states} (CPython {python_version}, glibc >= {glibc})."]
    lines += [f"# no wheel: {problem}" for missing in covered.values() for problem in missing]
    return "".join(line + "\n" for line in lines)


def split_tools(files):
    """(stack files, tool files): the pinned uv goes to the tools directory, not into the stack."""
    stack = [item for item in files if item["name"] not in TOOL_PACKAGES]
    tools = [item for item in files if item["name"] in TOOL_PACKAGES]
    return stack, tools


def check_python_version(value):
    if not isinstance(value, str) or not re.fullmatch(r"\d+\.\d+(\.\d+)?", value):
        raise LockError(f"python version must look like 3.11 or 3.11.7, got {value!r}")
    return value


def wheel_urls(lock):
    """{wheel file name: url} of every wheel a lock records with a URL."""
    urls = {}
    for package in lock.get("packages") or []:
        for wheel in package.get("wheels") or []:
            if wheel.get("url"):
                urls[_file_name(wheel)] = wheel["url"]
    return urls


def _toml(value):
    """A TOML basic string (JSON's escapes are TOML's for the characters these files hold)."""
    return json.dumps(str(value), ensure_ascii=False)


def render_lock(distributions, *, requires_python=None, urls=None, header=()):
    """PEP 751 text for exactly ``distributions`` ([{name, version, wheels: [{file, sha256}]}]).

    Each wheel gets the URL ``urls`` knows for its file name (the profile's lock), else a ``path`` beside
    the lock file (the wheel is in the controller's wheel cache or the kernel's artifact store). A
    distribution without a known wheel cannot be installed from a lock: it is listed in a comment.
    """
    urls = urls or {}
    lines = [f"# {line}" for line in header]
    unplaced = [f"{d['name']}=={d['version']}" for d in distributions if not d.get("wheels")]
    if unplaced:
        lines.append("# not in this lock (no wheel of it was kept): " + ", ".join(unplaced))
    lines += ['lock-version = "1.0"', 'created-by = "sglang-fleet snapshot"']
    if requires_python:
        lines.append(f"requires-python = {_toml(requires_python)}")
    for dist in distributions:
        if not dist.get("wheels"):
            continue
        lines += [
            "",
            "[[packages]]",
            f"name = {_toml(dist['name'])}",
            f"version = {_toml(dist['version'])}",
            "wheels = [",
        ]
        for wheel in sorted(dist["wheels"], key=lambda w: w["file"]):
            where = (
                f"url = {_toml(urls[wheel['file']])}"
                if wheel["file"] in urls
                else f"path = {_toml(wheel['file'])}"
            )
            lines.append(
                f"    {{ name = {_toml(wheel['file'])}, {where}, "
                f"hashes = {{ sha256 = {_toml(wheel['sha256'])} }} }},"
            )
        lines.append("]")
    return "\n".join(lines) + "\n"
