"""Roles stack + pytorch on the test fleet (three real hosts, no internet, wheels from the wheelhouse).

The session fixture ``fleet_stack`` ran playbooks/site.yml once: a check run on the fresh hosts, then
the real run, which installed torch 2.14.1 (the cu130 build) with uv into a stack on every host and
activated it. The first host declares gpu_capability "12.0"; the others have no GPU and nothing
declared, so they target the defaults "10.0", "12.0" (and get a stack of another name).
"""

from __future__ import annotations

import hashlib

import pytest
from cache import wheelhouse
from documented import assert_documented
from stackrun import profile_file

pytestmark = pytest.mark.integration

TORCH_VERSION = "2.14.1+cu130"
READ_TORCH = "Read the stack's torch build and arch list"
RECORD_TORCH = "Record torch's answer in the stack (read instead of a probe once the stack is sealed)"
REQUIRE_TORCH = "Require torch code for every target capability"
REQUIRE_SOURCES = "Require every package source to answer"
PLAN = "Check the profile and plan the stack"
UV_INSTALL = "Install the profile's uv into its own environment"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_check_run_on_fresh_hosts_passes_and_creates_nothing(fleet_stack):
    assert fleet_stack.check_run.rc == 0, fleet_stack.check_run.stdout[-4000:]
    assert fleet_stack.left_by_check == []


def test_torch_cuda_build_installed_and_checked_on_every_host(fleet_stack):
    first = fleet_stack.first_run
    for host in fleet_stack.hosts:
        torch = first.task(host, READ_TORCH)
        assert torch["torch_version"] == TORCH_VERSION
        assert torch["build"] == "cuda"
        assert "sm_120" in torch["arch_list"]
        assert torch["missing"] == []
        assert torch["python"] == f"{fleet_stack.root}/{fleet_stack.stack_names[host]}/bin/python"
        assert "recorded" not in torch  # probed: the stack was not sealed yet
        assert first.task(host, RECORD_TORCH)["changed"] is True
        assert first.task(host, "Install the locked torch")["changed"] is True


def test_targets_come_from_the_inventory_else_the_defaults_with_a_notice(fleet_stack):
    first = fleet_stack.first_run
    declared, *undeclared = fleet_stack.hosts
    plan = first.task(declared, PLAN)
    assert (plan["targets"], plan["target_source"]) == (["12.0"], "inventory")
    assert first.task(declared, "Say that the default targets are used")["event"] == "runner_on_skipped"
    assert first.task(declared, READ_TORCH)["require"] == ["12.0"]
    for host in undeclared:
        plan = first.task(host, PLAN)
        assert (plan["targets"], plan["target_source"]) == (["10.0", "12.0"], "default")
        notice = first.task(host, "Say that the default targets are used")["msg"]
        assert "no gpu_capability in the inventory and no GPU" in notice
    # the targets are part of the fingerprint: other targets, another stack
    names = fleet_stack.stack_names
    assert names[declared] != names[undeclared[0]] == names[undeclared[1]]


def test_stack_layout_current_manifest_constraints_sealed(fleet_stack):
    for host in fleet_stack.hosts:
        name = fleet_stack.stack_names[host]
        plan = fleet_stack.first_run.task(host, PLAN)
        assert_documented("stack_plan", plan)
        first = fleet_stack.first_run
        assert_documented("stack_retention", first.task(host, "Find old stacks beyond stack_keep"))
        assert_documented("stack_wheels", first.task(host, "Find the stack's wheels the cache lacks"))
        assert name == plan["stack_name"] == f"stable-{plan['fingerprint'][:12]}"
        remote = fleet_stack.fleet.testinfra(host)
        path = f"{fleet_stack.root}/{name}"
        assert remote.file(f"{fleet_stack.root}/current").linked_to == path
        manifest = remote.file(f"{path}/stack.json").content_string
        assert plan["fingerprint"] in manifest
        assert remote.file(f"{path}/constraints.txt").content_string.splitlines()[0] == "torch==2.14.1"
        assert remote.file(f"{path}/.sealed").content_string.strip() == plan["fingerprint"]
        assert "torch==2.14.1" in remote.file(f"{path}/locks/torch.txt").content_string


def test_every_wheel_the_stack_was_built_from_is_in_the_wheel_cache(fleet_stack):
    kept = fleet_stack.wheel_cache / fleet_stack.uncached_wheel
    assert kept.exists(), f"{fleet_stack.uncached_wheel} was not copied to the wheel cache"
    assert sha256(kept.read_bytes()) == sha256((wheelhouse() / fleet_stack.uncached_wheel).read_bytes())
    lock = fleet_stack.fleet.ssh(fleet_stack.hosts[0], f"cat {fleet_stack.root}/current/locks/torch.txt")
    pins = [line for line in lock.stdout.splitlines() if "==" in line]
    cached = {path.name.split("-")[0].lower().replace("_", "-")
              for path in fleet_stack.wheel_cache.glob("*.whl")}
    assert {pin.split("==")[0] for pin in pins} <= cached


@pytest.fixture(scope="module")
def second_run(fleet_stack):
    return fleet_stack.run()


