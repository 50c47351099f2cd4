"""playbooks/site.yml and playbooks/rolling_rebuild.yml on a 4-host fleet of its own (3 model hosts with
the stand-in server, 1 host with the real smg 1.13.0 gateway), with a client sending requests through the
gateway for the whole of each rollout (tests/integration/fleet/jobs_fleet.py says how the hosts are set up).

Stacks: site.yml makes stack A (the stable profile: torch 2.14.1, the released sglang-kernel wheel); the
first rollout moves to B (the test kernel package as a source build, real nvcc: one build, three installs);
the second to C (another fingerprint: a flashinfer pin) with host 2's new stack carrying a stand-in that
crashes at start, so its readiness gate fails and host 2 is rolled back to B while host 3 is never reached.
Then playbooks/reproduce.yml puts a lock of host 1 (on C) onto host 3 (on B), moving it as a rollout does
(out of rotation, switched, restarted, gated, back) under client load. A rollout back to B has its
controller SIGKILLed twice (after host 1's gate, before its put-back;
after host 3's drain, before its switch) and converges on the next run. Last, playbooks/nvidia_driver.yml
with a stand-in driver that needs a reboot on every model host
(tests/integration/fleet/nvidia_driver/stand_in.yml: no GPU here) refuses to reboot them without
nvidia_driver_reboot_ok, naming all three, and with it walks them one at a time, each out of the gateway's
rotation, drained, really rebooted (the host's container restarts), its driver checked, its model gated
and back into rotation, under client load.

Every model names its weights on the Hub stand-in: site.yml's first run downloads them once per host; from
then on nothing (site.yml again, the rollouts, the rollback, reproduce) asks the Hub
or rewrites a file of them, and every unit runs from the staged directory with the Hub offline.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import threading
import time
import urllib.request

import pytest
import yaml
from ansible_run import REPO_ROOT, PlayResult, run_on_fleet
from fleet import Fleet
from fleet_present import checked_fleet
from jobs_fleet import (
    MODEL_PORT,
    NO_KERNEL_MIRROR,
    STACK_ROOT,
    ClientLoop,
    JobsFleet,
    kernel_source,
    model,
    prepare_wheels,
    start_weights_hub,
)
from sglang_parser import KEEP_PARSE, PARSER_DEPENDENCIES
from stackrun import SEEDED_UV_CACHE, profile_file, seed_uv_cache

sys.path.insert(0, str(REPO_ROOT / "tests" / "stand_ins"))
import driver_apt_repo

pytestmark = pytest.mark.integration

SITE = REPO_ROOT / "playbooks" / "site.yml"
ROLLOUT = REPO_ROOT / "playbooks" / "rolling_rebuild.yml"
BUILD = "Start the build under its memory limit"
INSTALL = "Install the wheel into the stack, without dependencies so that torch stays as pinned"
SUMMARY = "Collect the rollout's records"
SYNC = "Sync the environment to the lock (hash-checked, no index)"
SNAPSHOT = REPO_ROOT / "playbooks" / "snapshot.yml"
REPRODUCE = REPO_ROOT / "playbooks" / "reproduce.yml"
VERIFY = REPO_ROOT / "playbooks" / "verify.yml"
GATE_POLL = "Poll until ready, sglang-main"
DRIVER = REPO_ROOT / "playbooks" / "nvidia_driver.yml"
DRIVER_STAND_IN = REPO_ROOT / "tests" / "integration" / "fleet" / "nvidia_driver" / "stand_in.yml"
# PID 1's start time (a container's kernel boot_id is the machine's)
BOOT_MARK = "awk '{print $22}' /proc/1/stat"
GATEWAY_WAIT = "Wait for the gateway to answer with exactly the manifest's workers, all healthy"
ROUTE = "Send requests through the gateway; every worker in rotation must answer one, none out of rotation"
# the stand-in driver's paths for nvidia_driver_facts, and the boot mark ansible.builtin.reboot watches
DRIVER_VARS = {
    "nvidia_driver_manage_repository": False,
    "nvidia_driver_facts_options": {
        "nvidia_smi": "/usr/local/sbin/stand-in-nvidia-smi",
        "kernel_module_version_files": ["/run/stand-in/version"], "proc_version": "/run/stand-in/version",
        "modinfo": "/usr/local/sbin/stand-in-modinfo", "pci_devices": "/opt/stand-in/pci",
        "efi_dir": "/nonexistent/efi", "nouveau_module": "/nonexistent/nouveau"},
    "nvidia_driver_boot_time_command": BOOT_MARK,
}


@pytest.fixture(scope="module")
def jobs(fleet_base, tmp_path_factory):
    """4 hosts of this module's own (the session fleet has 3 and is shared), torn down at its end."""
    seeded = None
    try:
        with checked_fleet(Fleet(f"rr{os.getpid() % 10**7}"), 4, "the jobs fleet") as fleet:
            workdir = tmp_path_factory.mktemp("jobs")
            wheels = prepare_wheels(fleet)
            seeded = seed_uv_cache(fleet, workdir, fleet.hosts[:3])  # the model hosts; the gateway: no stack
            hub = start_weights_hub(fleet, workdir)
            try:
                yield JobsFleet(fleet, workdir, wheels, kernel_source(fleet, workdir), hub)
            finally:
                hub.__exit__(None, None, None)
    finally:
        if seeded is not None:  # the controller's names; the hosts' went with the fleet
            shutil.rmtree(seeded, ignore_errors=True)


def play(jobs: JobsFleet, playbook, **kwargs) -> PlayResult:
    return run_on_fleet(playbook, jobs.inventory, **kwargs)


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
    asked_by_first = len(jobs.hub.requests)
    start = time.monotonic()
    second = play(jobs, SITE, timeout=1200)
    second.seconds = time.monotonic() - start
    # what the later tests compare against: the staged files, and how often the Hub was asked
    jobs.staged = {h: jobs.weights_files(h) for h in jobs.models}
    jobs.hub_requests_after_site = (asked_by_first, len(jobs.hub.requests))
    jobs.kernels_in_uv_cache = {h: kernels_in_uv_cache(jobs, h) for h in jobs.models}
    print(f"\nsite.yml on 4 hosts: first run {first.seconds:.0f} s, second run {second.seconds:.0f} s; "
          f"disk per host (MiB): {jobs.disk_mib()}")
    return first, second


