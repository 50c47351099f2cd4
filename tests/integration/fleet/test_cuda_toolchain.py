"""Role cuda_toolchain on the test fleet: existing (the bind-mounted CUDA 13.0), pip (NVIDIA's wheels from
the fleet wheelhouse), apt (a real signed repository laid out like NVIDIA's, serving a stand-in package),
and the refusals that must come before anything is installed.

Every method ends with the published nvcc compiling a kernel for sm_120a on the host, read back with
the project's fatbin scanner. There is no GPU: nothing runs the kernel.

The three hosts are this module's own (torn down at its end): the module runs beside the session
fleet's lane, on whichever worker frees up first (tests/workorder.py OWN_FLEET_MODULES).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from ansible_run import run_on_fleet
from aptrepo import build_repository, serve
from cache import pip_download
from documented import assert_documented
from fleet import Fleet
from fleet_present import checked_fleet
from prereq import require

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
DEFAULTS = yaml.safe_load((REPO / "roles" / "cuda_toolchain" / "defaults" / "main.yml").read_text())
PIP_PINS = DEFAULTS["cuda_toolchain_pip_packages_by_version"]["13.0"]
KERNEL = REPO / "tests" / "fixtures" / "cuda" / "scale.cu"
STAND_IN_NVCC = REPO / "tests" / "stand_ins" / "nvcc-12.6"
# What the stack role publishes; set here until it runs before this role in the tests.
STACK = {"stack_profile_data": {"cuda": {"version": "13.0"}}, "stack_target_capabilities": ["12.0", "10.0"]}


@pytest.fixture(scope="module")
def cuda_fleet(fleet_base):
    """Three hosts with the bind-mounted CUDA 13.0, like the session fleet's; checked gone at the end."""
    with checked_fleet(Fleet(f"c{os.getpid() % 10**8}"), 3, "the toolkit fleet") as fleet:
        yield fleet


@pytest.fixture(scope="module")
def cuda_play(cuda_fleet):
    def play(playbook, **kwargs):
        return run_on_fleet(playbook, cuda_fleet.inventory, **kwargs)
    return play


def toolchain_play(hosts: str, role_vars: dict | None = None, *, compile_kernel: bool = True) -> list:
    post_tasks = [
        {"name": "Copy the test kernel",
         "ansible.builtin.copy": {"src": str(KERNEL), "dest": "/tmp/scale.cu", "mode": "0644"}},
        {"name": "Compile the kernel with the published toolkit",
         "ansible.builtin.command": {"argv": ["{{ cuda_toolchain_nvcc }}", "-gencode",
                                              "arch=compute_120a,code=sm_120a", "-shared", "-Xcompiler",
                                              "-fPIC", "-o", "/tmp/scale.so", "/tmp/scale.cu"]},
         "environment": "{{ cuda_toolchain_env }}", "changed_when": False},
        {"name": "Read the compiled arches",
         "cuda_binary_archs": {"paths": ["/tmp/scale.so"], "require": ["12.0"]}},
    ] if compile_kernel else []
    return [{"name": "cuda_toolchain under test", "hosts": hosts, "gather_facts": False, "vars": STACK,
             "roles": [{"role": "cuda_toolchain", "vars": role_vars or {}}], "post_tasks": post_tasks}]


def assert_compiled(result, host: str, home: str) -> None:
    published = result.task(host, "Publish the toolkit (cuda_toolchain_home, _nvcc, _version, _env)")
    facts = published["ansible_facts"]
    assert facts["cuda_toolchain_home"] == home
    assert facts["cuda_toolchain_version"] == "13.0"
    assert facts["cuda_toolchain_nvcc"] == f"{home}/bin/nvcc"
    assert facts["cuda_toolchain_env"]["CUDA_HOME"] == home
    assert facts["cuda_toolchain_env"]["PATH"].startswith(f"{home}/bin:")
    archs = result.task(host, "Read the compiled arches")
    assert archs["files"][0]["sass"] == ["sm_120a"]
    assert archs["missing"] == {"12.0": []}


def changed_tasks(result, host: str) -> list[str]:
    return [r["task"] for r in result.results.get(host, []) if r.get("changed")]


