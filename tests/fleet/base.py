"""The Debian base root filesystem every fleet host starts from (read-only overlay lower layer).

Built once by debootstrap from the machine's own apt mirror, post-processed so that nothing
host-specific is baked in (machine-id, ssh host keys, resolv.conf, hostname), and cached as a
tarball keyed by suite + architecture + package list + recipe version. The unpacked tree next to the
tarball is the layer the hosts use; it is restored from the tarball when missing.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

from cache import cache_dir  # tests/cache.py: the one cache root (tests/ is on sys.path)

from .system import FleetError, require_tools, run

# Bump when the post-processing below changes: it is part of the cache key.
RECIPE_VERSION = 1

# What roles may rely on in a host. apt cannot reach the internet from a host: bake packages in.
BASE_PACKAGES = (
    "python3", "python3-venv", "python3-pip", "python3-dev", "python3-apt", "systemd", "systemd-sysv",
    "dbus", "openssh-server", "iproute2", "procps", "ca-certificates", "g++", "make", "sudo",
)

# Timers and units that only make sense on a machine with internet or real disks.
MASKED_UNITS = ("apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer", "e2scrub_reap.service",
                "fstrim.timer")

SSHD_CONFIG = """\
# fleet hosts: one host key, generated per host; key-only root login; no reverse lookups
HostKey /etc/ssh/ssh_host_ed25519_key
PasswordAuthentication no
PermitRootLogin prohibit-password
UseDNS no
"""


def _os_release() -> Dict[str, str]:
    fields = {}
    for line in Path("/etc/os-release").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep:
            fields[key] = value.strip().strip('"')
    return fields


def _apt_sources(etc_apt: Path) -> List[Tuple[List[str], List[str], List[str], List[str]]]:
    """(types, uris, suites, components) of every enabled entry, in the order apt reads them."""
    entries = []
    one_line = [etc_apt / "sources.list", *sorted((etc_apt / "sources.list.d").glob("*.list"))]
    for path in one_line:
        if not path.is_file():
            continue
        for number, raw in enumerate(path.read_text().splitlines(), 1):
            words = raw.split("#", 1)[0].split()
            if words[:1] not in (["deb"], ["deb-src"]):
                continue
            if words[1:] and words[1].startswith("["):  # options: [arch=amd64 signed-by=...]
                close = next((i for i, w in enumerate(words) if w.endswith("]")), None)
                words = [words[0], *words[close + 1:]] if close is not None else []
            if len(words) < 3:
                raise FleetError(f"{path}:{number}: not an apt source line (deb [options] URI suite "
                                 f"[components]): {raw.strip()!r}; fix it (apt cannot read it either) or set "
                                 f"SGLANG_FLEET_APT_MIRROR")
            entries.append(([words[0]], [words[1]], [words[2]], words[3:]))
    for path in sorted((etc_apt / "sources.list.d").glob("*.sources")):
        for stanza in _deb822(path.read_text()):
            if stanza.get("enabled", "yes").lower() == "no":
                continue
            entries.append(tuple(stanza.get(k, "").split() for k in ("types", "uris", "suites",
                                                                     "components")))
    return entries


def _deb822(text: str) -> List[Dict[str, str]]:
    stanzas, current, key = [], {}, None
    for line in [*text.splitlines(), ""]:
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                stanzas.append(current)
            current, key = {}, None
        elif line[0] in " \t" and key:
            current[key] += " " + line.strip()
        else:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            current[key] = value.strip()
    return stanzas


def apt_mirror(suite: str, etc_apt: Path = Path("/etc/apt")) -> str:
    """The Debian mirror this machine's apt uses for ``suite`` (``SGLANG_FLEET_APT_MIRROR`` overrides)."""
    override = os.environ.get("SGLANG_FLEET_APT_MIRROR")
    if override:
        return override
    for types, uris, suites, components in _apt_sources(etc_apt):
        if "deb" in types and suite in suites and "main" in components:
            for uri in uris:
                if uri.startswith(("http://", "https://", "file:/")):
                    return uri
    raise FleetError(f"no apt source for suite {suite!r} with component main in {etc_apt}/sources.list"
                     f"{{,.d/*.list,.d/*.sources}}; set SGLANG_FLEET_APT_MIRROR to a Debian mirror URL")


