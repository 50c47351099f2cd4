"""playbooks/site.yml and playbooks/rolling_rebuild.yml on a 4-host fleet of its own (3 model hosts with
the stand-in server, 1 host with the real smg 1.13.0 gateway), with a client sending requests through the
gateway for the whole of each rollout (tests/integration/fleet/jobs_fleet.py says how the hosts are set up).

Stacks: site.yml makes stack A (the stable profile: torch 2.14.1, the released sglang-kernel wheel); the
first rollout moves to B (the test kernel package as a source build, real nvcc: one build, three installs);
the second to C (another fingerprint: a flashinfer pin) with host 2's new stack carrying a stand-in that
crashes at start, so its readiness gate fails and host 2 is rolled back to B while host 3 is never reached.
Last, playbooks/reproduce.yml puts a lock of host 1 (on C) onto host 3 (on B), restarting and gating its
model.
"""

from __future__ import annotations

import copy
import os
import shutil
import time

import pytest
from ansible_run import REPO_ROOT, PlayResult, run_playbook
from fleet import Fleet
from fleet_present import present
from jobs_fleet import ClientLoop, JobsFleet, kernel_source, prepare_wheels, seed_uv_cache
from sglang_parser import PARSER_DEPENDENCIES
from stackrun import profile_file

pytestmark = pytest.mark.integration

SITE = REPO_ROOT / "playbooks" / "site.yml"
ROLLOUT = REPO_ROOT / "playbooks" / "rolling_rebuild.yml"
BUILD = "Start the build under its memory limit"
INSTALL = "Install the wheel into the stack, without dependencies so that torch stays as pinned"
SUMMARY = "Collect the rollout's records"
SNAPSHOT = REPO_ROOT / "playbooks" / "snapshot.yml"
REPRODUCE = REPO_ROOT / "playbooks" / "reproduce.yml"
GATE_POLL = "Poll until ready, sglang-main"


@pytest.fixture(scope="module")
def jobs(fleet_base, tmp_path_factory):
    """4 hosts of this module's own (the session fleet has 3 and is shared), torn down at its end."""
    fleet = Fleet(f"rr{os.getpid() % 10**7}")
    recorded = seeded = None
    try:
        fleet.up(4, owner_pid=os.getpid())
        recorded = copy.deepcopy(fleet.state.data)
        workdir = tmp_path_factory.mktemp("jobs")
        wheels = prepare_wheels(fleet)
        seeded = seed_uv_cache(fleet, workdir)
        yield JobsFleet(fleet, workdir, wheels, kernel_source(fleet, workdir))
    finally:
        fleet.down()
        if seeded is not None:
            shutil.rmtree(seeded, ignore_errors=True)
    assert present(recorded) == [], "the jobs fleet's down left these behind"


def play(jobs: JobsFleet, playbook, **kwargs) -> PlayResult:
    return run_playbook(playbook, jobs.inventory, envvars={"ANSIBLE_CACHE_PLUGIN": "memory"}, **kwargs)


def summary(result: PlayResult) -> dict:
    """{host: record} of the rollout's summary (the last one shown)."""
    runs = result.task_runs(SUMMARY)
    assert runs, "no rollout summary in the output"
    records = list(runs.values())[-1]["ansible_facts"]["rolling_rebuild_summary"]
    return {r["host"]: r for r in records}


def events(result: PlayResult, task: str) -> list[str]:
    """Hosts on which ``task`` really ran (not skipped), once per run."""
    return [host for host, results in result.results.items() for r in results
            if r["task"] == task and r["event"] != "runner_on_skipped"]


@pytest.fixture(scope="module")
def provisioned(jobs):
    start = time.monotonic()
    first = play(jobs, SITE, timeout=2400)
    first.seconds = time.monotonic() - start
    assert first.rc == 0, first.stdout[-6000:]
    start = time.monotonic()
    second = play(jobs, SITE, timeout=1200)
    second.seconds = time.monotonic() - start
    print(f"\nsite.yml on 4 hosts: first run {first.seconds:.0f} s, second run {second.seconds:.0f} s; "
          f"disk per host (MiB): {jobs.disk_mib()}")
    return first, second


