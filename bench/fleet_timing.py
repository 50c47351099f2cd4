"""Test fleet figures from one run: bring-up of 3 hosts from a cached base and from nothing, RAM per host.

    sudo .venv/bin/python bench/fleet_timing.py [--hosts 3] [--skip-from-nothing]

"From nothing" uses a temporary cache root (the user's cache is left alone): debootstrap from the
machine's apt mirror, tarball, then the hosts. "From tarball" is the same root with only the tarball
kept (what a CI machine with a cached tarball but no unpacked tree sees). "Cached base" reuses the
unpacked tree. RAM is the PSS of each host's processes (nspawn + everything in the container) with
the hosts idle (their fair share of shared pages), and RSS (shared pages counted in full: an upper bound).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from fleet import Fleet
from fleet.base import ensure_base

MIB = 2**20


def cycle(label: str, hosts: int, measure_ram: bool = False) -> dict:
    """Base (build/restore/reuse) + up, then down; seconds of each, RAM when asked."""
    fleet = Fleet("bench")
    fleet.down()
    started = time.monotonic()
    ensure_base()
    based = time.monotonic()
    fleet.up(hosts, cuda=True)
    upped = time.monotonic()
    figures = {"label": label, "base_s": based - started, "up_s": upped - based, "total_s": upped - started}
    if measure_ram:
        time.sleep(3)  # let boot-time jobs finish
        figures["ram_mib"] = {name: {k: v / MIB for k, v in usage.items()}
                              for name, usage in fleet.memory().items()}
    down_started = time.monotonic()
    fleet.down()
    figures["down_s"] = time.monotonic() - down_started
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=3)
    parser.add_argument("--skip-from-nothing", action="store_true", help="only the cached-base figures")
    args = parser.parse_args()

    ensure_base()  # on a cold cache, build it here: "cached base" must not include the build
    results = [cycle("cached base", args.hosts, measure_ram=True)]
    if not args.skip_from_nothing:
        user_cache = os.environ.get("SGLANG_FLEET_CACHE")
        scratch = tempfile.mkdtemp(prefix="fleet-bench-")
        try:
            os.environ["SGLANG_FLEET_CACHE"] = scratch
            results.append(cycle("from nothing", args.hosts))
            base_dir = Path(scratch) / "fleet-base"
            for tree in base_dir.glob("*.rootfs"):
                shutil.rmtree(tree)
            for marker in base_dir.glob("*.ready"):
                marker.unlink()
            results.append(cycle("from tarball", args.hosts))
        finally:
            Fleet("bench").down()
            shutil.rmtree(scratch, ignore_errors=True)
            if user_cache is None:
                os.environ.pop("SGLANG_FLEET_CACHE", None)
            else:
                os.environ["SGLANG_FLEET_CACHE"] = user_cache

    print(f"{'':14} {'base (s)':>9} {'hosts up (s)':>13} {'total (s)':>10} {'down (s)':>9}")
    for r in results:
        print(f"{r['label']:14} {r['base_s']:9.1f} {r['up_s']:13.1f} {r['total_s']:10.1f} {r['down_s']:9.1f}")
    cached = results[0]
    for kind in ("pss", "rss"):
        values = {name: usage[kind] for name, usage in cached["ram_mib"].items()}
        each = ", ".join(f"{n} {v:.1f}" for n, v in values.items())
        mean = sum(values.values()) / len(values)
        print(f"RAM per idle host, {kind.upper()} (MiB): {each}; mean {mean:.1f}")
    for r in results[1:]:
        print(f"ratio {r['label']} / cached base: {r['total_s'] / cached['total_s']:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
