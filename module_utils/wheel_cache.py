"""Which of a stack's pinned wheels a wheel cache lacks, and the pip requirements to fetch them.

A stack's lock files (``<stack>/locks/*.txt``) are written by ``uv pip compile --emit-index-url
--emit-find-links``: option lines (``--index-url``, ``--extra-index-url``, ``--find-links``) followed by
exact pins (``name==version``). A pin is cached when the cache holds a wheel of that name and version
for this machine (``any`` or the machine's architecture in its platform tag).

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import re
from urllib.parse import urlsplit

_OPTIONS = ("--index-url", "--extra-index-url", "--find-links", "--no-index", "-i", "-f")


class LockError(ValueError):
    """A lock file line that is neither a known option nor an exact pin."""


def canonical_name(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text, source="lock"):
    """(option lines, [(name, version)]) of a lock file's text."""
    options, pins = [], []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("-"):
            if line.split()[0].split("=")[0] not in _OPTIONS:
                raise LockError(f"{source}:{number}: unexpected option {line!r}")
            options.append(line)
            continue
        name, sep, version = line.partition("==")
        if not sep or not name.strip() or not version.strip() or ";" in version:
            raise LockError(f"{source}:{number}: {line!r} is not an exact pin (name==version)")
        pins.append((canonical_name(name.strip()), version.strip()))
    return options, pins


def wheel_key(filename):
    """(canonical name, version, platform tag) of a wheel file name; None for anything else."""
    if not filename.endswith(".whl"):
        return None
    parts = filename[:-4].split("-")
    if len(parts) not in (5, 6):
        return None
    return canonical_name(parts[0]), parts[1], parts[-1]


def _matches(pin_version, version, platform, machine):
    same = version == pin_version or ("+" not in pin_version and version.startswith(pin_version + "+"))
    return same and (platform == "any" or machine in platform)


def missing_pins(pins, cached_files, machine):
    """The pins no cached wheel satisfies, in lock order, as 'name==version'."""
    cached = [key for key in map(wheel_key, cached_files) if key]
    return [f"{name}=={version}" for name, version in pins
            if not any(n == name and _matches(version, v, p, machine) for n, v, p in cached)]


def download_requirements(options, missing, no_index=False):
    """pip requirements text that downloads ``missing`` from the sources the lock was resolved from."""
    lines = list(dict.fromkeys(options))
    if no_index:
        lines = [line for line in lines if not line.startswith(("--index-url", "--extra-index-url", "-i"))]
        lines.append("--no-index")
    hosts = []
    for line in lines:
        url = line.split(None, 1)[-1] if " " in line else line.partition("=")[2]
        if url.startswith("http://"):
            hosts.append(f"--trusted-host {urlsplit(url).netloc}")
    return "\n".join(lines + list(dict.fromkeys(hosts)) + missing) + "\n"