def kernels_in_uv_cache(jobs: JobsFleet, host: str) -> int:
    """How many unpacked kernel libraries (sgl_kernel/**.so) the host's uv cache holds."""
    find = f"find {SEEDED_UV_CACHE}/archive-v0 -path '*/sgl_kernel/*' -name '*.so' | wc -l"
    return int(jobs.ssh(host, find))


TAKE_KERNEL = ("Take the released wheel from the build host's download or the wheel mirrors "
               "(checked by sha256)")
WHY_STORE = "Say why the released wheel is copied from the artifact store"
KERNEL_FROM_STORE = "Copy the wheel from the artifact store"


def test_site_converges_on_models_and_gateway_and_a_second_run_changes_nothing(jobs, provisioned):
    first, second = provisioned
    # the released kernel wheel: the build host (host 1) hardlinks its own download, host 2 fetches it
    # from the wheelhouse (stack_find_links), host 3's mirror lacks it (404): copied from the store
    h1, h2, h3 = jobs.models
    taken = first.task_runs(TAKE_KERNEL)
    wheel = taken[h1]["fetched"]
    assert [w.startswith("sglang_kernel-0.4.10-") for w in wheel] == [True], taken[h1]
    assert taken[h2]["fetched"] == wheel, taken[h2]
    assert (taken[h3]["fetched"], taken[h3]["missing"]) == ([], wheel), taken[h3]
    assert f"{NO_KERNEL_MIRROR.format(jobs.fleet.wheelhouse_url)}{wheel[0]}: HTTP 404" in \
        first.task(h3, WHY_STORE)["msg"]
    assert {h: r["event"] for h, r in first.task_runs(KERNEL_FROM_STORE).items()} == {
        h1: "runner_on_skipped", h2: "runner_on_skipped", h3: "runner_on_ok"}
    work = "/var/cache/sglang-fleet/sgl-kernel"  # the role's default sgl_kernel_work_dir
    inodes = jobs.ssh(h1, f"stat -c %i {work}/download/{wheel[0]} {work}/install/{wheel[0]}").split()
    assert len(set(inodes)) == 1, inodes  # one file, not a copy
    assert second.rc == 0, second.stdout[-6000:]
    assert set(second.stats["ok"]) == {*jobs.models, jobs.gateway}
    assert {host: second.stats.get("changed", {}).get(host, 0) for host in second.stats["ok"]} == {
        host: 0 for host in second.stats["ok"]}
    for host in jobs.models:
        assert jobs.unit(host)["ActiveState"] == "active"
        assert jobs.healthy(host)
    assert jobs.gateway_workers() == {jobs.worker_url(h): True for h in jobs.models}
    # the gateway host serves no model: the profile's uv and smg, no CUDA stack, toolkit, torch or weights
    assert jobs.ssh(jobs.gateway, "ls -1 /opt/sglang").split() == ["smg", "tools"]
    assert jobs.ssh(jobs.gateway, "ls -1 /opt/sglang/tools").startswith("uv-")
    assert jobs.ssh(jobs.gateway, "ls /var/lib/sglang/models 2>/dev/null || echo none") == "none"
    # the weights: downloaded by the first run, one directory per host, asked for by no later run
    asked_by_first, asked_by_both = jobs.hub_requests_after_site
    assert asked_by_first > 0, "the first run downloads the weights from the Hub stand-in"
    assert asked_by_both == asked_by_first, jobs.hub.requests[asked_by_first:]
    for host in jobs.models:
        assert {"config.json", "tokenizer.json", "model.safetensors"} <= set(jobs.staged[host]), jobs.staged
        assert jobs.staged[host]["model.safetensors"][1] == 2 << 20
        assert served_from(jobs, host) == (jobs.weights_dir, "1")


def served_from(jobs: JobsFleet, host: str) -> tuple[str, str]:
    """The running model server's --model-path and HF_HUB_OFFLINE, read from its process."""
    pid = jobs.unit(host)["MainPID"]
    argv = jobs.ssh(host, f"tr '\\0' '\\n' < /proc/{pid}/cmdline").splitlines()
    environ = jobs.ssh(host, f"tr '\\0' '\\n' < /proc/{pid}/environ").splitlines()
    offline = [line.split("=", 1)[1] for line in environ if line.startswith("HF_HUB_OFFLINE=")]
    return argv[argv.index("--model-path") + 1], offline[0] if offline else ""


def verify_checks(jobs: JobsFleet, workdir, **kwargs) -> dict:
    """{host: {check: entry}} of a verify.yml run with nothing but the fleet's inventory."""
    result = play(jobs, VERIFY, extravars={"verify_reports_dir": str(workdir), "verify_fail": False},
                  **kwargs)
    assert result.rc == 0, result.stdout[-6000:]
    report = json.loads((workdir / "verify.json").read_text())
    return {h["host"]: {c["check"]: c for c in h["checks"]} for h in report["hosts"]}


