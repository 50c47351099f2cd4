"""The rolling rebuild's timing from one run on the test fleet: 3 model hosts (stand-in servers) behind the
real smg 1.13.0 gateway on a 4th host, provisioned by playbooks/site.yml (stack A: torch 2.14.1, the
released kernel wheel), then playbooks/rolling_rebuild.yml to stack B (the test kernel package built from
source with the machine's nvcc, once) with a client sending requests through the gateway all along.

Prints the rollout's total wall time, each host's time (stage + switch) and time out of rotation, and the
client's request count and failures. The scenario is the fleet test's (tests/integration/fleet/jobs_fleet.py).

    sudo .venv/bin/python bench/rollout_timing.py [--serial 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "integration" / "fleet"))

from ansible_run import REPO_ROOT, run_playbook
from fleet import Fleet
from fleet.base import ensure_base
from jobs_fleet import ClientLoop, JobsFleet, kernel_source, prepare_wheels, start_weights_hub
from stackrun import profile_file, seed_uv_cache

SUMMARY = "Collect the rollout's records"


def play(jobs: JobsFleet, name: str, **kwargs):
    return run_playbook(REPO_ROOT / "playbooks" / name, jobs.inventory,
                        envvars={"ANSIBLE_CACHE_PLUGIN": "memory"}, **kwargs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--serial", default="1", help="rolling_rebuild_serial (a number or a percentage)")
    options = parser.parse_args()
    ensure_base()
    fleet = Fleet(f"rb{os.getpid() % 10**6}")
    hub = None
    try:
        fleet.up(4, owner_pid=os.getpid())
        with tempfile.TemporaryDirectory(prefix="rollout-bench-") as tmp:
            workdir = Path(tmp)
            wheels = prepare_wheels(fleet)
            seed_uv_cache(fleet, workdir, fleet.hosts[:3])  # as the fleet test: the model hosts share one
            hub = start_weights_hub(fleet, workdir)
            jobs = JobsFleet(fleet, workdir, wheels, kernel_source(fleet, workdir), hub)
            start = time.monotonic()
            site = play(jobs, "site.yml", timeout=2400)
            print(f"site.yml on 4 hosts (3 models + gateway): {time.monotonic() - start:.1f} s, rc {site.rc}")
            if site.rc != 0:
                print(site.stdout[-4000:])
                return 1
            jobs.use_profile(profile_file(workdir, "rollout", **{
                "sgl_kernel.install": "source", "sgl_kernel.source.archive_url": jobs.kernel["url"]}))
            client = ClientLoop(f"http://{jobs.address[jobs.gateway]}:8000")
            client.start()
            start = time.monotonic()
            try:
                result = play(jobs, "rolling_rebuild.yml", timeout=2400,
                              extravars={"rolling_rebuild_serial": options.serial})
            finally:
                total = time.monotonic() - start
                client.stop()
            print(f"rolling_rebuild.yml, 3 hosts, serial {options.serial}: total {total:.1f} s, "
                  f"rc {result.rc}")
            records = list(result.task_runs(SUMMARY).values())[-1]["ansible_facts"]["rolling_rebuild_summary"]
            for record in records:
                out = record["out_of_rotation_seconds"]
                print(f"  {record['host']}: {record['result']}, {record['old_fingerprint'][:12]} -> "
                      f"{record['new_fingerprint'][:12]}, host {record['seconds']:.1f} s, out of rotation "
                      f"{out:.1f} s" if out is not None else f"  {record['host']}: {record['result']}")
            print(f"client through the gateway: {client.total} requests, {len(client.failures)} failed")
            for failure in client.failures[:10]:
                print(f"  {failure}")
            print(f"disk per host (MiB): {jobs.disk_mib()}")
            return 0 if result.rc == 0 else 1
    finally:
        if hub is not None:
            hub.__exit__(None, None, None)
        fleet.down()


if __name__ == "__main__":
    sys.exit(main())
