"""playbooks/preflight.yml and playbooks/site.yml, run through ansible-runner like a user runs them.

The bad-inventory hosts point at TEST-NET addresses (192.0.2.0/24, never routed): if preflight
contacted them before failing, the result would be "unreachable", not the inventory failure asserted.
"""

from __future__ import annotations

import grp
import json
import platform
import pwd
import subprocess
import textwrap
from pathlib import Path

import pytest
import tomllib
from ansible_run import REPO_ROOT, run_module, run_playbook
from cache import uv_cache, wheelhouse
from lockwheels import fill_from_lock
from pins import UV_VERSION

pytestmark = pytest.mark.integration

PREFLIGHT = REPO_ROOT / "playbooks" / "preflight.yml"
SITE = REPO_ROOT / "playbooks" / "site.yml"
CHECK_TASK = "Check project variables against every role's argument specs"
READ_TORCH = "Read the stack's torch build and arch list"
NO_CONNECT = "--tags preflight_version,preflight_inventory"
GROUPED = "Put the host in the group of what site.yml gives it (sglang_stack_hosts, or sglang_gateway_only)"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_example_inventory_passes_without_contacting_hosts():
    result = run_playbook(PREFLIGHT, REPO_ROOT / "inventory" / "example", cmdline=NO_CONNECT)
    assert result.rc == 0, result.stdout
    hosts = {"bw-01", "bw-02", "b200-01", "h200-01", "gw-01", "build-01"}
    assert set(result.results) == hosts
    for host in hosts:
        checked = result.task(host, CHECK_TASK)
        assert checked["event"] == "runner_on_ok"
        assert checked["problems"] == []
    assert "gpu_capability" in result.task("bw-01", CHECK_TASK)["checked"]
    assert "gpu_capability" not in result.task("build-01", CHECK_TASK)["checked"]
    # what site.yml gives each host (the grouping runs with any --tags): the gateway serves no model
    assert {host: result.task(host, GROUPED)["add_group"] for host in hosts} == {
        host: "sglang_gateway_only" if host == "gw-01" else "sglang_stack_hosts" for host in hosts}


def test_a_gateway_host_that_serves_a_model_or_builds_gets_a_stack(tmp_path):
    """Only a gateway host with no model that builds no kernel is gateway-only (no CUDA stack)."""
    inventory = write(tmp_path, "hosts.yml", """\
        all:
          vars: {ansible_connection: local, ansible_python_interpreter: "{{ ansible_playbook_python }}"}
          children:
            sglang_gateway:
              hosts:
                gw-only: {}
                gw-serving:
                  sglang_service_models: [{name: m, model_path: org/m, port: 30000}]
                gw-builder: {}
                gw-named-builder: {sgl_kernel_builder: gw-named-builder}
            builders:
              hosts:
                gw-builder: {}
            other:
              hosts:
                plain: {}
        """)
    result = run_playbook(PREFLIGHT, inventory, cmdline=NO_CONNECT)
    assert result.rc == 0, result.stdout
    grouped = {host: result.task(host, GROUPED)["add_group"] for host in result.results}
    assert grouped == {"gw-only": "sglang_gateway_only", **dict.fromkeys(
        ["gw-serving", "gw-builder", "gw-named-builder", "plain"], "sglang_stack_hosts")}


def test_kimi_example_inventory_passes_without_contacting_hosts():
    result = run_playbook(PREFLIGHT, REPO_ROOT / "inventory" / "kimi-k2.5", cmdline=NO_CONNECT)
    assert result.rc == 0, result.stdout
    hosts = {"kimi-01", "kimi-b200-01", "kimi-gw-01", "kimi-build-01"}
    assert set(result.results) == hosts
    for host in hosts:
        checked = result.task(host, CHECK_TASK)
        assert checked["event"] == "runner_on_ok"
        assert checked["problems"] == []
    for host in ("kimi-01", "kimi-b200-01"):
        assert {"gpu_capability", "sglang_service_models", "sglang_service_spec_gate",
                "sglang_service_spec_min_accept_length"} <= set(result.task(host, CHECK_TASK)["checked"])