def stand_in_health(jobs: JobsFleet, host: str, healthy: bool) -> None:
    """The stand-in server's own control: its /health answers 503 (unhealthy) or 200 again."""
    request = urllib.request.Request(
        f"{jobs.worker_url(host)}/stand_in/{'healthy' if healthy else 'unhealthy'}", data=b"", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


def test_verify_finds_the_models_and_gateway_the_inventory_serves(jobs, provisioned, tmp_path):
    """verify.yml given no URL asks each model host's unit (the sglang_service probe, from the inventory's
    sglang_service_models) and the gateway host's smg; a model whose health fails fails its host, naming
    the unit and the URL, and the other hosts stay ok."""
    checks = verify_checks(jobs, tmp_path)
    for host in jobs.models:
        service = checks[host]["service"]
        assert service["status"] == "ok", service
        assert service["detail"] == f"sglang-main: http://127.0.0.1:{MODEL_PORT}/health answered 200"
        assert checks[host]["gateway"]["status"] == "skip"
    assert checks[jobs.gateway]["gateway"]["status"] == "ok", checks[jobs.gateway]["gateway"]
    assert checks[jobs.gateway]["gateway"]["detail"].startswith("smg: http://")
    service = checks[jobs.gateway]["service"]
    assert (service["status"], service["detail"]) == ("skip", "no service on this host")
    for check in ("cuda", "torch"):  # no stack there, by design: not a failure
        assert (checks[jobs.gateway][check]["status"], checks[jobs.gateway][check]["detail"]) == (
            "skip", "a gateway-only host: site.yml gives it no CUDA stack")
    assert [c for c in checks[jobs.gateway].values() if c["status"] == "fail"] == []
    sick = jobs.models[1]
    stand_in_health(jobs, sick, healthy=False)
    try:
        checks = verify_checks(jobs, tmp_path, limit=",".join(jobs.models))
    finally:
        stand_in_health(jobs, sick, healthy=True)
    assert checks[sick]["service"]["status"] == "fail"
    assert checks[sick]["service"]["detail"] == (
        f"sglang-main: http://127.0.0.1:{MODEL_PORT}/health answered 503")
    assert [h for h in jobs.models if checks[h]["service"]["status"] != "ok"] == [sick]
    deadline = time.monotonic() + 120  # the gateway's health checker takes the worker back
    while jobs.gateway_workers() != {jobs.worker_url(h): True for h in jobs.models}:
        assert time.monotonic() < deadline, jobs.gateway_workers()
        time.sleep(2)


def assert_a_rollout_changes_nothing(jobs: JobsFleet) -> None:
    """One more rolling_rebuild: every host unchanged, no task changed anything."""
    again = play(jobs, ROLLOUT, timeout=1800)
    assert again.rc == 0, again.stdout[-6000:]
    assert {h: r["result"] for h, r in summary(again).items()} == dict.fromkeys(
        jobs.models, "unchanged (already on it)")
    assert not any(again.stats.get("changed", {}).get(h) for h in jobs.models), [
        (h, r["task"]) for h in jobs.models for r in again.results[h] if r.get("changed")]


def entry_point(name: str) -> list[dict]:
    """A play that runs one sglang_service entry point on its own, with nothing but the inventory."""
    return [{"hosts": "all", "gather_facts": False, "tasks": [{
        "name": name, "ansible.builtin.include_role": {"name": "sglang_service", "tasks_from": name}}]}]


def left_out_by(jobs: JobsFleet) -> dict:
    """{model host: the gateway hosts that leave it out of rotation}, read by the role's rotation_state
    entry point run on its own (what a rollout reads to decide a put-back)."""
    state = play(jobs, entry_point("rotation_state"), limit=",".join(jobs.models))
    assert state.rc == 0, state.stdout[-4000:]
    return {h: state.task(h, "Keep the gateway hosts that leave this host out of rotation")[
        "ansible_facts"]["sglang_service_left_out_by"] for h in jobs.models}


def test_a_host_left_out_of_rotation_is_put_back_by_the_next_rollout(jobs, provisioned):
    """What a controller killed after a host's gate and before its put-back leaves behind: the host on its
    stack, out of the gateway's rotation (made here with the role's out_of_rotation entry point, run on its
    own from a play with just the inventory). The next rolling_rebuild, with nothing to update, reads the
    gateway's rotation state, gates the host and puts it back, saying so, and changes nothing on the other
    hosts; the rotation state read again then leaves no host out (what a later run would act on). That a
    rollout with nothing to do changes nothing is checked after the killed-controller test's rollouts."""
    left = jobs.models[2]
    out = play(jobs, entry_point("out_of_rotation"), limit=left)
    assert out.rc == 0, out.stdout[-4000:]
    assert jobs.gateway_workers() == {jobs.worker_url(h): True for h in jobs.models if h != left}
    assert left_out_by(jobs) == {h: [jobs.gateway] if h == left else [] for h in jobs.models}

    rerun = play(jobs, ROLLOUT, timeout=1800)
    assert rerun.rc == 0, rerun.stdout[-6000:]
    records = summary(rerun)
    assert records[left]["result"] == (
        "put back in rotation (on its stack already; an earlier run left it out)")
    assert {h: records[h]["result"] for h in jobs.models if h != left} == {
        h: "unchanged (already on it)" for h in jobs.models if h != left}
    assert not any(rerun.stats.get("changed", {}).get(h) for h in jobs.models if h != left), [
        (h, r["task"]) for h in jobs.models if h != left for r in rerun.results[h] if r.get("changed")]
    assert events(rerun, "Gate the host's models before it takes traffic again") == [left]
    assert jobs.gateway_workers() == {jobs.worker_url(h): True for h in jobs.models}
    assert left_out_by(jobs) == {h: [] for h in jobs.models}


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
    # the built wheel was unpacked outside the hosts' uv cache: no 1.2 GB left there per kernel build
    assert {h: kernels_in_uv_cache(jobs, h) for h in jobs.models} == jobs.kernels_in_uv_cache
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
    # a gate that took a host out passed while SMG still listed it as draining (SMG's fixed settle window;
    # it sends a draining worker no new request) instead of waiting that window out: at least once of three
    draining = {w["url"] for results in result.results.values() for r in results if r["task"] == GATEWAY_WAIT
                for w in (r.get("json") or {}).get("workers", []) if w.get("status") == "draining"}
    assert draining & {jobs.worker_url(h) for h in jobs.models}, "no take-out gate passed during SMG's drain"


class KillAt:
    """Kills the controller (SIGKILL to ansible-playbook's process group: the playbook and its workers,
    as a controller that dies takes both) when ``task`` starts on ``host``, read from ansible-runner's
    per-host task-start events, not from console text. A task's start event comes before its `when` is
    read, so the task named must be one that runs: the rollout's task names are unique for this."""

    def __init__(self, host: str, task: str):
        self.host, self.task, self.killed = host, task, False

    def __call__(self, event: dict) -> None:
        data = event.get("event_data", {})
        if self.killed or event.get("event") != "runner_on_start":
            return
        if (data.get("host"), data.get("task")) == (self.host, self.task):
            group = os.getpgid(event["pid"])
            assert group != os.getpgrp(), "ansible-playbook runs in a process group of its own"
            self.killed = True
            os.killpg(group, signal.SIGKILL)


PUT_BACK = "Put the host back in the gateway's rotation"
SWITCH = "Point current at the new stack (the old one is protected from retention)"
TORCH = "Install the locked torch"  # the rollout's profiles resolve on the host: its torch install


def test_a_rollout_killed_while_staging_resumes_then_a_failing_gate_rolls_back(jobs, first_rollout):
    """B -> C. First the controller is SIGKILLed while the build host (h1) stages C, as its torch install
    starts: nothing live changed (every host on its stack, same server process, all in rotation) and h1
    holds C half-staged (torch not installed, not sealed). The next run finishes that very stack, then rolls:
    h1 moves to C; h2's new stack crashes while loading, so h2 is rolled back to B and the rollout halts;
    h3 is not reached (nothing on it changed). A client loop through the gateway sees no failed request."""
    h1, h2, h3 = jobs.models
    assert first_rollout["result"].rc == 0, first_rollout["result"].stdout[-6000:]
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
        kill = KillAt(h1, TORCH)
        killed = play(jobs, ROLLOUT, timeout=1800, on_event=kill)
        assert kill.killed, killed.stdout[-4000:]
        assert killed.rc != 0, killed.stdout[-4000:]
        half_staged = set(jobs.stacks(h1)) - set(before[h1][1])
        # what the half-staged stacks hold of the markers of a finished torch install and of a sealed stack
        markers = {name: jobs.ssh(h1, f"cd {STACK_ROOT}/{name} && ls -A locks/torch.installed .sealed "
                                      "2>/dev/null", check=False) for name in half_staged}
        after_kill = {h: (jobs.current(h), jobs.unit(h)) for h in jobs.models}
        workers_after_kill = jobs.gateway_workers()
        result = play(jobs, ROLLOUT, timeout=2400)
    finally:
        client.stop()
        jobs.write_inventory()
    print(f"\nrollout B -> C killed while h1 staged C, then run again with host 2 failing its gate: client "
          f"requests through the gateway: {client.total} ({client.ok} ok, {len(client.failures)} failed)")
    # the kill changed nothing live, and left C half-staged on the build host only
    assert after_kill == {h: (before[h][0], before[h][2]) for h in jobs.models}
    assert workers_after_kill == {jobs.worker_url(h): True for h in jobs.models}
    assert len(half_staged) == 1, (half_staged, jobs.stacks(h1))
    (half_staged,) = half_staged
    assert markers == {half_staged: ""}, "the kill came before torch was installed and the stack sealed"
    assert result.rc != 0, "the play must fail"
    records = summary(result)
    assert records[h1]["result"] == "updated"
    assert records[h2]["result"] == "rolled back"
    assert "gate" in records[h2]["reason"].lower() or "sglang-main" in records[h2]["reason"]
    assert records[h3]["result"] == "not reached"
    # host 1 on the new fingerprint: the very stack the killed run had begun, finished
    assert jobs.current(h1) == records[h1]["new_stack"] == half_staged != before[h1][0]
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



IN_STORE = "Find which of the lock's wheels the host's wheel store holds already (read-only)"
COPY_WHEELS = "Copy the lock's other wheels from the controller (only the drifted ones, mending in place)"
FETCH_WHEELS = "Fetch the lock's other wheels from the stack's package sources (those they hold)"


def test_reproduce_moves_a_host_onto_another_hosts_lock_and_gates_its_model(jobs, first_rollout):
    """After the halted rollout host 1 runs C and host 3 still B. A lock of host 1 (snapshot.yml)
    reproduced on host 3: the stack role's `reproduce` installs C beside B, then the rollout's walk moves
    host 3 as a rollout moves a host: out of the gateway's rotation, drained, switched, its model restarted
    and gated, back in rotation. The lock's wheels host 3's store holds already are not copied again; of
    the others, those the fleet's wheelhouse (the stack's package source) holds are fetched from it by
    the host, and only the rest (the kernel built from source) is copied from the controller.
    A client sends requests through the gateway the whole time: none fails."""
    h1, _h2, h3 = jobs.models
    locks = jobs.workdir / "locks"
    snap = play(jobs, SNAPSHOT, extravars={"snapshot_host": h1, "snapshot_name": "from-host-1",
                                           "stack_snapshot_locks_dir": str(locks)}, timeout=900)
    assert snap.rc == 0, snap.stdout[-6000:]
    target, old = jobs.current(h1), jobs.current(h3)
    assert target != old
    before = jobs.unit(h3)
    start = time.monotonic()
    lock = locks / "from-host-1.lock.yml"
    client = ClientLoop(f"http://{jobs.address[jobs.gateway]}:8000")
    client.start()
    try:
        result = play(jobs, REPRODUCE, timeout=1800,
                      extravars={"reproduce_hosts": h3, "reproduce_lock": str(lock)})
    finally:
        client.stop()
    print(f"\nreproduce.yml of host 1's lock onto host 3: {time.monotonic() - start:.0f} s; client requests "
          f"through the gateway: {client.total} ({client.ok} ok, {len(client.failures)} failed)")
    assert result.rc == 0, result.stdout[-6000:]
    # the wheels host 3's store holds already are taken from there, those the wheelhouse holds fetched from
    # it, the rest copied from the controller. This fleet's stacks are unlocked stand-ins that uv resolves
    # (their files stay in uv's cache), so the store holds the weights downloader's files (model_weights),
    # some of them the lock's too; a host on a locked profile (the default) keeps its stack's files there,
    # torch included. Every stand-in stack was resolved from the wheelhouse: all but the kernel are there.
    in_store = set(result.task(h3, IN_STORE)["present"])
    fetched = set(result.task(h3, FETCH_WHEELS)["fetched"])
    copied = {item["item"]["file"] for item in result.task(h3, COPY_WHEELS)["results"]}
    locked = {w["file"] for d in yaml.safe_load(lock.read_text())["distributions"] for w in d["wheels"]}
    assert "packaging-26.4-py3-none-any.whl" in in_store, sorted(in_store)
    assert not fetched & in_store, sorted(fetched & in_store)
    assert copied == locked - in_store - fetched, sorted(copied ^ (locked - in_store - fetched))
    assert any(name.startswith("torch-") for name in fetched), sorted(fetched)
    assert [name for name in copied if not name.startswith("sglang_kernel-")] == [], sorted(copied)
    assert any(name.startswith("sglang_kernel-") for name in copied), sorted(copied)
    assert jobs.current(h3) == target
    assert jobs.fingerprint(h3) == jobs.fingerprint(h1)
    assert old in jobs.stacks(h3), "the stack it left is kept (stack_keep)"
    after = jobs.unit(h3)
    assert after["ActiveState"] == "active"
    assert after["MainPID"] != before["MainPID"], "the model unit was restarted onto the new stack"
    assert events(result, GATE_POLL) == [h3], "the readiness gate ran on the restarted unit"
    # the rollout's order: installed beside (current untouched), out of rotation, drained, switched,
    # restarted, back in rotation
    tasks = [r["task"] for r in result.results[h3] if r["event"] != "runner_on_skipped"]
    steps = [SYNC, ROUTE, "Wait for the requests in flight of each model to finish",
             "Point current at the stack", GATE_POLL, ROUTE]
    at = [tasks.index(steps[0])]
    for step in steps[1:]:
        at.append(tasks.index(step, at[-1] + 1))
    assert at == sorted(at), list(zip(steps, at))
    assert summary(result)[h3]["result"] == "updated"
    assert jobs.gateway_workers() == dict.fromkeys((jobs.worker_url(h) for h in jobs.models), True)
    assert jobs.healthy(h3)
    assert client.failures == [], client.failures[:10]
    assert client.ok > 0


def test_a_rollout_whose_controller_is_killed_converges_on_the_next_run(jobs, first_rollout):
    """Back to profile B (h1 and h3 run C; h2 was rolled back to B), with the controller SIGKILLed
    twice: once when h1 passed its gate and its put-back starts (h1 on B, out of rotation), once on
    the re-run when h3 is out of rotation and drained and its switch starts (h3 still on C, out of
    rotation). The run after that finishes the rollout: every host on B, healthy and in rotation; the
    next run changes nothing. A client sends requests through the gateway the whole time: none fails."""
    h1, h2, h3 = jobs.models
    jobs.use_profile(jobs.workdir / "rollout.yml")  # B, the first rollout's profile
    client = ClientLoop(f"http://{jobs.address[jobs.gateway]}:8000")
    client.start()
    try:
        first_kill = KillAt(h1, PUT_BACK)
        killed = play(jobs, ROLLOUT, timeout=1800, on_event=first_kill)
        assert first_kill.killed, killed.stdout[-4000:]
        assert killed.rc != 0, killed.stdout[-4000:]
        b_stack = jobs.current(h1)
        assert b_stack == jobs.current(h2) != jobs.current(h3), "h1 switched to B before the kill"
        assert jobs.gateway_workers() == {jobs.worker_url(h): True for h in (h2, h3)}, "h1 is left out"

        second_kill = KillAt(h3, SWITCH)
        killed = play(jobs, ROLLOUT, timeout=1800, on_event=second_kill)
        assert second_kill.killed, killed.stdout[-4000:]
        assert killed.rc != 0, killed.stdout[-4000:]
        assert jobs.current(h3) != b_stack, "h3 was killed before its switch"
        assert jobs.gateway_workers() == {jobs.worker_url(h): True for h in (h1, h2)}, (
            "the re-run put h1 back; h3 is left out")

        finish = play(jobs, ROLLOUT, timeout=1800)
    finally:
        client.stop()
    print(f"\nrollout C -> B killed twice, then finished: client requests through the gateway: "
          f"{client.total} ({client.ok} ok, {len(client.failures)} failed)")
    assert finish.rc == 0, finish.stdout[-6000:]
    assert {h: r["result"] for h, r in summary(finish).items()} == {
        h1: "unchanged (already on it)", h2: "unchanged (already on it)", h3: "updated"}
    for host in jobs.models:
        assert jobs.current(host) == b_stack
        assert jobs.unit(host)["ActiveState"] == "active"
        assert jobs.healthy(host)
    assert jobs.gateway_workers() == {jobs.worker_url(h): True for h in jobs.models}
    assert client.failures == [], client.failures[:10]
    assert client.ok > 0

    assert_a_rollout_changes_nothing(jobs)


def test_rollouts_rollback_and_reproduce_leave_the_staged_weights_alone(jobs, first_rollout):
    """Weights live outside stacks: after the rollouts (one a rollback, one killed twice), a reproduce and
    their restarts, every host has the very files site.yml downloaded (same inodes, sizes, times), the Hub
    stand-in was not asked once more, and every unit, on whichever stack, runs from the staged directory,
    offline."""
    asked = jobs.hub_requests_after_site[1]
    assert jobs.hub.requests[asked:] == [], "no run after site.yml may ask the Hub"
    for host in jobs.models:
        assert jobs.weights_files(host) == jobs.staged[host], host
        assert served_from(jobs, host) == (jobs.weights_dir, "1")


class RotationWatch(threading.Thread):
    """Reads the gateway's healthy workers every half second while the driver rollout runs."""

    def __init__(self, jobs: JobsFleet):
        super().__init__(daemon=True)
        self.jobs = jobs
        self.stopping = threading.Event()
        self.seen: list[frozenset] = []

    def run(self) -> None:
        while not self.stopping.is_set():
            with contextlib.suppress(OSError):
                workers = self.jobs.gateway_workers()
                self.seen.append(frozenset(url for url, healthy in workers.items() if healthy))
            time.sleep(0.5)

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)


