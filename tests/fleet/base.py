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
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

from cache import cache_dir  # tests/cache.py: the one cache root (tests/ is on sys.path)

from . import claims
from .system import FleetError, require_tools, run, unmount_under

# Bump when the post-processing below changes: it is part of the cache key.
RECIPE_VERSION = 1
LOCK_WAIT = 2400  # seconds to wait for another base build (debootstrap may take up to 1800)

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


def _debootstrap(spec: Dict[str, object], target: Path, log: Path, keep_fds: Tuple[int, ...]) -> None:
    suite = str(spec["suite"])
    mirror = apt_mirror(suite)
    cmd = ["debootstrap", "--variant=minbase", f"--arch={spec['arch']}",
           "--include=" + ",".join(spec["packages"]), suite, str(target), mirror]
    with open(log, "w") as out:
        out.write(" ".join(cmd) + "\n")
    proc = run(cmd, check=False, timeout=1800, pass_fds=keep_fds)
    with open(log, "a") as out:
        out.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-15:]
        raise FleetError(f"debootstrap of {suite} from {mirror} failed (full log: {log}):\n"
                         + "\n".join(tail))


@contextmanager
def _locked(lock: Path, shared: bool) -> Iterator[int]:
    """flock ``lock``; yields the descriptor, which children that must keep the lock inherit."""
    deadline = time.monotonic() + LOCK_WAIT
    with open(lock, "a") as handle:
        while True:
            try:
                fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise FleetError(f"{lock} stayed locked for {LOCK_WAIT} s: a base build runs (maybe a "
                                     f"debootstrap left by a killed run); see `fuser -v {lock}`") from None
                time.sleep(0.5)
        yield handle.fileno()


def _fleets_using(tree: Path) -> List[str]:
    """Fleets on this machine, from any cache root, whose hosts have ``tree`` as their lower layer."""
    return [c["name"] for c in claims.all_claims()
            if c.get("base") and Path(c["base"]).resolve() == tree.resolve()]


def _discard(path: Path) -> None:
    """Remove a tree a killed build may have left, with whatever it mounted inside (debootstrap mounts
    proc and sys in its target): unmounted first, so rmtree never walks into them."""
    if path.exists():
        unmount_under(path)
        shutil.rmtree(path)


@contextmanager
def in_use(tree: Path) -> Iterator[None]:
    """Hold while a fleet claims ``tree`` as its base: no rebuild can start until the claim shows."""
    with _locked(tree.with_suffix(".lock"), shared=True):
        if not (tree.with_suffix(".ready").exists() and tree.is_dir()):
            raise FleetError(f"the base {tree} went away (rebuilt or removed meanwhile); try again")
        yield


def ensure_base(rebuild: bool = False, cache: Optional[Path] = None) -> Path:
    """Path of the unpacked base rootfs, building or restoring it first if needed.

    Refuses to replace a tree that fleets are running on. Each attempt builds in a staging directory
    of its own, renamed into place when complete; the build's children inherit the lock, so a build
    orphaned by a killed harness keeps it until it ends, and the next attempt waits for it, then
    discards what it left.
    """
    require_tools()
    cache = cache or cache_dir("fleet-base")
    spec = base_spec()
    key = base_key(spec)
    suffix, tar_flags = _tar_compression()
    tarball, tree, ready = cache / f"{key}{suffix}", cache / f"{key}.rootfs", cache / f"{key}.ready"
    with _locked(tree.with_suffix(".lock"), shared=False) as lock_fd:
        if ready.exists() and tree.is_dir() and not rebuild:
            return tree
        users = _fleets_using(tree) if tree.exists() else []
        if users:
            raise FleetError(f"the base {tree} is the lower layer of running fleets ({', '.join(users)}); "
                             f"{'rebuilding' if rebuild else 'restoring'} it would pull it from under their "
                             f"hosts: `python tests/fleet down --name N` for each first")
        ready.unlink(missing_ok=True)
        if rebuild:
            tarball.unlink(missing_ok=True)
        for stale in [tree, *cache.glob(f"{key}.staging*"), *cache.glob(f"{key}*.partial")]:
            if stale.is_dir():
                _discard(stale)
            else:
                stale.unlink(missing_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f"{key}.staging-", dir=cache))
        staging.chmod(0o755)  # the hosts' "/"
        started = time.monotonic()
        if tarball.exists():
            run(["tar", *tar_flags, "--numeric-owner", "--xattrs", "--xattrs-include=*",
                 "-xpf", str(tarball), "-C", str(staging)], timeout=900, pass_fds=(lock_fd,))
            how = f"restored from {tarball.name}"
        else:
            _debootstrap(spec, staging, cache / f"{key}.log", (lock_fd,))
            _postprocess(staging)
            partial = tarball.with_name(tarball.name + ".partial")
            run(["tar", *tar_flags, "--numeric-owner", "--xattrs", "--xattrs-include=*",
                 "-cf", str(partial), "-C", str(staging), "."], timeout=900, pass_fds=(lock_fd,))
            partial.rename(tarball)
            (cache / f"{key}.json").write_text(json.dumps(spec, indent=1) + "\n")
            how = f"built by debootstrap, cached as {tarball.name}"
        staging.rename(tree)
        ready.write_text(f"{how} in {time.monotonic() - started:.1f} s\n")
        return tree