def test_bad_yaml_inventory_names_host_and_variable(tmp_path):
    inventory = write(tmp_path, "hosts.yml", """\
        all:
          vars:
            ansible_user: nobody
          hosts:
            float-cap: {ansible_host: 192.0.2.1, gpu_capability: 12.0}
            unknown-cap: {ansible_host: 192.0.2.2, gpu_capability: "13.0"}
            string-bool: {ansible_host: 192.0.2.3, preflight_fail_on_unsupported_os: "no"}
            typo: {ansible_host: 192.0.2.4, gpu_capabilty: "12.0"}
            removed: {ansible_host: 192.0.2.5, sgl_kernel_cuda_archs: "120"}
            good: {ansible_host: 192.0.2.6, gpu_capability: "12.0"}
        """)
    result = run_playbook(PREFLIGHT, inventory)
    assert result.rc != 0
    expected = {
        "float-cap": "gpu_capability must be a string, got float 12.0",
        "unknown-cap": "gpu_capability: '13.0' is not the compute capability of any known NVIDIA GPU",
        "string-bool": "preflight_fail_on_unsupported_os is the string 'no', not a boolean",
        "typo": "gpu_capabilty is not a variable of this project; did you mean 'gpu_capability'?",
        "removed": "sgl_kernel_cuda_archs is not supported",
    }
    for host, fragment in expected.items():
        res = result.task(host, CHECK_TASK)
        assert res["event"] == "runner_on_failed"
        assert f"host {host}: {fragment}" in res["msg"], res["msg"]
    assert result.task("good", CHECK_TASK)["event"] == "runner_on_ok"
    # any_errors_fatal: nothing after the check ran on any host, so none was contacted.
    for host in [*expected, "good"]:
        assert [r["task"] for r in result.results[host]][-1] == CHECK_TASK
    assert not any(result.stats.get("dark", {}).values())


def test_the_check_runs_on_a_host_that_wants_it_after_one_that_turned_it_off(tmp_path):
    """The specs are read once per play (run_once): a first host that turns the check off must not
    take the check away from the hosts after it."""
    inventory = write(tmp_path, "hosts.yml", """\
        all:
          hosts:
            unchecked: {ansible_host: 192.0.2.20, preflight_check_inventory: false, gpu_capabilty: "12.0"}
            checked: {ansible_host: 192.0.2.21, gpu_capabilty: "12.0"}
        """)
    result = run_playbook(PREFLIGHT, inventory, cmdline=NO_CONNECT)
    assert result.rc != 0
    assert result.task("unchecked", CHECK_TASK)["event"] == "runner_on_skipped"
    failed = result.task("checked", CHECK_TASK)
    assert failed["event"] == "runner_on_failed"
    assert "host checked: gpu_capabilty is not a variable of this project" in failed["msg"], failed["msg"]


def test_ini_inventory_unquoted_capability_is_a_float(tmp_path):
    inventory = write(tmp_path, "hosts.ini", """\
        [blackwell]
        bw-01 ansible_host=192.0.2.10

        [blackwell:vars]
        gpu_capability=12.0
        """)
    result = run_playbook(PREFLIGHT, inventory)
    assert result.rc != 0
    message = result.task("bw-01", CHECK_TASK)["msg"]
    assert "host bw-01: gpu_capability must be a string, got float 12.0" in message


def test_ansible_core_outside_window_fails_first(tmp_path):
    result = run_playbook(PREFLIGHT, REPO_ROOT / "inventory" / "example", cmdline=NO_CONNECT,
                          extravars={"__preflight_ansible_core_min": "2.99.0"})
    assert result.rc != 0
    [res] = result.task_runs("Require ansible-core within the supported window").values()
    assert "is outside the supported window [2.99.0, 2.20.0)" in res["msg"]
    assert "make setup" in res["msg"]
    with pytest.raises(KeyError):
        result.task("bw-01", CHECK_TASK)


def test_unsupported_os_fails_with_host_named():
    result = run_playbook(PREFLIGHT, extravars={"preflight_supported_os": {"Debian": ["11"]}})
    assert result.rc != 0
    res = result.task("localhost", "Require a supported operating system and architecture")
    assert res["event"] == "runner_on_failed"
    assert "localhost runs Debian 12 on x86_64; supported: Debian 11" in res["msg"]


def test_unsupported_os_can_be_reported_only():
    result = run_playbook(PREFLIGHT, extravars={"preflight_supported_os": {"Debian": ["11"]},
                                                "preflight_fail_on_unsupported_os": False})
    assert result.rc == 0, result.stdout
    assert "NOT supported" in result.task("localhost", "Report the operating system")["msg"]