def test_site_converges_on_models_and_gateway_and_a_second_run_changes_nothing(jobs, provisioned):
    _first, second = provisioned
    assert second.rc == 0, second.stdout[-6000:]
    assert set(second.stats["ok"]) == {*jobs.models, jobs.gateway}
    assert {host: second.stats.get("changed", {}).get(host, 0) for host in second.stats["ok"]} == {
        host: 0 for host in second.stats["ok"]}
    for host in jobs.models:
        assert jobs.unit(host)["ActiveState"] == "active"
        assert jobs.healthy(host)
    assert jobs.gateway_workers() == {jobs.worker_url(h): True for h in jobs.models}


@pytest.fixture(scope="module")
def first_rollout(jobs, provisioned):
    """Profile B (the kernel built from source) in check mode first, then for real under client load."""
    profile = profile_file(jobs.workdir, "rollout", **{
        "sgl_kernel.install": "source", "sgl_kernel.source.archive_url": jobs.kernel["url"]})
    before = {h: (jobs.current(h), jobs.stacks(h), jobs.unit(h)) for h in jobs.models}
    jobs.use_profile(profile)
    check = play(jobs, ROLLOUT, check=True, timeout=1200)
    after_check = {h: (jobs.current(h), jobs.stacks(h), jobs.unit(h)) for h in jobs.models}
    client = ClientLoop(f"http://{jobs.address[jobs.gateway]}:8000")
    client.start()
    start = time.monotonic()
    try:
        result = play(jobs, ROLLOUT, timeout=2400)
    finally:
        result_seconds = time.monotonic() - start
        client.stop()
    print(f"\nrollout A -> B on 3 hosts: {result_seconds:.0f} s; client requests through the gateway: "
          f"{client.total} ({client.ok} ok, {len(client.failures)} failed; "
          f"per worker {dict(client.workers)}); "
          f"disk per host (MiB): {jobs.disk_mib()}")
    if result.task_runs(SUMMARY):
        for record in summary(result).values():
            print(f"  {record['host']}: {record['result']}, host {record['seconds'] or 0:.1f} s, "
                  f"out of rotation {record['out_of_rotation_seconds'] or 0:.1f} s")
    return {"check": check, "before": before, "after_check": after_check, "result": result, "client": client}


def test_check_mode_changes_nothing_and_says_what_it_would_do(jobs, first_rollout):
    check = first_rollout["check"]
    assert check.rc == 0, check.stdout[-6000:]
    assert first_rollout["after_check"] == first_rollout["before"]
    records = summary(check)
    would = dict.fromkeys(jobs.models, "would update (check mode)")
    assert {h: r["result"] for h, r in records.items()} == would
    assert not events(check, BUILD)


def test_rollout_builds_once_installs_three_times_and_drops_no_request(jobs, first_rollout):
    result, client = first_rollout["result"], first_rollout["client"]
    assert result.rc == 0, result.stdout[-8000:]
    assert events(result, BUILD) == [jobs.models[0]], "one kernel build, on the build host"
    assert sorted(events(result, INSTALL)) == sorted(jobs.models), "one kernel install per host"
    records = summary(result)
    new = {r["new_fingerprint"] for r in records.values()}
    assert len(new) == 1
    for host in jobs.models:
        record = records[host]
        assert record["result"] == "updated"
        assert record["old_fingerprint"] != record["new_fingerprint"]
        assert jobs.current(host) == record["new_stack"]
        assert jobs.fingerprint(host) == record["new_fingerprint"]
        assert record["old_stack"] in jobs.stacks(host), "the old stack is kept for a rollback"
        assert 0 < record["out_of_rotation_seconds"] < record["seconds"]
        assert jobs.unit(host)["ActiveState"] == "active"
        assert jobs.healthy(host)
    assert jobs.gateway_workers() == {jobs.worker_url(h): True for h in jobs.models}
    assert client.failures == [], client.failures[:10]
    assert client.ok > 0
    assert set(client.workers) == set(jobs.models), dict(client.workers)