@pytest.fixture(scope="module")
def driver_reboots(jobs, provisioned, tmp_path_factory):
    """A stand-in driver on every model host: 575 "loaded", 580 installed, the next boot loads 580."""
    models = ",".join(jobs.models)
    repo = driver_apt_repo.build(tmp_path_factory.mktemp("stand-in-apt"))
    stand_in = play(jobs, DRIVER_STAND_IN, limit=models, extravars={
        "stand_ins": str(REPO_ROOT / "tests" / "stand_ins"), "stand_in_repo": str(repo),
        "stand_in_modinfo": "open-580.95.05", "stand_in_next_boot": "b200-x8",
        "stand_in_loaded": "nvml-mismatch"})
    assert stand_in.rc == 0, stand_in.stdout[-4000:]
    boots = {h: jobs.ssh(h, BOOT_MARK) for h in [*jobs.models, jobs.gateway]}
    refused = play(jobs, DRIVER, limit=models, timeout=900,
                   extravars={**DRIVER_VARS, "nvidia_driver_reboot_ok": False})
    after_refused = {h: jobs.ssh(h, BOOT_MARK) for h in boots}
    client, watch = ClientLoop(f"http://{jobs.address[jobs.gateway]}:8000"), RotationWatch(jobs)
    client.start()
    watch.start()
    start = time.monotonic()
    try:
        rebooted = play(jobs, DRIVER, limit=models, timeout=2400,
                        extravars={**DRIVER_VARS, "nvidia_driver_reboot_ok": True})
    finally:
        seconds = time.monotonic() - start
        client.stop()
        watch.stop()
    print(f"\nnvidia_driver.yml rebooting 3 model hosts one at a time: {seconds:.0f} s; client requests "
          f"through the gateway: {client.total} ({client.ok} ok, {len(client.failures)} failed; per worker "
          f"{dict(client.workers)})")
    return {"boots": boots, "refused": refused, "after_refused": after_refused, "rebooted": rebooted,
            "after": {h: jobs.ssh(h, BOOT_MARK) for h in boots}, "client": client, "watch": watch}