INSTALL_KERNEL = "Install the wheel into the stack, without dependencies so that torch stays as pinned"


def locked_kernel_sha256() -> str:
    """The sha256 of this machine's sglang-kernel wheel in the stable profile's lock."""
    lock = tomllib.loads((REPO_ROOT / "profiles" / "pylock.stable.toml").read_text())
    [package] = [p for p in lock["packages"] if p["name"] == "sglang-kernel"]
    [wheel] = [w for w in package["wheels"] if w["url"].endswith(f"_{platform.machine()}.whl")]
    return wheel["hashes"]["sha256"]


SERVICE_ACCOUNT = "sglang-site-test"  # the service user and group the local site test makes


def exists(lookup, name: str) -> bool:
    try:
        lookup(name)
    except KeyError:
        return False
    return True


@pytest.fixture
def service_account():
    """The service user and group site.yml makes on this machine (a name of the test's own, so that a
    machine's real `sglang` account is never touched), removed after the test when it made them."""
    made = [(lookup, command) for lookup, command in ((pwd.getpwnam, "userdel"), (grp.getgrnam, "groupdel"))
            if not exists(lookup, SERVICE_ACCOUNT)]
    yield SERVICE_ACCOUNT
    for lookup, command in made:  # the user first: a group is not removed while it is a user's primary one
        if exists(lookup, SERVICE_ACCOUNT):
            subprocess.run([command, SERVICE_ACCOUNT], check=True)


def test_site_provisions_a_second_stack_root_and_cache_beside_the_first(tmp_path, service_account):
    """`make site`'s playbook on this machine, into an empty stack root and an empty wheel cache given
    with -e (beside the machine's own), then again: the second run changes nothing. The test wheelhouse,
    filled from the stable lock once per cache, serves as a mirror (files hardlinked by name and sha256),
    so the lock's 4 GB are not downloaded again for every run. The stack's uv cache is the tests' shared
    one, which the torch test venvs were installed through: the new stack hardlinks torch and its CUDA
    libraries from it, so it adds about 5 GB here (the rest of the lock, unpacked once; measured), not the
    20 GiB a host's stack is planned with (stack_min_free_gb, lowered to what a CI machine late in its run
    is sure to have)."""
    extravars = {"stack_root": str(tmp_path / "stacks"), "stack_wheel_cache_dir": str(tmp_path / "wheels"),
                 "stack_wheel_store": str(wheelhouse()), "stack_uv_cache_dir": str(uv_cache()),
                 "stack_min_free_gb": 4, "stack_find_links": [str(fill_from_lock())],
                 # nothing else of site.yml's outside tmp_path either (the service account: the test's own)
                 "stack_tools_dir": str(tmp_path / "tools"),
                 "sgl_kernel_work_dir": str(tmp_path / "sgl-kernel"),
                 "sgl_kernel_cache_dir": str(tmp_path / "sgl-kernel" / "compiler-cache"),
                 "sgl_kernel_log_dir": str(tmp_path / "log"),
                 "sgl_kernel_artifact_dir": str(tmp_path / "artifacts"),
                 "sglang_service_state_dir": str(tmp_path / "state"),
                 "sglang_service_config_dir": str(tmp_path / "config"),
                 "sglang_service_user": service_account, "sglang_service_group": service_account}
    first = run_playbook(SITE, extravars=extravars)
    assert first.rc == 0, first.stdout[-6000:]
    summary = first.task("localhost", "Show the host summary")["msg"]
    assert any(line.startswith("os: ") for line in summary)
    assert "sglang: 0.5.23" in summary[-2], summary
    assert summary[-2].startswith("kernel: sglang-kernel "), summary
    assert summary[-1].startswith("skipped for want of a GPU: the kernel import test (no usable GPU"), summary
    stacks = [p.name for p in (tmp_path / "stacks").iterdir()]
    assert "current" in stacks
    assert len(stacks) == 2, stacks
    assert len(list((tmp_path / "wheels").glob("*.whl"))) > 100
    assert (tmp_path / "tools" / f"uv-{UV_VERSION}" / "bin" / "uv").is_file()  # not the machine's tools
    assert (tmp_path / "sgl-kernel" / "download").is_dir()  # the kernel's work directory: not the machine's
    assert (tmp_path / "state").is_dir()
    assert pwd.getpwnam(service_account).pw_dir == str(tmp_path / "state")
    record = json.loads((tmp_path / "stacks" / "current" / ".torch-probe.json").read_text())
    assert (record["build"], record["recorded"], record["devices"]) == ("cuda", True, [])
    # the kernel is the lock's own wheel, which the stack's hash-checked sync installed: recorded as the
    # build the stack holds, not copied and installed a second time
    assert first.task("localhost", INSTALL_KERNEL)["event"] == "runner_on_skipped"
    kernel = json.loads((tmp_path / "stacks" / "current" / "sgl_kernel.json").read_text())
    locked = locked_kernel_sha256()
    assert (kernel["fingerprint"], kernel["sha256"]) == (f"wheel-{locked}", locked)
    assert not (tmp_path / "sgl-kernel" / "install").exists()
    assert first.task("localhost", READ_TORCH)["torch_version"] == record["torch_version"]
    second = run_playbook(SITE, extravars=extravars)
    assert second.rc == 0, second.stdout[-4000:]
    assert second.stats["failures"] == {}
    assert not any(second.stats.get("changed", {}).values()), [
        res["task"] for res in second.results["localhost"] if res.get("changed")]
    # the stack is sealed: torch's answer is read from the record, not probed, and still judged
    assert second.task("localhost", READ_TORCH)["recorded"] is True
    (tmp_path / "stacks" / "current" / ".torch-probe.json").write_text(json.dumps({**record, "build": "cpu"}))
    third = run_playbook(SITE, extravars=extravars)
    assert third.rc != 0
    refused = third.task("localhost", "Require torch code for every target capability")
    assert "is a CPU build" in refused["msg"]
    assert "The stack is sealed (this is the answer recorded in" in refused["msg"], refused["msg"]