def test_a_host_that_fails_its_gate_is_rolled_back_and_the_rollout_halts(jobs, first_rollout):
    h1, h2, h3 = jobs.models
    assert first_rollout["result"].rc == 0
    (jobs.workdir / "c").mkdir(exist_ok=True)
    profile = profile_file(jobs.workdir / "c", "rollout", **{
        "sgl_kernel.install": "source", "sgl_kernel.source.archive_url": jobs.kernel["url"],
        "flashinfer.version": "0.7.1"})
    jobs.use_profile(profile)
    # host 2's new stack gets a stand-in server that crashes while loading
    crashing = [*PARSER_DEPENDENCIES, jobs.wheels["crash"]]
    jobs.write_inventory({h2: {"sglang_service_extra_packages": crashing}})
    before = {h: (jobs.current(h), jobs.stacks(h), jobs.unit(h)) for h in jobs.models}
    client = ClientLoop(f"http://{jobs.address[jobs.gateway]}:8000")
    client.start()
    try:
        result = play(jobs, ROLLOUT, timeout=2400)
    finally:
        client.stop()
        jobs.write_inventory()
    print(f"\nrollout B -> C with host 2 failing its gate: client requests through the gateway: "
          f"{client.total} "
          f"({client.ok} ok, {len(client.failures)} failed)")
    assert result.rc != 0, "the play must fail"
    records = summary(result)
    assert records[h1]["result"] == "updated"
    assert records[h2]["result"] == "rolled back"
    assert "gate" in records[h2]["reason"].lower() or "sglang-main" in records[h2]["reason"]
    assert records[h3]["result"] == "not reached"
    # host 1 on the new fingerprint
    assert jobs.current(h1) == records[h1]["new_stack"] != before[h1][0]
    # host 2 back on the old stack, healthy and in rotation
    assert jobs.current(h2) == before[h2][0]
    assert records[h2]["new_stack"] in jobs.stacks(h2), "the failed new stack stays for inspection"
    assert jobs.unit(h2)["ActiveState"] == "active"
    assert jobs.healthy(h2)
    # host 3 not touched: same stack, same stacks on disk, same server process
    assert (jobs.current(h3), jobs.stacks(h3), jobs.unit(h3)) == before[h3]
    assert jobs.gateway_workers() == {jobs.worker_url(h): True for h in jobs.models}
    assert client.failures == [], client.failures[:10]
    assert client.ok > 0



def test_reproduce_moves_a_host_onto_another_hosts_lock_and_gates_its_model(jobs, first_rollout):
    """After the halted rollout host 1 runs C and host 3 still B. A lock of host 1 (snapshot.yml)
    reproduced on host 3 moves it to C with the stack role's `switch` and restarts its model with the
    sglang_service role's `restart`, whose readiness gate runs on the restarted unit."""
    h1, _h2, h3 = jobs.models
    locks = jobs.workdir / "locks"
    snap = play(jobs, SNAPSHOT, extravars={"snapshot_host": h1, "snapshot_name": "from-host-1",
                                           "snapshot_locks_dir": str(locks)}, timeout=900)
    assert snap.rc == 0, snap.stdout[-6000:]
    target, old = jobs.current(h1), jobs.current(h3)
    assert target != old
    before = jobs.unit(h3)
    start = time.monotonic()
    lock = locks / "from-host-1.lock.yml"
    result = play(jobs, REPRODUCE, timeout=1800,
                  extravars={"reproduce_hosts": h3, "reproduce_lock": str(lock)})
    print(f"\nreproduce.yml of host 1's lock onto host 3: {time.monotonic() - start:.0f} s")
    assert result.rc == 0, result.stdout[-6000:]
    assert jobs.current(h3) == target
    assert jobs.fingerprint(h3) == jobs.fingerprint(h1)
    assert old in jobs.stacks(h3), "the stack it left is kept (stack_keep)"
    after = jobs.unit(h3)
    assert after["ActiveState"] == "active"
    assert after["MainPID"] != before["MainPID"], "the model unit was restarted onto the new stack"
    assert events(result, GATE_POLL) == [h3], "the readiness gate ran on the restarted unit"
    assert jobs.healthy(h3)
