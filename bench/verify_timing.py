"""verify.yml on 6, 12 and 24 fleet hosts: wall time against host count, with the forks used (one run).

    sudo .venv/bin/python bench/verify_timing.py [--sizes 6 12 24] [--forks 20]

Boots a fleet of its own (``vb<pid>``, as many hosts as the largest size) and gives every host a real
but light stack, so verify has something to check: a uv venv under /opt/sglang/stacks/light-<12 hex>
with three small distributions from the served wheelhouse (no torch: a CUDA torch stack is ~6 GB a
host), its stack.json, sealed, with `current` pointing at it. snapshot.yml takes a lock from the first host;
then verify.yml runs with that lock on the first 6, 12 and 24 hosts (every check: GPU, driver, CUDA
toolkit, torch, kernel, the environment scan of the stack, drift from the lock, the report), and the
wall time of each run is printed with the forks used, seconds per host, and the ratios: time ratio
against host ratio (<= 1: growing no faster than linearly). Target: 24 hosts <= 60 s. The fleet is torn
down at the end, also on failure. 24 hosts need more inotify instances than the usual default (128, for
all of root's processes, every fleet's hosts included): the run raises fs.inotify.max_user_instances to
1024 when it is lower, and puts it back at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from ansible_run import REPO_ROOT, run_playbook
from cache import pip_download, wheelhouse
from fleet import Fleet
from fleet.base import ensure_base
from light_stack import LIGHT_PLAY, LIGHT_WHEELS, UV

INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
# each host's systemd holds a few inotify instances (its .path units fail at boot without them): 24 hosts
# and the machine's own need more than the usual default of 128, shared by every fleet on the machine
INOTIFY_NEEDED = 1024
VERIFY = REPO_ROOT / "playbooks" / "verify.yml"
SNAPSHOT = REPO_ROOT / "playbooks" / "snapshot.yml"


def play(fleet, playbook, *, forks=None, limit=None, **extravars):
    envvars = {"ANSIBLE_CACHE_PLUGIN": "memory"}
    if forks:
        envvars["ANSIBLE_FORKS"] = str(forks)
    started = time.monotonic()
    result = run_playbook(playbook, fleet.inventory, extravars=extravars, limit=limit, envvars=envvars)
    seconds = time.monotonic() - started
    if result.rc != 0:
        raise SystemExit(f"{playbook if isinstance(playbook, Path) else 'setup'} failed (rc {result.rc}):\n"
                         f"{result.stdout[-5000:]}")
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[6, 12, 24])
    parser.add_argument("--forks", type=int, default=20, help="ansible forks (ansible.cfg has 20)")
    args = parser.parse_args()
    sizes = sorted(args.sizes)
    pip_download([*LIGHT_WHEELS, UV])
    ensure_base()
    fleet = Fleet(f"vb{os.getpid() % 10**6}")
    work = Path(tempfile.mkdtemp(prefix="verify-bench-"))
    inotify = int(INOTIFY_INSTANCES.read_text())
    if inotify < INOTIFY_NEEDED:
        print(f"fs.inotify.max_user_instances {inotify} -> {INOTIFY_NEEDED} for the run (restored after)")
        INOTIFY_INSTANCES.write_text(f"{INOTIFY_NEEDED}\n")
    try:
        started = time.monotonic()
        fleet.up(sizes[-1], owner_pid=os.getpid())
        print(f"{sizes[-1]} hosts up in {time.monotonic() - started:.1f} s")
        hosts = [h["name"] for h in fleet.hosts]
        print(f"light stacks on {len(hosts)} hosts: {play(fleet, LIGHT_PLAY, forks=args.forks):.1f} s")
        # the wheel cache snapshot hashes is the wheelhouse itself (read only, only the lock's wheels)
        common = {"stack_wheel_cache_dir": str(wheelhouse())}
        play(fleet, SNAPSHOT, snapshot_host=hosts[0], snapshot_name="light",
             stack_snapshot_locks_dir=str(work), **common)
        lock = work / "light.lock.yml"
        rows = []
        for size in sizes:
            reports = work / f"reports-{size}"
            seconds = play(fleet, VERIFY, forks=args.forks, limit=",".join(hosts[:size]),
                           verify_lock_file=str(lock), verify_reports_dir=str(reports), verify_fail=False,
                           **common)
            report = json.loads((reports / "verify.json").read_text())
            drift = {h["host"]: next(c["status"] for c in h["checks"] if c["check"] == "drift")
                     for h in report["hosts"]}
            if len(drift) != size or set(drift.values()) != {"ok"}:
                raise SystemExit(f"verify on {size} hosts: drift per host {drift}")
            rows.append((size, seconds))
        print(f"\nverify.yml with a lock (drift ok on every host), forks {args.forks}, one run:")
        print(f"{'hosts':>6} {'forks':>6} {'wall s':>8} {'s/host':>7} {'time ratio':>11} {'host ratio':>11} "
              f"{'time/host ratio':>16}")
        base_size, base_seconds = rows[0]
        for size, seconds in rows:
            time_ratio, host_ratio = seconds / base_seconds, size / base_size
            print(f"{size:>6} {min(args.forks, size):>6} {seconds:>8.1f} {seconds / size:>7.2f} "
                  f"{time_ratio:>11.2f} {host_ratio:>11.2f} {time_ratio / host_ratio:>16.2f}")
        largest, largest_seconds = rows[-1]
        print(f"target: {largest} hosts <= 60 s: {'met' if largest_seconds <= 60 else 'NOT met'} "
              f"({largest_seconds:.1f} s); growth no faster than linear (time/host ratio <= 1): "
              f"{'met' if all(s / base_seconds <= n / base_size for n, s in rows) else 'NOT met'}")
    finally:
        fleet.down()
        if inotify < INOTIFY_NEEDED:
            INOTIFY_INSTANCES.write_text(f"{inotify}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
