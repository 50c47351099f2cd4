"""Stack stages on the test fleet, one run, printed: first run and no-op re-run; uv vs pip for torch.

    sudo .venv/bin/python bench/stack_timing.py [--hosts 3]

1. Boots its own fleet (``sbench``), fills the wheelhouse (torch 2.14.1 + dependencies, uv; once), and
   runs playbooks/site.yml (preflight, stack, pytorch, activate, summary) on all hosts twice, with the
   wheelhouse as the only package source, as tests/integration/fleet/test_stack.py does. Prints wall
   time and changed count (total and per host) of the first run and of the second, which must change
   nothing. The wheel cache is a temporary directory seeded with the wheelhouse (nothing to fetch).
2. On the first host: installs the same torch==2.14.1 from the same wheelhouse into a fresh venv with
   uv (cold: an empty cache; warm: the stack's cache, which hardlinks) and with pip (--no-cache-dir),
   and prints the times side by side (in /var/tmp: the hosts' /tmp is a small tmpfs). Everything it
   made is removed; the fleet is torn down.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from ansible_run import run_playbook
from fleet import Fleet
from fleet.base import ensure_base
from pins import UV_BIN
from stackrun import SITE, fill_wheelhouse, stack_extravars

TORCH = "torch==2.14.1"


def play(fleet, extravars):
    started = time.monotonic()
    result = run_playbook(SITE, fleet.inventory, extravars=extravars,
                          envvars={"ANSIBLE_CACHE_PLUGIN": "memory"})
    seconds = time.monotonic() - started
    if result.rc != 0:
        raise SystemExit(f"site.yml failed (rc {result.rc}):\n{result.stdout[-5000:]}")
    changed = result.stats.get("changed", {})
    return seconds, changed


def timed_ssh(fleet, host, command, timeout=1800) -> float:
    started = time.monotonic()
    fleet.ssh(host, command, timeout=timeout)
    return time.monotonic() - started


def uv_vs_pip(fleet, host) -> dict:
    url = fleet.wheelhouse_url
    trusted = url.split("//", 1)[1].split(":", 1)[0]
    uv = UV_BIN
    sources = f"--no-index --find-links {url}"
    tmp = "/var/tmp/stack-bench"  # not /tmp (pip unpacks there): a small tmpfs on the hosts
    fleet.ssh(host, f"rm -rf {tmp}")
    runs = {  # one at a time, each removed before the next: a CUDA torch venv is ~5 GB
        "uv, the stack's warm cache": (f"{uv} venv -q --python 3.11 {tmp}/venv",
                                       f"UV_CACHE_DIR=/var/cache/sglang/uv {uv} pip install -q "
                                       f"--python {tmp}/venv/bin/python {sources} {TORCH}"),
        "uv, empty cache": (f"{uv} venv -q --python 3.11 {tmp}/venv",
                            f"UV_CACHE_DIR={tmp}/uv-cache {uv} pip install -q "
                            f"--python {tmp}/venv/bin/python {sources} {TORCH}"),
        "pip, no cache": (f"python3 -m venv {tmp}/venv && mkdir {tmp}/tmp",
                          f"TMPDIR={tmp}/tmp {tmp}/venv/bin/pip install -q --no-cache-dir "
                          f"--disable-pip-version-check {sources} --trusted-host {trusted} {TORCH}"),
    }
    seconds = {}
    try:
        for label, (create, install) in runs.items():
            fleet.ssh(host, create)
            seconds[label] = timed_ssh(fleet, host, install)
            fleet.ssh(host, f"rm -rf {tmp}")
        return seconds
    finally:
        fleet.ssh(host, f"rm -rf {tmp}", check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=3)
    args = parser.parse_args()
    wheelhouse = fill_wheelhouse()
    ensure_base()
    fleet = Fleet("sbench")
    fleet.down()
    try:
        fleet.up(args.hosts)
        with tempfile.TemporaryDirectory(prefix="stack-bench-") as cache:
            for wheel in wheelhouse.glob("*.whl"):
                (Path(cache) / wheel.name).hardlink_to(wheel)
            extravars = stack_extravars(fleet, Path(cache))
            first = play(fleet, extravars)
            second = play(fleet, extravars)
        print(f"site.yml (preflight, stack, pytorch, activate, summary) on {args.hosts} fleet hosts, "
              "wheels from the served wheelhouse:")
        for label, (seconds, changed) in (("first run", first), ("second run (no-op)", second)):
            per_host = ", ".join(f"{host} {count}" for host, count in sorted(changed.items())) or "none"
            print(f"  {label:<20} {seconds:7.1f} s   changed {sum(changed.values()):3d} ({per_host})")
        installs = uv_vs_pip(fleet, fleet.hosts[0]["name"])
        print("torch 2.14.1 (cu130) + dependencies into a fresh venv on one host, from the same wheelhouse:")
        for label, seconds in installs.items():
            print(f"  {label:<28} {seconds:7.1f} s")
    finally:
        fleet.down()
    return 0


if __name__ == "__main__":
    sys.exit(main())
