"""Every Python distribution installed in an environment, asked of the environment's own interpreter.

A snapshot of a working host records each distribution with its version and a hash of its RECORD (the
list of installed files with their own hashes, written at install time, less the installer's own
bookkeeping: INSTALLER, REQUESTED, direct_url.json, uv_cache.json); the verify job compares a
host's current list against that record, so a package upgraded, added or removed by hand shows up as
drift naming the package. Nothing is imported from the environment: ``importlib.metadata`` reads the
``*.dist-info`` directories (see python_probe for why it runs as a child process).

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import re

from ansible.module_utils.python_probe import ProbeError, run_probe

# Runs in the inspected interpreter (stdlib only, Python 3.8+); PRELUDE defines answer().
PROBE = r"""
import hashlib
try:
    from importlib import metadata
except ImportError:
    answer({"error": "importlib.metadata is missing: Python 3.8 or newer is needed"})
# Installer bookkeeping, not the package's files: how it was installed (a file path, an index), when,
# whether it was asked for by name. The same wheel installed another way must hash the same.
BOOKKEEPING = ("INSTALLER", "REQUESTED", "direct_url.json", "uv_cache.json")
found = {}
for dist in metadata.distributions():
    name = dist.metadata["Name"]
    if not name:
        continue  # a dist-info without a name is debris of a broken uninstall
    record = "".join(
        line + "\n" for line in (dist.read_text("RECORD") or "").splitlines()
        if not (".dist-info/" in line.split(",", 1)[0]
                and line.split(",", 1)[0].rsplit("/", 1)[1] in BOOKKEEPING))
    entry = {
        "name": name,
        "version": dist.version,
        "installer": (dist.read_text("INSTALLER") or "").strip(),
        "record_sha256": hashlib.sha256(record.encode("utf-8")).hexdigest() if record else None,
        "direct_url": dist.read_text("direct_url.json"),
    }
    # sys.path order: the first distribution of a name is the one that imports
    found.setdefault(name.lower(), entry)
answer({"distributions": list(found.values()), "executable": sys.executable,
        "python_version": "%d.%d.%d" % sys.version_info[:3]})
"""

_NORMALIZE = re.compile(r"[-_.]+")


def canonical_name(name):
    """PEP 503 normalised name: "Sglang_Kernel" and "sglang.kernel" are both "sglang-kernel"."""
    return _NORMALIZE.sub("-", name).lower()


class DistributionsError(Exception):
    """The environment cannot be listed; the message says what to do."""


def probe_distributions(python, timeout=120):
    """{"python", "python_version", "distributions": [{name (canonical), version, installer,
    record_sha256, direct_url}]} sorted by name."""
    try:
        facts = run_probe(python, PROBE, timeout=timeout, what="the distribution listing")
    except ProbeError as exc:
        raise DistributionsError(str(exc)) from None
    if facts.get("error"):
        raise DistributionsError(f"{python}: {facts['error']}")
    distributions = []
    for entry in facts["distributions"]:
        entry["name"] = canonical_name(entry["name"])
        distributions.append(entry)
    distributions.sort(key=lambda d: d["name"])
    return {"python": facts["executable"], "python_version": facts["python_version"],
            "distributions": distributions}
