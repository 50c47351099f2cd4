"""Role sgl_kernel on this machine (connection local, root): auto mode refusing the released wheel for
a stack with another torch (2.13.0) (first in check mode, which says what it would do and changes
nothing), then a git source in the old sgl-kernel/ layout,
the build under the v1 memory cgroup this machine enforces, and an idempotent re-run. The fleet tests
(tests/integration/fleet/test_sgl_kernel_role.py) cover archives, three hosts and the watchdog."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.sgl_kernel_runner import setup_cgroup_v1
from ansible_run import run_playbook
from kernelpkg import make_source, purelib, write_mirror
from prereq import require
from sglkernel import wheel as released_wheel
from torchenv import torch_python

pytestmark = pytest.mark.integration
CHECK_NOTICE = "Say what a real run would do with the kernel (check mode, stack not sealed)"
SCAN_BUILT = "Scan the built wheel (the arches actually compiled must cover every target)"


@pytest.fixture
def served_mirror(tmp_path):
    write_mirror(tmp_path / "serve" / "gh")
    server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory",
                               str(tmp_path / "serve")], stdout=subprocess.PIPE, text=True)
    try:
        port = re.search(r"port (\d+)", server.stdout.readline()).group(1)
        yield f"http://127.0.0.1:{port}/gh"
    finally:
        server.terminate()
        server.wait()


def test_git_source_old_layout_under_a_v1_cgroup(tmp_path, served_mirror):
    require(shutil.which("git") is not None, "git is needed")
    probe, why = setup_cgroup_v1(f"pytest-role-probe-{os.getpid()}", 1 << 30)
    if probe:
        os.rmdir(probe)
    require(probe is not None, f"needs a writable v1 memory cgroup (root): {why}")
    checkout = tmp_path / "checkout"
    make_source(checkout, "old", torch_pin="2.13.0")
    git = ["git", "-c", "user.email=t@example.org", "-c", "user.name=t", "-C", str(checkout)]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "source"], ["tag", "v1"]):
        subprocess.run([*git, *args], check=True)
    subprocess.run(["git", "clone", "-q", "--bare", str(checkout), str(tmp_path / "repo.git")], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    stack = tmp_path / "stack"
    subprocess.run([sys.executable, "-m", "venv", str(stack)], check=True)
    with open(f"{purelib(stack / 'bin/python')}/_torch.pth", "w") as handle:
        handle.write(f"import site; site.addsitedir({purelib(torch_python('2.13.0'))!r})\n")
    play = [{"hosts": "localhost", "gather_facts": True,
             "pre_tasks": [{"name": "stack facts", "ansible.builtin.set_fact": {
                 "stack_python": f"{stack}/bin/python", "stack_path": str(stack),
                 "stack_target_capabilities": ["10.0"]}}],
             "roles": [{"role": "sgl_kernel", "vars": {
                 # auto: the released wheel fits 10.0 but is built for torch 2.14.1: built from source
                 "sgl_kernel_install": "auto", "sgl_kernel_wheel_pip_args": ["--no-index", "--find-links",
                                                                           str(released_wheel().parent)],
                 "sgl_kernel_source_git_url": f"file://{tmp_path}/repo.git",
                 "sgl_kernel_source_ref": "v1", "sgl_kernel_source_mirror_url": served_mirror,
                 "sgl_kernel_work_dir": str(tmp_path / "work"), "sgl_kernel_log_dir": str(tmp_path / "log"),
                 "sgl_kernel_artifact_dir": str(tmp_path / "store"), "sgl_kernel_progress_interval": 10,
                 "sgl_kernel_cache_dir": str(tmp_path / "compiler-cache")}}]}]
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    env = {"ANSIBLE_CACHE_PLUGIN": "memory"}
    # check mode on this stack (it exists, it is not sealed, it needs a build): says what a real run
    # would do, downloads, builds and installs nothing
    checked = run_playbook(play, inventory, envvars=env, check=True, timeout=600)
    assert checked.rc == 0, checked.stdout[-4000:]
    notice = checked.task("localhost", CHECK_NOTICE)
    assert f"{stack} is not sealed, and check mode downloads and builds nothing" in notice["msg"], notice
    assert not (tmp_path / "work").exists()
    assert not (tmp_path / "store").exists()
    assert not (stack / "sgl_kernel.json").exists()
    result = run_playbook(play, inventory, envvars=env, timeout=1200)
    assert result.rc == 0, result.stdout[-4000:]
    decision = result.task("localhost", "Scan the released wheel for the targets and this torch")
    assert decision["choice"] == "source"
    assert len(decision["problems"]) == 1, decision["problems"]  # 10.0 is covered: only torch is wrong
    assert "built for torch==2.14.1 (Requires-Dist: torch==2.14.1) but the stack has torch 2.13.0" in \
        decision["problems"][0]
    plan = result.task("localhost", "Prepare the source and plan the build")
    assert plan["fingerprint_inputs"]["source_commit"] == f"git-{commit}"
    assert plan["source_dir"].endswith("/sgl-kernel")
    built = result.task("localhost", "Collect the build result")
    assert built["status"]["mechanism"] == "cgroup-v1"
    # the build job's result file is removed (ansible-core leaves a poll-0 job's in ~/.ansible_async)
    erased = result.task("localhost", "Remove the build job's result file")["erased"]
    assert Path(erased).name == built["ansible_job_id"]
    assert not Path(erased).exists()
    assert built["status"]["limit_detail"][-1].startswith("cgroup-v1: v1 memory.limit_in_bytes reads back")
    scan = result.task("localhost", SCAN_BUILT)
    assert scan["variants"]["sm100"]["sass"] == ["sm_100f"]
    assert list(scan["variants"]) == ["sm100"]
    record = json.loads((stack / "sgl_kernel.json").read_text())
    assert record["fingerprint"] == plan["fingerprint"]
    again = run_playbook(play, inventory, envvars=env, timeout=600)
    assert again.rc == 0, again.stdout[-3000:]
    assert again.stats["changed"] == {}, again.stats
    shutil.rmtree(tmp_path / "work" / "download")  # the 1.5 GB released wheel (pytest keeps tmp dirs)