def test_driver_reboot_not_allowed_reboots_nothing_and_names_every_host(jobs, driver_reboots):
    refused = driver_reboots["refused"]
    assert refused.rc != 0
    assert driver_reboots["after_refused"] == driver_reboots["boots"], "nothing rebooted"
    survey = refused.task(jobs.models[0], "Say which hosts need a reboot")["msg"]
    print(survey)
    for host in jobs.models:
        assert f"{host} (" in survey, (host, survey)
    assert survey.startswith("hosts that need a reboot for their driver: ")
    assert "Driver/library version mismatch" in survey
    assert survey.endswith(
        "nvidia_driver_reboot_ok is false: none is rebooted (reboot them yourself, or set it to true).")
    stopped = refused.task(jobs.models[0], "Stop the host until it is rebooted")
    assert stopped["event"] == "runner_on_failed"
    assert "Re-run after reboot" in stopped["msg"]
    # the serial walk stopped at the first host: no host left rotation
    assert not [h for h in jobs.models if any(r["task"] == ROUTE for r in refused.results.get(h, []))]


def test_driver_reboot_walks_the_model_hosts_one_at_a_time_and_drops_no_request(jobs, driver_reboots):
    rebooted, client, watch = driver_reboots["rebooted"], driver_reboots["client"], driver_reboots["watch"]
    assert rebooted.rc == 0, rebooted.stdout[-8000:]
    before, after = driver_reboots["after_refused"], driver_reboots["after"]
    for host in jobs.models:
        assert after[host] != before[host], f"{host} was not rebooted"
    assert after[jobs.gateway] == before[jobs.gateway], "the gateway is not rebooted"
    # one at a time, in order: each new boot after the one before it
    assert [int(after[h]) for h in jobs.models] == sorted(int(after[h]) for h in jobs.models)
    for host in jobs.models:
        tasks = [r["task"] for r in rebooted.results[host] if r["event"] != "runner_on_skipped"]
        steps = [ROUTE, "Wait for the requests in flight of each model to finish",
                 next(t for t in tasks if t.startswith("Reboot for the driver")),
                 "Require the loaded driver to be the installed one and every GPU visible",
                 "Progress of sglang-main", ROUTE]
        at = [tasks.index(steps[0])]
        for step in steps[1:]:
            at.append(tasks.index(step, at[-1] + 1))
        assert at == sorted(at), (host, list(zip(steps, at)))
        # out of rotation: the gateway sent it none of its check's requests; back: it answered one
        out, back = [r for r in rebooted.results[host] if r["task"] == ROUTE]
        rows = {row["id"]: row for row in out["workers"]}
        assert rows[f"{host}-main"]["dispatched"] == 0
        assert not rows[f"{host}-main"]["in_rotation"]
        assert {row["id"]: row for row in back["workers"]}[f"{host}-main"]["succeeded"] >= 1
        drained = rebooted.task(host, "Say how the drain went")["results"]
        said = [r["msg"].split(" after ")[0] for r in drained]
        assert said == ["sglang-main: no request in flight"], drained
        assert jobs.unit(host)["ActiveState"] == "active"
        assert jobs.healthy(host)
    # at most one host out of the gateway's rotation at any time, and each one out once
    every = {jobs.worker_url(h) for h in jobs.models}
    assert watch.seen, "the gateway was never read"
    assert min(len(seen) for seen in watch.seen) >= len(every) - 1, sorted(map(len, watch.seen))
    assert {url for seen in watch.seen for url in every - seen} == every
    assert jobs.gateway_workers() == dict.fromkeys(every, True)
    assert client.failures == [], client.failures[:10]
    assert client.ok > 0
    assert set(client.workers) == set(jobs.models), dict(client.workers)


