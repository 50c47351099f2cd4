"""Run the real stack roles (playbooks/site.yml) on the test fleet, with its wheelhouse as package source.

``StackRun`` holds what a session's ``fleet_stack`` fixture did (tests/integration/fleet/conftest.py) and
re-runs the playbook with the same settings, optionally with another profile. The fleet's hosts have no
internet: uv, torch 2.14.1 (the cu130 build) and its dependencies come from the wheelhouse served by the
controller (``--find-links``, no index), put there once by ``pip_download``.

A profile is passed through a second inventory source (``stack_profile``, its name or path, as a user
sets it in group_vars); the stack role publishes the loaded one as ``stack_profile_data``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import sglkernel
import yaml
from ansible_run import REPO_ROOT, PlayResult
from cache import pip_download, wheelhouse
from kernelpkg import BUILD_REQUIREMENTS
from pins import STABLE, UV_VERSION

SITE = REPO_ROOT / "playbooks" / "site.yml"
# torch 2.14.1 is the CUDA 13.0 build on x86_64 (PyPI); 2.13.0+cpu is the CPU build this machine carries.
STACK_WHEELS = ["torch==2.14.1", f"uv=={UV_VERSION}"]
CPU_TORCH = "torch==2.13.0+cpu"
# Left out of the seeded wheel cache, so the first activation has one wheel to keep (a small one).
UNCACHED_WHEEL = "mpmath-"


def fill_wheelhouse() -> Path:
    """uv, torch 2.14.1 and its dependencies, CPU torch 2.13.0 and its dependencies (several GB, once),
    the released sglang-kernel wheel (site.yml's sgl_kernel stage takes it in auto mode) and the kernel
    role's build tools (its venv is made before the wheel is scanned)."""
    pip_download([*STACK_WHEELS, *BUILD_REQUIREMENTS], deps=True)
    sglkernel.wheel()
    return pip_download([CPU_TORCH], deps=True)


def seed_wheel_cache(cache: Path, source: Path) -> str:
    """Hardlink every wheel of ``source`` into ``cache`` but one; returns the name of the one left out."""
    cache.mkdir(parents=True, exist_ok=True)
    left_out = ""
    for wheel in sorted(source.glob("*.whl")):
        if wheel.name.startswith(UNCACHED_WHEEL):
            left_out = wheel.name
            continue
        target = cache / wheel.name
        if not target.exists():
            try:
                os.link(wheel, target)
            except OSError:
                shutil.copy2(wheel, target)
    assert left_out, f"the wheelhouse {source} has no {UNCACHED_WHEEL}* wheel (a torch dependency)"
    return left_out


SEEDED_UV_CACHE = "/sglang-uv-cache"  # a new top-level directory: the overlay has never looked it up


def seed_uv_cache(fleet, workdir: Path, hosts: list[dict]) -> Path:
    """One uv cache holding torch 2.14.1 and its dependencies, hardlinked into the writable layer of
    ``hosts`` (those that get a stack) at SEEDED_UV_CACHE (the hosts' ``stack_uv_cache_dir``), so they
    hold one copy of the ~5 GB of unpacked CUDA libraries, not one each. uv fills it on the controller
    from the fleet's own wheelhouse URL (its cache entries are keyed by URL, so the hosts' installs hit
    them); cache files are only ever replaced by rename, never written in place, so sharing inodes is
    safe; lock files are copied, not linked. Returns the controller-side cache (remove it after the fleet
    is down).
    """
    cache, tools, target = workdir / "uv-cache", workdir / "uv-tools", workdir / "uv-target"
    subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True)
    subprocess.run([str(tools / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--no-index", "--find-links", str(wheelhouse()), STACK_WHEELS[1]],
                   check=True, timeout=600)
    uv = str(tools / "bin/uv")
    env = {**os.environ, "UV_CACHE_DIR": str(cache), "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1"}
    subprocess.run([uv, "venv", "--python", "/usr/bin/python3", str(target)], check=True, env=env)
    subprocess.run([uv, "pip", "install", "--python", str(target / "bin/python"), "--no-index",
                    "--find-links", fleet.wheelhouse_url, *STACK_WHEELS[:1]],
                   check=True, env=env, timeout=1800)
    shutil.rmtree(target)
    for host in hosts:
        root = Path(host["dir"]) / "upper" / SEEDED_UV_CACHE.lstrip("/")
        for source in sorted(cache.rglob("*")):
            dest = root / source.relative_to(cache)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir() and not source.is_symlink():
                dest.mkdir(exist_ok=True)
            elif source.is_symlink():
                dest.symlink_to(os.readlink(source))
            elif source.name.endswith(".lock") or source.name == "CACHEDIR.TAG":
                shutil.copy2(source, dest)
            else:
                os.link(source, dest)
        root.chmod(0o755)
    return cache


def profile_file(directory: Path, name: str, **changes) -> Path:
    """A copy of the stable profile under ``name`` with ``changes`` ({"torch.version": "2.13.0"})."""
    profile = yaml.safe_load(STABLE.read_text())
    profile["name"] = name
    for dotted, value in changes.items():
        *parents, key = dotted.split(".")
        node = profile
        for parent in parents:
            node = node[parent]
        node[key] = value
    path = directory / f"{name}.yml"
    path.write_text(yaml.safe_dump(profile, sort_keys=False))
    return path


@dataclass
class StackRun:
    """The session's stack on the fleet: how it was made, and the same run again."""

    fleet: object
    play: object                  # the session's fleet_play
    workdir: Path
    wheel_cache: Path
    uncached_wheel: str           # the one wheelhouse wheel the seeded cache lacked
    extravars: dict
    check_run: PlayResult = None  # --check on the fresh hosts, before anything was installed
    left_by_check: list = field(default_factory=list)  # "host:path" the check run created (none)
    first_run: PlayResult = None
    first_seconds: float = 0.0
    stack_names: dict = field(default_factory=dict)  # host -> stack name of the first run

    @property
    def hosts(self) -> list[str]:
        return [h["name"] for h in self.fleet.hosts]

    @property
    def root(self) -> str:
        return self.extravars["stack_root"]

    def inventory_with(self, profile: Path | None) -> str:
        """Extra ``-i`` for the fleet inventory: the first host declares gpu_capability "12.0" (the others
        have none and no GPU: default targets), and stack_profile for all hosts (none: the default)."""
        extra = self.workdir / f"inventory-{profile.stem if profile else 'default'}.yml"
        group = {"hosts": {self.hosts[0]: {"gpu_capability": "12.0"}}}
        if profile is not None:
            group["vars"] = {"stack_profile": str(profile)}
        extra.write_text(yaml.safe_dump({"all": group}))
        return f"-i {extra}"

    def run(self, *, profile: Path | None = None, check: bool = False, limit: str | None = None,
            playbook: Path = SITE, **extravars) -> PlayResult:
        return self.play(playbook, extravars={**self.extravars, **extravars}, check=check, limit=limit,
                         cmdline=self.inventory_with(profile))

    def current(self, host: str) -> str:
        """Where the host's `current` link points ('' when there is none)."""
        return self.fleet.ssh(host, f"readlink {self.root}/current || true").stdout.strip()

    def stacks(self, host: str) -> list[str]:
        """Stack directories under the host's stack root."""
        out = self.fleet.ssh(host, f"ls -1 {self.root} 2>/dev/null || true").stdout.split()
        return sorted(name for name in out if name != "current")


def stack_extravars(fleet, wheel_cache: Path) -> dict:
    """The fleet's package sources for the stack: the served wheelhouse only (hosts have no internet)."""
    return {
        "stack_root": "/opt/sglang/stacks",
        "stack_find_links": [fleet.wheelhouse_url],
        "stack_no_index": True,
        # the stand-in stacks (torch and the real kernel, the stand-in server) are resolved on the hosts
        # from the profile's pins; fleet/test_stack_locked_install.py installs the real locked stack
        "stack_use_lock": False,
        "pytorch_index_url": "",
        "stack_wheel_cache_dir": str(wheel_cache),
        "stack_min_free_gb": 8,
        # site.yml also installs sglang with its whole dependency tree, which the fleet's wheelhouse
        # does not carry: the session stack is torch + the real sglang-kernel wheel (the sglang_service
        # tests install what the stand-in server needs into their own stack)
        "sglang_service_install": False,
    }