def host_names(cuda_fleet) -> list[str]:
    return [h["name"] for h in cuda_fleet.hosts]


# --- existing -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def existing_runs(cuda_play):
    first = cuda_play(toolchain_play("all"))
    second = cuda_play(toolchain_play("all", compile_kernel=False))
    return first, second


def test_auto_picks_the_existing_toolkit_and_its_nvcc_compiles(cuda_fleet, existing_runs):
    first, _second = existing_runs
    assert first.rc == 0, first.stdout
    for host in host_names(cuda_fleet):
        report = first.task(host, "Report the method")["msg"]
        assert "by method existing (auto: found /usr/local/cuda-13.0/bin/nvcc, CUDA 13.0)" in report
        check = first.task(host, "Check the toolkit against the CUDA release and the target capabilities")
        assert_documented("cuda_toolkit", check)
        assert check["version_full"] == "13.0.88"
        assert check["requirements"]["min_version"] == "12.8"
        assert check["missing_archs"] == []
        assert_compiled(first, host, "/usr/local/cuda-13.0")


def test_existing_rerun_changes_nothing(cuda_fleet, existing_runs):
    _first, second = existing_runs
    assert second.rc == 0, second.stdout
    for host in host_names(cuda_fleet):
        assert changed_tasks(second, host) == []


# --- refusals before anything is installed --------------------------------------------------------------

def test_a_toolkit_too_old_for_the_targets_fails(cuda_fleet, cuda_play):
    """The 12.6 toolkit is a stand-in (tests/stand_ins/nvcc-12.6): the version is simulated, not installed."""
    host = host_names(cuda_fleet)[0]
    copy = {"src": f"{STAND_IN_NVCC}/", "dest": "/opt/standin-cuda-12.6/", "mode": "preserve"}
    play = [{"name": "place the 12.6 stand-in", "hosts": host, "gather_facts": False,
             "tasks": [{"name": "Copy the stand-in", "ansible.builtin.copy": copy}]},
            *toolchain_play(host, {"cuda_toolchain_method": "existing",
                                   "cuda_toolchain_existing_home": "/opt/standin-cuda-12.6"})]
    result = cuda_play(play)
    assert result.rc != 0
    failed = result.task(host, "Check the toolkit against the CUDA release and the target capabilities")
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"].startswith(
        "CUDA 12.6 (/opt/standin-cuda-12.6/bin/nvcc) does not fit the targets 12.0, 10.0:")
    assert "CUDA 12.6 is older than the targets need: sm_120a needs CUDA >= 12.8" in failed["msg"]
    assert "cannot target compute_100, compute_120" in failed["msg"]
    with pytest.raises(KeyError):  # nothing published
        result.task(host, "Publish the toolkit (cuda_toolchain_home, _nvcc, _version, _env)")


@pytest.mark.parametrize("method", ["pip", "apt"])
def test_a_release_too_old_is_refused_before_installing(cuda_fleet, cuda_play, method):
    host = host_names(cuda_fleet)[1]
    prefix = f"/opt/never-{method}"
    role_vars = {"cuda_toolchain_method": method, "cuda_toolchain_cuda_version": "12.6",
                 "cuda_toolchain_pip_prefix": prefix}
    result = cuda_play(toolchain_play(host, role_vars, compile_kernel=False))
    assert result.rc != 0
    failed = result.task(host, "Check the CUDA release against the target capabilities")
    assert failed["msg"] == ("CUDA 12.6 does not fit the targets 12.0, 10.0: CUDA 12.6 is older than the "
                             "targets need: sm_120a needs CUDA >= 12.8 (targets sm_120a, sm_100a)")
    assert changed_tasks(result, host) == []
    left = cuda_fleet.ssh(host, f"ls -d {prefix} /etc/apt/sources.list.d/cuda.sources 2>&1 || true").stdout
    assert left.count("No such file") == 2


def test_family_targets_need_12_9(cuda_fleet, cuda_play):
    host = host_names(cuda_fleet)[1]
    role_vars = {"cuda_toolchain_method": "pip", "cuda_toolchain_cuda_version": "12.8",
                 "cuda_toolchain_extra_targets": ["sm_120f"]}
    result = cuda_play(toolchain_play(host, role_vars, compile_kernel=False))
    assert result.rc != 0
    assert "sm_120f needs CUDA >= 12.9" in result.task(
        host, "Check the CUDA release against the target capabilities")["msg"]