# A model that spans two hosts (multi-node tensor parallel: node rank 0 on h2, rank 1 on h3). The stand-in's
# ranks form one group at the dist-init address: rank 0 is ready only once rank 1 joined running the same
# stack, so a walk that restarted one rank at a time would fail rank 0's gate.
PAIR_PORT = 30010
CRASH_ON_STACK = "/run/sglang-stand-in/crash-on-stack"  # the stand-in crashes on the stack this file names
PLAN_UNITS = "Group the hosts into units and batches (a multi-node model's hosts are rolled together)"
RESTART = "Restart the model units on the new stack and pass the readiness gate"


def pair_model() -> dict:
    return {"name": "pair", "model_path": "/models/stand-in", "host": "0.0.0.0", "port": PAIR_PORT,
            "tp_size": 2, "nodes_group": "pair_tp", "env": {"SGLANG_STAND_IN_DELAY": "1", **KEEP_PARSE}}


def pair_healthy(jobs: JobsFleet, rank0: str) -> bool:
    return jobs.healthy(rank0, PAIR_PORT)


def pair_pids(jobs: JobsFleet, hosts) -> dict:
    return {h: jobs.ssh(h, "systemctl show --property=MainPID --value sglang-pair.service") for h in hosts}


class TaskStarts:
    """(host, task) of every task start, in the order the controller started them."""

    def __init__(self):
        self.starts: list[tuple[str, str]] = []

    def __call__(self, event: dict) -> None:
        if event.get("event") == "runner_on_start":
            data = event.get("event_data", {})
            self.starts.append((data.get("host"), data.get("task")))

    def first(self, host: str, task: str) -> int:
        return self.starts.index((host, task))