def base_spec() -> Dict[str, object]:
    """What the base is made of; its hash is the cache key."""
    suite = os.environ.get("SGLANG_FLEET_SUITE") or _os_release().get("VERSION_CODENAME")
    if not suite:
        raise FleetError("cannot tell the Debian suite from /etc/os-release; set SGLANG_FLEET_SUITE")
    extra = os.environ.get("SGLANG_FLEET_EXTRA_PACKAGES", "").replace(",", " ").split()
    arch = run(["dpkg", "--print-architecture"]).stdout.strip()
    return {"suite": suite, "arch": arch, "packages": sorted(set(BASE_PACKAGES) | set(extra)),
            "recipe": RECIPE_VERSION}


def base_key(spec: Dict[str, object]) -> str:
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]
    return f"{spec['suite']}-{spec['arch']}-{digest}"


def _tar_compression() -> Tuple[str, List[str]]:
    return (".tar.zst", ["--zstd"]) if shutil.which("zstd") else (".tar", [])


def _postprocess(root: Path) -> None:
    """Remove everything that must differ between hosts; the harness writes it per host."""
    (root / "etc/machine-id").write_text("")
    dbus_id = root / "var/lib/dbus/machine-id"
    if dbus_id.exists() or dbus_id.is_symlink():
        dbus_id.unlink()
    dbus_id.parent.mkdir(parents=True, exist_ok=True)
    dbus_id.symlink_to("/etc/machine-id")
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/ssh/sshd_config.d").mkdir(exist_ok=True)
    (root / "etc/ssh/sshd_config.d/fleet.conf").write_text(SSHD_CONFIG)
    for name in ("etc/resolv.conf", "etc/hostname"):
        if (root / name).exists() or (root / name).is_symlink():
            (root / name).unlink()
    for unit in MASKED_UNITS:  # what `systemctl mask` does, without needing systemctl here
        link = root / "etc/systemd/system" / unit
        if link.exists() or link.is_symlink():
            link.unlink()
        link.symlink_to("/dev/null")
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()


def _debootstrap(spec: Dict[str, object], target: Path, log: Path) -> None:
    suite = str(spec["suite"])
    mirror = apt_mirror(suite)
    cmd = ["debootstrap", "--variant=minbase", f"--arch={spec['arch']}",
           "--include=" + ",".join(spec["packages"]), suite, str(target), mirror]
    with open(log, "w") as out:
        out.write(" ".join(cmd) + "\n")
    proc = run(cmd, check=False, timeout=1800)
    with open(log, "a") as out:
        out.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise FleetError(f"debootstrap of {suite} from {mirror} failed (full log: {log}):\n"
                         + "\n".join(tail))


def ensure_base(rebuild: bool = False, cache: Optional[Path] = None) -> Path:
    """Path of the unpacked base rootfs, building or restoring it first if needed (locked)."""
    require_tools()
    cache = cache or cache_dir("fleet-base")
    spec = base_spec()
    key = base_key(spec)
    suffix, tar_flags = _tar_compression()
    tarball, tree, ready = cache / f"{key}{suffix}", cache / f"{key}.rootfs", cache / f"{key}.ready"
    with open(cache / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if rebuild:
            ready.unlink(missing_ok=True)
            tarball.unlink(missing_ok=True)
        if ready.exists() and tree.is_dir():
            return tree
        staging = cache / f"{key}.staging"
        shutil.rmtree(staging, ignore_errors=True)
        shutil.rmtree(tree, ignore_errors=True)
        started = time.monotonic()
        if tarball.exists():
            staging.mkdir()
            run(["tar", *tar_flags, "--numeric-owner", "--xattrs", "--xattrs-include=*",
                 "-xpf", str(tarball), "-C", str(staging)], timeout=900)
            how = f"restored from {tarball.name}"
        else:
            _debootstrap(spec, staging, cache / f"{key}.log")
            _postprocess(staging)
            partial = tarball.with_name(tarball.name + ".partial")
            run(["tar", *tar_flags, "--numeric-owner", "--xattrs", "--xattrs-include=*",
                 "-cf", str(partial), "-C", str(staging), "."], timeout=900)
            partial.rename(tarball)
            (cache / f"{key}.json").write_text(json.dumps(spec, indent=1) + "\n")
            how = f"built by debootstrap, cached as {tarball.name}"
        staging.rename(tree)
        ready.write_text(f"{how} in {time.monotonic() - started:.1f} s\n")
        return tree