# --- pip ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def wheels():
    return pip_download([f"{name}=={version}" for name, version in PIP_PINS.items()])


def pip_vars(cuda_fleet, prefix: str) -> dict:
    return {"cuda_toolchain_method": "pip", "cuda_toolchain_pip_prefix": prefix,
            "cuda_toolchain_pip_extra_args": "{{ fleet_wheelhouse_pip_args }}"}


def test_an_unreachable_index_is_named_and_nothing_is_installed(cuda_fleet, cuda_play, wheels):
    host = host_names(cuda_fleet)[2]
    controller = urlsplit(cuda_fleet.wheelhouse_url).hostname
    index = f"http://{controller}:9/simple"  # discard port: nothing listens
    result = cuda_play(toolchain_play(host, {**pip_vars(cuda_fleet, "/opt/never-pip"),
                                              "cuda_toolchain_pip_index_url": index}, compile_kernel=False))
    assert result.rc != 0
    failed = result.task(host, "Require every package source to answer")
    assert f"the wheel index (cuda_toolchain_pip_index_url) does not answer: {index}/nvidia-cuda-nvcc/ " \
           "is unreachable" in failed["msg"]
    assert "nothing was installed" in failed["msg"]
    assert "No such file" in cuda_fleet.ssh(host, "ls -d /opt/never-pip 2>&1 || true").stdout


@pytest.fixture(scope="module")
def pip_runs(cuda_fleet, cuda_play, wheels):
    host = host_names(cuda_fleet)[1]
    role_vars = pip_vars(cuda_fleet, "/opt/sglang/cuda-13.0-pip")
    check = cuda_play(toolchain_play(host, role_vars, compile_kernel=False), check=True)
    first = cuda_play(toolchain_play(host, role_vars))
    second = cuda_play(toolchain_play(host, role_vars, compile_kernel=False))
    return host, check, first, second


def test_pip_check_mode_installs_nothing(cuda_fleet, pip_runs):
    host, check, _first, _second = pip_runs
    assert check.rc == 0, check.stdout
    assert "would be installed by pip" in check.task(host, "Report the toolkit")["msg"]


def test_pip_wheels_give_an_nvcc_that_compiles(cuda_fleet, pip_runs):
    host, _check, first, _second = pip_runs
    assert first.rc == 0, first.stdout
    home = "/opt/sglang/cuda-13.0-pip/lib/python3.11/site-packages/nvidia/cu13"
    assert_compiled(first, host, home)
    links = cuda_fleet.ssh(host, f"cd {home} && readlink targets/x86_64-linux/include "
                                 "targets/x86_64-linux/lib lib64 lib/libcudart.so lib/libnvrtc.so "
                                 "lib/libnvvm.so").stdout.split()
    assert links == ["../../include", "../../lib", "lib", "libcudart.so.13", "libnvrtc.so.13",
                     "libnvvm.so.4"]


def test_pip_rerun_changes_nothing(cuda_fleet, pip_runs):
    host, _check, _first, second = pip_runs
    assert second.rc == 0, second.stdout
    assert changed_tasks(second, host) == []


# --- apt ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def apt_repository(cuda_fleet, tmp_path_factory):
    require(shutil.which("gpg") is not None, "gpg missing: apt-get install -y gnupg")
    root = tmp_path_factory.mktemp("cuda-apt")
    key = build_repository(root, "debian12", "x86_64", {"cuda-toolkit-13-0": "13.0.88-1"})
    with serve(root / "www", urlsplit(cuda_fleet.wheelhouse_url).hostname) as url:
        yield url, key


@pytest.fixture(scope="module")
def apt_runs(cuda_fleet, cuda_play, apt_repository):
    url, key = apt_repository
    host = host_names(cuda_fleet)[2]
    role_vars = {"cuda_toolchain_method": "apt", "cuda_toolchain_apt_base_url": url,
                 "cuda_toolchain_apt_keyring_file": str(key)}
    check = cuda_play(toolchain_play(host, role_vars, compile_kernel=False), check=True)
    first = cuda_play(toolchain_play(host, role_vars))
    second = cuda_play(toolchain_play(host, role_vars, compile_kernel=False))
    return host, url, key, check, first, second


