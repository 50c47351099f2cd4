"""The locked stack, one run, printed: site.yml from empty, the no-op, make bundle, offline installs.

    sudo .venv/bin/python bench/lock_timing.py [--skip-fleet] [--platforms "x86_64 aarch64"]

1. This machine: playbooks/site.yml (inventory/local) into an empty stack root and an empty wheel cache
   (temporary directories given with -e, beside the machine's own), first with uv's package cache warm
   (the machine's), then once more with uv's cache cold (an empty one); each followed by the no-op run.
   Prints each time, the changed count, and whether the installed set (uv pip list) equals the lock's
   files for this host. The lock's files come from the URLs the lock records (no mirror): the first
   run's time includes downloading them.
2. `make bundle PROFILE=stable` into a temporary directory (the machine's wheel cache, where `make
   site` filled it, is taken from first): time and size.
3. Three fleet hosts (systemd-nspawn, no internet: only the controller is reachable) install the stack
   from that bundle served over http, with no index at all (stack_no_index): time per host.
Everything it made is removed; the fleet is torn down.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))

import ansible.module_utils  # noqa: E402

ansible.module_utils.__path__.append(str(REPO / "module_utils"))
from ansible.module_utils.pylock import read_lock, select, split_tools  # noqa: E402
from ansible_run import run_playbook  # noqa: E402
from fleet import Fleet  # noqa: E402
from fleet.base import ensure_base  # noqa: E402
from pins import UV_BIN  # noqa: E402

SITE = REPO / "playbooks" / "site.yml"
LOCK = REPO / "profiles" / "pylock.stable.toml"
UV = UV_BIN


def locked_set(machine="x86_64", glibc="2.36"):
    lock, _ = read_lock(str(LOCK))
    files, _ = select(lock, machine, "3.11", glibc)
    stack, _ = split_tools(files)
    return {item["name"]: item["version"] for item in stack}


def site(extravars, inventory=None, **kwargs):
    started = time.monotonic()
    result = run_playbook(
        SITE, inventory, extravars=extravars, envvars={"ANSIBLE_CACHE_PLUGIN": "memory"}, **kwargs
    )
    seconds = time.monotonic() - started
    if result.rc != 0:
        raise SystemExit(f"site.yml failed (rc {result.rc}):\n{result.stdout[-5000:]}")
    return seconds, sum(result.stats.get("changed", {}).values()), result


def installed(python, ssh=None):
    command = [UV, "pip", "list", "--format=json", "--python", python]
    out = (
        ssh(" ".join(command))
        if ssh
        else subprocess.run(command, capture_output=True, text=True, check=True).stdout
    )
    return {item["name"].lower().replace("_", "-"): item["version"] for item in json.loads(out)}


def local_runs(work: Path) -> None:
    print("1. site.yml on this machine, empty stack root and wheel cache (lock files from their URLs)")
    for label, uv_cache in (("uv cache warm", None), ("uv cache cold", work / "uv-cold")):
        root, cache = work / f"stacks-{label[9:]}", work / f"wheels-{label[9:]}"
        extravars = {
            "stack_root": str(root),
            "stack_wheel_cache_dir": str(cache),
            "stack_wheel_store": str(work / f"store-{label[9:]}"),
        }
        if uv_cache:
            extravars["stack_uv_cache_dir"] = str(uv_cache)
        first, changed, _ = site(extravars)
        noop, noop_changed, _ = site(extravars)
        same = installed(str(root / "current" / "bin" / "python")) == locked_set()
        print(
            f"   {label}: first {first:7.1f} s (changed {changed}), "
            f"no-op {noop:6.1f} s (changed {noop_changed}),"
            f" installed set == lock: {same}"
        )
        shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(cache, ignore_errors=True)


def bundle(work: Path, platforms: str) -> Path:
    target = work / "bundle"
    started = time.monotonic()
    subprocess.run(
        ["make", "-s", "bundle", "PROFILE=stable", f"PLATFORMS={platforms}", f"BUNDLE_DIR={target}"],
        cwd=REPO,
        check=True,
        capture_output=True,
    )
    seconds = time.monotonic() - started
    size = sum(p.stat().st_size for p in (target / "wheels").iterdir())
    count = len(list((target / "wheels").glob("*.whl")))
    print(
        f"2. make bundle PLATFORMS='{platforms}': {seconds:.1f} s, {count} wheels, {size / 1024**3:.2f} GiB"
    )
    return target


def fleet_runs(bundle_dir: Path) -> None:
    ensure_base()
    fleet = Fleet("lbench")
    try:
        fleet.up(3, wheel_dir=bundle_dir / "wheels", replace=True)
        hosts = [h["name"] for h in fleet.hosts]
        extravars = {
            "stack_find_links": [fleet.wheelhouse_url],
            "stack_no_index": True,
            "stack_wheel_cache_dir": "",
            "stack_min_free_gb": 8,
        }
        print("3. 3 fleet hosts (no internet), the stack from the served bundle, no index")
        total, changed, result = site(extravars, fleet.inventory)
        for host in hosts:

            def ssh(command, host=host):
                return fleet.ssh(host, command, timeout=600).stdout

            same = installed("/opt/sglang/stacks/current/bin/python", ssh) == locked_set(glibc="2.36")
            durations = [
                r.get("delta") for r in result.results[host] if r["task"] and r["task"].startswith("Sync")
            ]
            print(f"   {host}: sync {durations[0] if durations else '?'}, installed set == lock: {same}")
        print(
            f"   site.yml on 3 hosts in parallel: {total:.1f} s "
            f"({total / 3:.1f} s per host), changed {changed}"
        )
    finally:
        fleet.down()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--skip-fleet", action="store_true")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--platforms", default="x86_64 aarch64")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="lock-bench-", dir="/var/tmp"))
    try:
        if not args.skip_local:
            local_runs(work)
        bundle_dir = bundle(work, args.platforms)
        if not args.skip_fleet:
            fleet_runs(bundle_dir)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