def pair_inventory(jobs: JobsFleet):
    """h2 and h3 serve `pair` besides `main` (group pair_tp); returns the group file (unlink it and
    jobs.write_inventory() to go back)."""
    _h1, h2, h3 = jobs.models
    pair_hosts = {h: {"sglang_service_models": [model(jobs.hub.url), pair_model()],
                      "sglang_service_gate_bound": 40} for h in (h2, h3)}
    groups = jobs.inventory / "30-pair.yml"
    groups.write_text(yaml.safe_dump({"all": {"children": {"pair_tp": {"hosts": {h2: None, h3: None}}}}}))
    jobs.write_inventory(pair_hosts)
    return groups


@pytest.fixture(scope="module")
def pair_rollouts(jobs, provisioned, first_rollout):
    """h2 and h3 also serve `pair` (provisioned by site.yml on B), then two rollouts: every model host to A
    (the default profile: site.yml's stack, still on each host, so the walk switches without staging),
    then the pair's hosts back to B with h3's servers crashing on B (the stand-in's crash-on-stack file
    names B on h3: its `main` fails its gate, its rank 1 never joins). Until 2026-12-08 the first rollout
    went to a profile of its own (a new stack on each host: three ~7 GB installs, and a clean-clone
    .ci/run's disk ran out); staging is the other rollouts' subject, the pair's is the unit's walk."""
    _h1, h2, h3 = jobs.models
    groups = pair_inventory(jobs)
    b_profile = jobs.workdir / "rollout.yml"
    jobs.use_profile(b_profile)
    site = play(jobs, SITE, limit=f"{h2},{h3}", timeout=1800)
    assert site.rc == 0, site.stdout[-6000:]
    assert pair_healthy(jobs, h2), "site.yml started the pair (rank 0 on h2, rank 1 on h3)"
    on_b = {h: jobs.current(h) for h in (h2, h3)}
    stacks_before = {h: jobs.stacks(h) for h in (h2, h3)}
    jobs.use_profile(None)  # A
    pids = pair_pids(jobs, (h2, h3))
    client = ClientLoop(f"http://{jobs.address[jobs.gateway]}:8000")
    client.start()
    try:
        starts = TaskStarts()
        passed = play(jobs, ROLLOUT, timeout=2400, on_event=starts)
        on_a = {h: jobs.current(h) for h in (h2, h3)}
        after_passed = {"pair": pair_healthy(jobs, h2), "pids": pair_pids(jobs, (h2, h3)),
                        "workers": jobs.gateway_workers()}
        jobs.use_profile(b_profile)
        jobs.ssh(h3, f"mkdir -p /run/sglang-stand-in && echo {on_b[h3]} > {CRASH_ON_STACK}")
        failed = play(jobs, ROLLOUT, timeout=2400, extravars={"rolling_rebuild_hosts": "pair_tp"})
        after_failed = {"current": {h: jobs.current(h) for h in (h2, h3)}, "pair": pair_healthy(jobs, h2),
                        "main": {h: jobs.healthy(h) for h in jobs.models}, "workers": jobs.gateway_workers()}
    finally:
        client.stop()
        jobs.ssh(h3, f"rm -f {CRASH_ON_STACK}", check=False)
        jobs.write_inventory()
        groups.unlink()
    print(f"\nrollouts of a model on 2 hosts (B -> A through, A -> B failing on h3): client requests through "
          f"the gateway: {client.total} ({client.ok} ok, {len(client.failures)} failed)")
    return {"stacks_before": stacks_before, "on_b": on_b, "on_a": on_a, "pids": pids, "starts": starts,
            "passed": passed, "after_passed": after_passed, "failed": failed, "after_failed": after_failed,
            "client": client}


def results(records: dict) -> dict:
    return {h: (r["result"], r["reason"]) for h, r in records.items()}


def test_a_multi_node_model_is_rolled_as_one_unit_gated_at_rank_0(jobs, pair_rollouts):
    """Both hosts of the pair in one batch: both out of rotation, drained and switched before either
    restarts, restarted together, rank 0 gated, both back in; h1 (a unit of its own) is its own batch. The
    client through the gateway (served by h1 while the pair's hosts are out) sees no failure."""
    h1, h2, h3 = jobs.models
    passed, starts, after = pair_rollouts["passed"], pair_rollouts["starts"], pair_rollouts["after_passed"]
    assert passed.rc == 0, passed.stdout[-6000:]
    [plan] = passed.task_runs(PLAN_UNITS).values()
    assert (plan["units"], plan["batches"]) == ([[h1], [h2, h3]], [1, 2])
    assert max(starts.first(h, SWITCH) for h in (h2, h3)) < min(starts.first(h, RESTART) for h in (h2, h3))
    assert max(starts.first(h, "Take the host out of the gateway's rotation") for h in (h2, h3)) < min(
        starts.first(h, SWITCH) for h in (h2, h3))
    records = summary(passed)
    assert records[h2]["result"] == records[h3]["result"] == "updated", results(records)
    assert records[h2]["new_fingerprint"] == records[h3]["new_fingerprint"]
    on_a = pair_rollouts["on_a"]
    assert on_a[h2] == on_a[h3] == records[h2]["new_stack"] != pair_rollouts["on_b"][h2]
    # A was on both hosts already (site.yml's stack, kept): switched to, nothing staged
    assert all(on_a[h] in pair_rollouts["stacks_before"][h] for h in (h2, h3))
    assert not events(passed, SYNC), "no stack staged"
    assert all(after["pids"][h] != pair_rollouts["pids"][h] for h in (h2, h3)), "both ranks restarted"
    assert after["pair"], "rank 0 ready: rank 1 joined on the same stack"
    assert after["workers"] == {jobs.worker_url(h): True for h in jobs.models}
    client = pair_rollouts["client"]
    assert client.failures == [], client.failures[:10]
    assert client.ok > 0


