"""The cached base rootfs survives what kills builds and what uses it: a harness killed mid-debootstrap,
the mounts a killed debootstrap leaves in its target, and a rebuild asked for while fleets run on it."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fleet import FleetError
from fleet.base import _tar_compression, base_key, base_spec, ensure_base

pytestmark = pytest.mark.integration

HARNESS = Path(__file__).resolve().parents[2] / "fleet"

# Stand-in for debootstrap (the real one takes a minute and the mirror): it does what debootstrap's
# second stage does to its target first (mount proc there), then hangs until killed.
STAND_IN = """#!{python}
import os, subprocess, sys, time
target = sys.argv[-2]
os.makedirs(os.path.join(target, "proc"))
subprocess.run(["mount", "-t", "proc", "proc", os.path.join(target, "proc")], check=True)
with open({pid_file!r}, "w") as out:
    out.write(str(os.getpid()))
time.sleep(600)
"""


def _mounts_under(path: Path) -> list:
    return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()
            if line.split()[4].startswith(f"{path}/")]


def _locked_by_someone(lock: Path) -> bool:
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


def test_killed_build_keeps_its_lock_and_the_next_build_cleans_up(fleet_base, tmp_path):
    cache, bin_dir, pid_file = tmp_path / "cache", tmp_path / "bin", tmp_path / "debootstrap.pid"
    bin_dir.mkdir()
    (bin_dir / "debootstrap").write_text(STAND_IN.format(python=sys.executable, pid_file=str(pid_file)))
    (bin_dir / "debootstrap").chmod(0o755)
    key = base_key(base_spec())
    base_dir, lock = cache / "fleet-base", cache / "fleet-base" / f"{key}.lock"
    env = {**os.environ, "SGLANG_FLEET_CACHE": str(cache),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    harness = subprocess.Popen([sys.executable, str(HARNESS), "base"], env=env)
    builder = None
    try:
        deadline = time.monotonic() + 60
        while not (pid_file.exists() and pid_file.read_text() and _mounts_under(base_dir)):
            assert harness.poll() is None, "the harness ended before its debootstrap started"
            assert time.monotonic() < deadline, "the stand-in debootstrap never started"
            time.sleep(0.05)
        builder = int(pid_file.read_text())
        harness.send_signal(signal.SIGKILL)
        harness.wait()
        # the orphaned build still holds the lock: no second build may start in its directory
        assert _locked_by_someone(lock)
        os.kill(builder, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _locked_by_someone(lock):
            assert time.monotonic() < deadline, "the lock outlived the build that held it"
            time.sleep(0.05)
        [left_mount] = _mounts_under(base_dir)  # what a killed debootstrap leaves: proc, mounted
        assert Path(left_mount).parent.name.startswith(f"{key}.staging-")
        # the next build: from a (tiny, stand-in) tarball; it must unmount and remove the leftovers
        content = tmp_path / "content"
        (content / "etc").mkdir(parents=True)
        (content / "etc" / "os-release").write_text("ID=stand-in\n")
        suffix, flags = _tar_compression()
        subprocess.run(["tar", *flags, "-cf", str(base_dir / f"{key}{suffix}"), "-C", str(content), "."],
                       check=True)
        tree = ensure_base(cache=base_dir)
        assert (tree / "etc" / "os-release").read_text() == "ID=stand-in\n"
        assert _mounts_under(base_dir) == []
        assert sorted(p.name for p in base_dir.iterdir()) == sorted(
            [f"{key}{suffix}", f"{key}.lock", f"{key}.log", f"{key}.ready", f"{key}.rootfs"])
    finally:
        harness.kill()
        if builder:
            subprocess.run(["kill", "-9", str(builder)], capture_output=True, check=False)
        for mount in reversed(_mounts_under(tmp_path)):
            subprocess.run(["umount", "--lazy", mount], check=False)


def test_a_base_fleets_run_on_is_not_rebuilt(fleet):
    tree = Path(fleet.state["base"])
    ready, tarballs = tree.with_suffix(".ready"), sorted(tree.parent.glob(f"{tree.stem}.tar*"))
    before = (ready.stat().st_mtime_ns, [t.stat().st_mtime_ns for t in tarballs])
    with pytest.raises(FleetError, match=rf"lower layer of running fleets \(.*\b{fleet.name}\b"):
        ensure_base(rebuild=True)
    assert (ready.stat().st_mtime_ns, [t.stat().st_mtime_ns for t in tarballs]) == before
    remote = fleet.testinfra(fleet.hosts[0]["name"])
    assert remote.check_output("systemctl is-system-running") == "running"
    assert remote.file("/usr/bin/python3").exists  # a file of the lower layer