def test_apt_check_mode_writes_nothing(cuda_fleet, apt_runs):
    host, _url, _key, check, _first, _second = apt_runs
    assert check.rc == 0, check.stdout
    for task in ("Write the CUDA repository as a deb822 source", "Pin the repository's origin",
                 "Pin the toolkit package to the stack's CUDA release"):
        assert check.task(host, task)["changed"] is True
    assert check.task(host, "Install the toolkit package")["event"] == "runner_on_skipped"
    # the hosts' bind-mounted toolkit already sits where the package installs it, so check mode checks it
    assert "CUDA 13.0.88 at /usr/local/cuda-13.0 (apt)" in check.task(host, "Report the toolkit")["msg"]


def test_apt_renders_the_signed_source_and_pins(cuda_fleet, apt_runs):
    host, url, key, _check, first, _second = apt_runs
    assert first.rc == 0, first.stdout
    assert first.task(host, "Write the CUDA repository as a deb822 source")["changed"] is True
    source = cuda_fleet.ssh(host, "grep -v '^#' /etc/apt/sources.list.d/cuda.sources").stdout
    assert dict(line.split(": ", 1) for line in source.strip().splitlines()) == {
        "Types": "deb", "URIs": f"{url}/debian12/x86_64/", "Suites": "/",
        "Signed-By": "/etc/apt/keyrings/cuda-archive-keyring.asc"}
    assert cuda_fleet.ssh(host, "cat /etc/apt/keyrings/cuda-archive-keyring.asc").stdout == key.read_text()
    origin = cuda_fleet.ssh(host, "grep -v '^#' /etc/apt/preferences.d/cuda-repository").stdout
    assert origin.split("\n") == ["Package: *", f"Pin: origin {urlsplit(url).hostname}",
                                  "Pin-Priority: 600", ""]
    toolkit = cuda_fleet.ssh(host, "grep -v '^#' /etc/apt/preferences.d/cuda-toolkit-13-0").stdout
    assert toolkit.split("\n") == ["Package: cuda-toolkit-13-0", "Pin: version 13.0.*",
                                   "Pin-Priority: 1001", ""]


def test_apt_installs_the_exact_package_held_and_verifies(cuda_fleet, apt_runs):
    host, _url, _key, _check, first, _second = apt_runs
    status = cuda_fleet.ssh(host, "dpkg-query -W -f '${Package} ${Version} ${Status}' "
                                  "cuda-toolkit-13-0").stdout
    assert status == "cuda-toolkit-13-0 13.0.88-1 hold ok installed"
    # the stand-in package installs nothing: the toolkit at cuda_toolchain_apt_home is the bind-mounted one
    assert_compiled(first, host, "/usr/local/cuda-13.0")


def test_apt_rerun_changes_nothing(cuda_fleet, apt_runs):
    host, _url, _key, _check, _first, second = apt_runs
    assert second.rc == 0, second.stdout
    assert changed_tasks(second, host) == []


def test_the_repository_entry_point_writes_the_same_source(cuda_fleet, cuda_play, apt_runs):
    """What the nvidia_driver role will do (include_role tasks_from=repository): on a host where the apt
    method ran, nothing changes; the source exists once."""
    host, url, key, _check, _first, _second = apt_runs
    play = [{"name": "the driver role's use", "hosts": host, "gather_facts": True, "tasks": [
        {"name": "Set up NVIDIA's CUDA repository", "ansible.builtin.include_role": {
            "name": "cuda_toolchain", "tasks_from": "repository"},
         "vars": {"cuda_toolchain_apt_base_url": url, "cuda_toolchain_apt_keyring_file": str(key)}}]}]
    result = cuda_play(play)
    assert result.rc == 0, result.stdout
    assert result.task(host, "Write the CUDA repository as a deb822 source")["changed"] is False
    assert changed_tasks(result, host) == []
    sources = cuda_fleet.ssh(host, "grep -rl 'debian12/x86_64' /etc/apt/sources.list.d/").stdout.split()
    assert sources == ["/etc/apt/sources.list.d/cuda.sources"]