def test_inventory_check_module_bad_spec_is_a_clear_failure():
    result = run_module("inventory_check", {"host": "h1", "variables": {"x_a": 1},
                                            "specs": {"x": {"argument_specs": "not a mapping"}}})
    assert result["event"] == "runner_on_failed"
    assert result["msg"].startswith("host h1: could not check variables:")
    assert "Traceback" not in str(result)


def test_inventory_check_module_never_changes_and_supports_check_mode():
    specs = {"demo": {"argument_specs": {"main": {"options": {"demo_on": {"type": "bool"}}}}}}
    for check in (False, True):
        result = run_module("inventory_check", {"host": "h1", "variables": {"demo_on": True},
                                                "specs": specs}, check=check)
        assert result["event"] == "runner_on_ok"
        assert result["changed"] is False
        assert result["checked"] == ["demo_on"]


# STAND-IN: this machine has no GPU, so nvidia-smi is the recorded-output stand-in replaying a real
# capture from an H200 (tests/stand_ins/nvidia-smi-recordings/h200-device-2026-11-30).
STAND_IN = {"preflight_nvidia_smi": str(REPO_ROOT / "tests" / "stand_ins" / "nvidia-smi")}
H200 = {"NVIDIA_SMI_RECORDING": str(REPO_ROOT / "tests" / "stand_ins" / "nvidia-smi-recordings"
                                    / "h200-device-2026-11-30")}
GPU_CHECK = "Require the inventory's gpu_capability to match the GPUs"


def test_gpu_capability_must_match_the_gpus():
    result = run_playbook(PREFLIGHT, extravars={**STAND_IN, "gpu_capability": "12.0"}, envvars=H200)
    assert result.rc != 0
    message = result.task("localhost", GPU_CHECK)["msg"]
    assert 'the inventory sets gpu_capability "12.0" but the host\'s GPUs (NVIDIA H200) have capability 9.0' \
        in message
    report = result.task("localhost", "Report the GPUs")["msg"]
    assert "1 GPU(s): NVIDIA H200, capability 9.0, driver 580.159.04 (CUDA 13.0)" in report


def test_matching_gpu_capability_passes():
    result = run_playbook(PREFLIGHT, extravars={**STAND_IN, "gpu_capability": "9.0"}, envvars=H200)
    assert result.rc == 0, result.stdout
    assert result.task("localhost", GPU_CHECK)["event"] == "runner_on_ok"


def test_no_gpu_skips_the_capability_check():
    result = run_playbook(PREFLIGHT, extravars={"gpu_capability": "12.0"})
    assert result.rc == 0, result.stdout
    assert result.task("localhost", GPU_CHECK)["event"] == "runner_on_skipped"
    assert "no usable GPU" in result.task("localhost", "Report the GPUs")["msg"]
