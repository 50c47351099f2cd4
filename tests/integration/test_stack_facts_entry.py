"""The stack role's read-only `facts` entry point (with cuda_toolchain's `facts`), on the controller: what
stack is in use and where its CUDA release's toolkit is, for verify, snapshot, reproduce and the rollout's
plan, instead of each restating `cuda_toolchain_home | default('/usr/local/cuda')`, a name nothing set in
those runs (so nvcc was never found on a pip-toolchain host).

The toolkit is real: NVIDIA's CUDA 13.0 wheels installed by the cuda_toolchain role's pip method into a
temporary prefix (as tests/integration/test_cuda_toolchain_torch_extension.py does). The stack is a
directory with the manifest the stack role writes (stack.json) and the `current` link; no torch is needed
to read it (its python is this test environment's).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import yaml
from ansible_run import REPO_ROOT, run_playbook
from cache import pip_download
from prereq import require

pytestmark = pytest.mark.integration

DEFAULTS = yaml.safe_load((REPO_ROOT / "roles" / "cuda_toolchain" / "defaults" / "main.yml").read_text())
PIP_PINS = DEFAULTS["cuda_toolchain_pip_packages_by_version"]["13.0"]
PUBLISH = "Publish the stack in use (stack_in_use)"
TOOLKIT = "Publish the toolkit (cuda_toolchain_home, cuda_toolchain_nvcc, cuda_toolchain_version)"
FINGERPRINT = "0123456789ab" + "c" * 52


@pytest.fixture(scope="module")
def pip_prefix(tmp_path_factory):
    wheelhouse = pip_download([f"{name}=={version}" for name, version in PIP_PINS.items()])
    prefix = tmp_path_factory.mktemp("cuda-pip") / "prefix"
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {"stack_profile_data": {"cuda": {"version": "13.0"}},
                      "stack_target_capabilities": ["12.0"]},
             "roles": [{"role": "cuda_toolchain",
                        "vars": {"cuda_toolchain_method": "pip", "cuda_toolchain_pip_prefix": str(prefix),
                                 "cuda_toolchain_pip_python": sys.executable,
                                 "cuda_toolchain_pip_find_links": str(wheelhouse),
                                 "cuda_toolchain_pip_extra_args": "--no-index"}}]}]
    result = run_playbook(play, envvars={"ANSIBLE_CACHE_PLUGIN": "memory"})
    assert result.rc == 0, result.stdout[-4000:]
    return prefix


def stack_root(tmp_path: Path, cuda: str | None = "13.0") -> Path:
    root = tmp_path / "stacks"
    stack = root / "stable-0123456789ab"
    stack.mkdir(parents=True)
    manifest = {"stack_name": stack.name, "profile_name": "stable", "fingerprint": FINGERPRINT,
                "targets": ["12.0"], "profile": {"name": "stable", "cuda": {"version": cuda} if cuda else {}}}
    (stack / "stack.json").write_text(json.dumps(manifest))
    (stack / "bin").mkdir()
    os.symlink(sys.executable, stack / "bin" / "python")  # the stack's environment: this one (no torch)
    os.symlink(stack.name, root / "current")
    return root


def facts(root: Path, **role_vars) -> dict:
    play = [{"hosts": "localhost", "gather_facts": False,
             # the inventory names the profile by a string, as a user's does: facts must not need it loaded
             "vars": {"stack_profile": "stable", "stack_root": str(root), **role_vars},
             "tasks": [{"name": "facts",
                        "ansible.builtin.include_role": {"name": "stack", "tasks_from": "facts"}}]}]
    result = run_playbook(play, envvars={"ANSIBLE_CACHE_PLUGIN": "memory"})
    assert result.rc == 0, result.stdout[-4000:]
    assert not result.stats.get("changed"), result.stats  # read-only
    published = result.task("localhost", PUBLISH)["ansible_facts"]
    published.update(result.task("localhost", TOOLKIT)["ansible_facts"])
    return published


def test_pip_toolchain_home_is_found_from_the_stack_in_use(pip_prefix, tmp_path):
    root = stack_root(tmp_path)
    found = facts(root, cuda_toolchain_method="pip", cuda_toolchain_pip_prefix=str(pip_prefix))
    assert found["stack_in_use"] == {
        "name": "stable-0123456789ab", "path": f"{root}/stable-0123456789ab",
        "python": f"{root}/stable-0123456789ab/bin/python", "fingerprint": FINGERPRINT,
        "profile_name": "stable", "cuda_version": "13.0", "targets": ["12.0"]}
    home = found["cuda_toolchain_home"]
    # the wheels' CUDA home in the prefix, not the machine's /usr/local/cuda
    assert home.startswith(str(pip_prefix)), home
    assert home.endswith("/site-packages/nvidia/cu13"), home
    assert found["cuda_toolchain_nvcc"] == f"{home}/bin/nvcc"
    assert Path(found["cuda_toolchain_nvcc"]).is_file()
    assert found["cuda_toolchain_version"] == "13.0"


def test_verify_reads_nvcc_of_a_pip_toolchain_host(pip_prefix, tmp_path):
    """playbooks/verify.yml's own stack read gets the pip toolkit's nvcc (it got /usr/local/cuda's, or
    none, before)."""
    root = stack_root(tmp_path)
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
        "stack_root": str(root), "cuda_toolchain_method": "pip",
        "cuda_toolchain_pip_prefix": str(pip_prefix)}}}}))
    result = run_playbook(REPO_ROOT / "playbooks" / "verify.yml", inventory, cmdline="--tags never,all",
                          extravars={"verify_reports_dir": str(tmp_path / "reports"), "verify_fail": False},
                          envvars={"ANSIBLE_CACHE_PLUGIN": "memory"})
    read = result.task("localhost", "Read the stack in use")
    assert read["event"] == "runner_on_ok", read
    cuda = read["facts"]["cuda"]
    assert cuda["nvcc"].startswith(str(pip_prefix)), cuda
    assert cuda["nvcc_version"].startswith("13.0."), cuda
    assert cuda["toolkit_version"] == "13.0"


def test_a_method_with_one_home_finds_no_other_toolkit(tmp_path):
    # the apt home the configuration names does not exist here: no toolkit, though this machine has one
    # in its search paths and on PATH (auto or existing without a home would take that one)
    root = stack_root(tmp_path)
    found = facts(root, cuda_toolchain_method="apt", cuda_toolchain_apt_home=str(tmp_path / "no-cuda"))
    assert found["stack_in_use"]["name"] == "stable-0123456789ab"
    assert (found["cuda_toolchain_home"], found["cuda_toolchain_nvcc"], found["cuda_toolchain_version"]) == (
        "", "", None)


def test_auto_searches_the_paths(tmp_path):
    require(Path("/usr/local/cuda-13.0/bin/nvcc").is_file(), "no CUDA 13.0 toolkit at /usr/local/cuda-13.0")
    found = facts(stack_root(tmp_path), cuda_toolchain_method="auto")
    assert found["cuda_toolchain_home"] == str(Path("/usr/local/cuda-13.0").resolve())
    assert found["cuda_toolchain_version"] == "13.0"


def test_no_stack_in_use(tmp_path):
    root = tmp_path / "stacks"
    root.mkdir()
    found = facts(root, cuda_toolchain_method="pip", cuda_toolchain_pip_prefix=str(tmp_path / "none"))
    assert found["stack_in_use"] == {"name": None, "path": None, "python": None, "fingerprint": None,
                                     "profile_name": None, "cuda_version": None, "targets": []}
    assert (found["cuda_toolchain_home"], found["cuda_toolchain_nvcc"], found["cuda_toolchain_version"]) == (
        "", "", None)