def test_a_multi_node_model_whose_rank_fails_is_rolled_back_as_one_unit(jobs, pair_rollouts):
    """Back to B on the pair's hosts, with h3's servers crashing on B: h3's `main` fails its gate and rank 0
    on h2 never sees rank 1, so both hosts go back to A together, the pair serves again, the rollout
    halts, and the client through the gateway sees no failure."""
    _h1, h2, h3 = jobs.models
    failed, after = pair_rollouts["failed"], pair_rollouts["after_failed"]
    assert failed.rc != 0, failed.stdout[-6000:]
    plan = failed.task_runs(PLAN_UNITS)
    assert [(r["units"], r["batches"]) for r in plan.values()] == [([[h2, h3]], [2])]
    records = summary(failed)
    assert records[h2]["result"] == records[h3]["result"] == "rolled back", results(records)
    assert "sglang-main" in records[h3]["reason"], results(records)
    assert f"{h3}: " in records[h2]["reason"], results(records)
    assert after["current"] == pair_rollouts["on_a"], "both ranks back on A"
    assert after["pair"], "rank 0 ready again: rank 1 rejoined on the same stack"
    assert all(after["main"].values()), after["main"]
    assert after["workers"] == {jobs.worker_url(h): True for h in jobs.models}


DRIVER_UNITS = "Group the hosts into units (a multi-node model's hosts are walked together)"
DRIVER_RESTART = "Restart the unit's models together and gate them"


@pytest.fixture(scope="module")
def pair_driver_reboot(jobs, pair_rollouts, tmp_path_factory):
    """The stand-in driver on the pair's hosts: h2's loaded module is the installed one, h3's needs a reboot
    (rank 1's host). nvidia_driver.yml on both with nvidia_driver_reboot_ok, a client through the gateway."""
    _h1, h2, h3 = jobs.models
    repo = driver_apt_repo.build(tmp_path_factory.mktemp("stand-in-apt-pair"))
    for host, loaded in ((h2, "b200-x8"), (h3, "nvml-mismatch")):
        stand_in = play(jobs, DRIVER_STAND_IN, limit=host, extravars={
            "stand_ins": str(REPO_ROOT / "tests" / "stand_ins"), "stand_in_repo": str(repo),
            "stand_in_modinfo": "open-580.95.05", "stand_in_next_boot": "b200-x8", "stand_in_loaded": loaded})
        assert stand_in.rc == 0, stand_in.stdout[-4000:]
    groups = pair_inventory(jobs)
    boots = {h: jobs.ssh(h, BOOT_MARK) for h in (h2, h3)}
    pids = pair_pids(jobs, (h2, h3))
    client = ClientLoop(f"http://{jobs.address[jobs.gateway]}:8000")
    client.start()
    try:
        starts = TaskStarts()
        result = play(jobs, DRIVER, limit=f"{h2},{h3}", timeout=1800, on_event=starts,
                      extravars={**DRIVER_VARS, "nvidia_driver_reboot_ok": True})
        after = {"boots": {h: jobs.ssh(h, BOOT_MARK) for h in (h2, h3)}, "pids": pair_pids(jobs, (h2, h3)),
                 "pair": pair_healthy(jobs, h2), "workers": jobs.gateway_workers()}
    finally:
        client.stop()
        jobs.write_inventory()
        groups.unlink()
    print(f"\nnvidia_driver.yml rebooting rank 1's host of a model on 2 hosts: client requests through the "
          f"gateway: {client.total} ({client.ok} ok, {len(client.failures)} failed)")
    return {"result": result, "starts": starts, "boots": boots, "pids": pids, "after": after,
            "client": client}


def test_a_driver_reboot_of_one_rank_takes_the_whole_model_out_and_restarts_it_together(jobs,
                                                                                       pair_driver_reboot):
    """Only h3 (rank 1's host) needs a reboot, but the pair stops when any rank does: both hosts leave the
    gateway's rotation, only h3 reboots, the pair's units restart on both hosts together and rank 0 is gated,
    then both go back. The client through the gateway (h1 serves meanwhile) sees no failure."""
    _h1, h2, h3 = jobs.models
    result, starts = pair_driver_reboot["result"], pair_driver_reboot["starts"]
    after = pair_driver_reboot["after"]
    assert result.rc == 0, result.stdout[-8000:]
    [units] = result.task_runs(DRIVER_UNITS).values()
    assert units["units"] == [[h2, h3]]
    boots = pair_driver_reboot["boots"]
    assert after["boots"][h3] != boots[h3], "h3 needed a reboot"
    assert after["boots"][h2] == boots[h2], "h2 did not need one"
    # the unit left rotation (one change, from its first host) before h3 rebooted; the pair's units
    # restarted on both hosts after it; the unit came back after the restart
    reboot = next(t for h, t in starts.starts if h == h3 and t.startswith("Reboot for the driver"))
    assert starts.first(h2, "Take the host's unit out of the gateway's rotation") < starts.first(h3, reboot)
    assert min(starts.first(h, DRIVER_RESTART) for h in (h2, h3)) > starts.first(h3, reboot)
    assert starts.first(h2, "Put the host's unit back in the gateway's rotation") > max(
        starts.first(h, DRIVER_RESTART) for h in (h2, h3))
    assert all(after["pids"][h] != pair_driver_reboot["pids"][h] for h in (h2, h3)), "both ranks restarted"
    assert after["pair"], "rank 0 ready: rank 1 rejoined after the reboot"
    assert after["workers"] == {jobs.worker_url(h): True for h in jobs.models}
    client = pair_driver_reboot["client"]
    assert client.failures == [], client.failures[:10]
    assert client.ok > 0