def test_second_run_changes_nothing(fleet_stack, second_run):
    assert second_run.rc == 0, second_run.stdout[-4000:]
    assert second_run.stats.get("changed", {}) == {}, second_run.stats
    for host in fleet_stack.hosts:
        torch = second_run.task(host, READ_TORCH)
        # sealed: torch's answer recorded before sealing, rated again, no torch import
        assert (torch["torch_version"], torch["recorded"], torch["missing"]) == (TORCH_VERSION, True, [])
        assert second_run.task(host, RECORD_TORCH)["event"] == "runner_on_skipped"
        assert fleet_stack.current(host) == fleet_stack.stack_names[host]
        # uv answered its version, so pip was not asked again
        assert second_run.task(host, UV_INSTALL)["event"] == "runner_on_skipped"


def test_cpu_torch_fails_naming_the_build_and_current_is_untouched(fleet_stack, second_run):
    host = fleet_stack.hosts[1]
    before = fleet_stack.current(host)
    profile = profile_file(fleet_stack.workdir, "cpu", **{"torch.version": "2.13.0"})
    result = fleet_stack.run(profile=profile, limit=host)
    try:
        assert result.rc != 0
        message = result.task(host, REQUIRE_TORCH)["msg"]
        assert "torch 2.13.0+cpu" in message
        assert "is a CPU build" in message
        assert "10.0, 12.0" in message
        assert "`current` is unchanged" in message
        assert fleet_stack.current(host) == before
        plan = result.task(host, PLAN)
        assert plan["stack_name"].startswith("cpu-")
        sealed = fleet_stack.fleet.ssh(host, f"test -e {plan['stack_path']}/.sealed", check=False)
        assert sealed.returncode != 0
    finally:
        fleet_stack.fleet.ssh(host, f"rm -rf {fleet_stack.root}/cpu-*")


def test_changed_pin_makes_a_second_stack_beside_the_first(fleet_stack, second_run):
    host = fleet_stack.hosts[2]
    first = fleet_stack.stack_names[host]
    first_manifest = fleet_stack.fleet.ssh(host, f"sha256sum {fleet_stack.root}/{first}/stack.json").stdout
    profile = profile_file(fleet_stack.workdir, "stable", **{"sglang.version": "0.5.22"})
    changed = fleet_stack.run(profile=profile, limit=host)
    try:
        assert changed.rc == 0, changed.stdout[-4000:]
        second = changed.task(host, PLAN)["stack_name"]
        assert second != first
        assert second.startswith("stable-")
        assert fleet_stack.stacks(host) == sorted([first, second])
        assert fleet_stack.current(host) == second
        assert changed.task(host, READ_TORCH)["torch_version"] == TORCH_VERSION
        # the first stack was not touched
        assert fleet_stack.fleet.ssh(host, f"sha256sum {fleet_stack.root}/{first}/stack.json").stdout \
            == first_manifest
    finally:
        # back to the session's stack, keeping no old stack: sealed, so only the link changes, and
        # the second stack (no longer current) is pruned
        back = fleet_stack.run(limit=host, stack_keep=0)
    assert back.rc == 0, back.stdout[-4000:]
    assert back.task(host, "Install the locked torch")["event"] == "runner_on_skipped"
    assert back.task(host, "Point current at the stack")["changed"] is True
    assert back.task(host, "Find old stacks beyond stack_keep")["remove"] == [second]
    assert fleet_stack.current(host) == first
    assert fleet_stack.stacks(host) == [first]


BAD_INPUT = {
    "unknown profile key": ({"torch.cuda_tagg": "cu130"}, {},
                            ["unknown key 'torch.cuda_tagg'", "did you mean 'torch.cuda_tag'?"]),
    "torch tag for another CUDA": ({"torch.cuda_tag": "cu128", "torch.index_url": "https://x.invalid/whl/cu128"},
                                   {}, ["torch.cuda_tag cu128 (CUDA 12.8) does not match cuda.version 13.0"]),
    "full disk": ({"sglang.version": "0.5.21"}, {"stack_min_free_gb": 100000},
                  ["not enough free disk for stack bad-", "a stack needs 100000 GiB"]),
    "unreachable mirror": ({"sglang.version": "0.5.21"}, {"stack_find_links": ["http://192.0.2.1:9/wheels/"]},
                           ["http://192.0.2.1:9/wheels/ is unreachable from this host",
                            "Nothing was installed"]),
}


@pytest.mark.parametrize("what", BAD_INPUT)
def test_bad_input_fails_before_anything_is_installed(fleet_stack, second_run, what):
    profile_changes, extravars, fragments = BAD_INPUT[what]
    host = fleet_stack.hosts[0]
    before = (fleet_stack.stacks(host), fleet_stack.current(host))
    profile = profile_file(fleet_stack.workdir, "bad", **profile_changes)
    result = fleet_stack.run(profile=profile, limit=host, stack_url_timeout=3, **extravars)
    assert result.rc != 0, what
    failed = [r for r in result.results[host] if r["event"] == "runner_on_failed"]
    assert len(failed) == 1, what
    for fragment in fragments:
        assert fragment in failed[0]["msg"], (what, failed[0]["msg"])
    assert result.stats.get("changed", {}) == {}, (what, result.stats)
    assert (fleet_stack.stacks(host), fleet_stack.current(host)) == before
