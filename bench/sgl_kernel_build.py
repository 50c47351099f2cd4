"""Benchmark of the sgl_kernel source build on this machine, printed in one run:

1. device compilations (translation units x gencodes, over both variants), counted from the build's
   own nvcc command lines, for the test package (tests/kernel_pkg, shaped like sglang-kernel) with
   upstream-default settings vs narrowed to "12.0" (target <= 1/6);
2. peak memory of the narrowed build under the planned parallelism vs its budget (the hard limit);
3. builds performed for a 3-host rollout by the role (three inventory hosts on this machine, each
   with a stack of its own; target: 1).

Needs root (the memory limit), nvcc, and the package index (torch 2.13.0 CPU, build requirements).
Run: .venv/bin/python bench/sgl_kernel_build.py
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))
import conftest  # noqa: E402,F401  (module_utils as ansible.module_utils)
from ansible.module_utils.sgl_kernel_build import plan_parallelism  # noqa: E402
from ansible.module_utils.sgl_kernel_runner import MIB, run_limited  # noqa: E402
from ansible.module_utils.sgl_kernel_source import prepare_source  # noqa: E402
from ansible_run import run_playbook  # noqa: E402
from kernelpkg import build_env, make_archive, make_source, purelib, write_mirror  # noqa: E402
from torchenv import torch_python  # noqa: E402

GENCODE = re.compile(r"-gencode[= ]arch=\S+")


def device_compilations(log: str) -> tuple[int, int]:
    """(nvcc compile command lines, sum of their -gencode counts) from a verbose build log."""
    lines = [line for line in log.splitlines() if "nvcc" in line and " -c " in line]
    return len(lines), sum(len(GENCODE.findall(line)) for line in lines)


def one_build(python: Path, work: Path, name: str, *, narrow: bool, mirror: str, budget_mb: int, plan: dict):
    checkout = work / f"src-{name}"
    package = make_source(checkout, "new", torch_pin="2.13.0")
    prepared = prepare_source(str(package), ["12.0"], "13.0", "2.13.0", name, narrow=narrow,
                              mirror_url=mirror)
    defines = dict(prepared["cmake_defines"], SGL_KERNEL_COMPILE_THREADS=str(plan["threads"]))
    argv = [str(python), "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "--no-index",
            "--wheel-dir", str(work / f"out-{name}"), str(package),
            f"--config-settings=build-dir={work / f'build-{name}'}", "--config-settings=build.verbose=true",
            *(f"--config-settings=cmake.define.{k}={v}" for k, v in sorted(defines.items()))]
    env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(plan["jobs"]),
               PATH=f"{python.parent}:/usr/local/cuda/bin:{os.environ['PATH']}")
    started = time.monotonic()
    status = run_limited(argv, log_path=str(work / f"{name}.log"), status_path=str(work / f"{name}.json"),
                         limit_bytes=budget_mb * MIB, timeout=1800, env=env, name=f"bench-{name}")
    if status["rc"] != 0:
        raise SystemExit(f"{name} build failed ({status['killed_by']}); see {work / f'{name}.log'}")
    units, compilations = device_compilations((work / f"{name}.log").read_text())
    return {"units": units, "device_compilations": compilations, "seconds": round(time.monotonic() - started),
            "peak_mb": status["peak_bytes"] // MIB, "mechanism": status["mechanism"]}


def rollout(work: Path, archive_url: str, sha256: str, mirror: str) -> int:
    """Run the role for three hosts on this machine; the number of builds it performed."""
    hosts = {}
    for index in range(1, 4):
        stack = work / f"stack-{index}"
        subprocess.run([sys.executable, "-m", "venv", str(stack)], check=True)
        Path(purelib(stack / "bin/python"), "_torch.pth").write_text(
            f"import site; site.addsitedir({purelib(torch_python('2.13.0'))!r})\n")
        hosts[f"bench-{index}"] = {"ansible_connection": "local", "bench_stack": str(stack),
                                   "ansible_python_interpreter": sys.executable}
    inventory = work / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": hosts}}))
    play = [{"hosts": "all", "gather_facts": True,
             "pre_tasks": [{"name": "stack facts", "ansible.builtin.set_fact": {
                 "stack_python": "{{ bench_stack }}/bin/python", "stack_path": "{{ bench_stack }}",
                 "stack_target_capabilities": ["12.0"]}}],
             "roles": [{"role": "sgl_kernel", "vars": {
                 "sgl_kernel_install": "source", "sgl_kernel_source_archive_url": archive_url,
                 "sgl_kernel_source_archive_sha256": sha256, "sgl_kernel_source_mirror_url": mirror,
                 "sgl_kernel_work_dir": str(work / "role"), "sgl_kernel_log_dir": str(work / "role-log"),
                 "sgl_kernel_artifact_dir": str(work / "store"), "sgl_kernel_progress_interval": 10}}]}]
    result = run_playbook(play, inventory, envvars={"ANSIBLE_CACHE_PLUGIN": "memory"}, timeout=1800)
    if result.rc != 0:
        raise SystemExit(f"rollout failed:\n{result.stdout[-3000:]}")
    installs = result.task_runs("Install the wheel into the stack, without dependencies so that torch stays "
                                "as pinned")
    return len(result.task_runs("Start the build under its memory limit")), len(installs)


def main():
    work = Path(tempfile.mkdtemp(prefix="sgl-kernel-bench-"))
    server = None
    try:
        serve = work / "serve"
        checkout = work / "checkout"
        make_source(checkout, "new", torch_pin="2.13.0")
        sha256 = make_archive(checkout, serve / "src.tar.gz")
        write_mirror(serve / "gh")
        server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1",
                                   "--directory", str(serve)], stdout=subprocess.PIPE, text=True)
        port = int(re.search(r"port (\d+)", server.stdout.readline()).group(1))
        mirror = f"http://127.0.0.1:{port}/gh"
        python = build_env(work / "buildenv", torch_python("2.13.0"))
        cores, memory_mb = os.cpu_count(), os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") // MIB
        budget_mb = 3072
        plan = plan_parallelism(cores, memory_mb, 512, budget_mb=budget_mb, gencodes=6)
        common = {"mirror": mirror, "budget_mb": budget_mb, "plan": plan}
        default = one_build(python, work, "default", narrow=False, **common)
        narrowed = one_build(python, work, "narrowed", narrow=True, **common)
        builds, installs = rollout(work, f"http://127.0.0.1:{port}/src.tar.gz", sha256, mirror)
        ratio = narrowed["device_compilations"] / default["device_compilations"]
        print(f"plan: {plan['reason']}")
        print(f"device compilations, upstream defaults: {default}")
        print(f"device compilations, narrowed to 12.0:  {narrowed}")
        print(f"narrowed / default = {narrowed['device_compilations']}/{default['device_compilations']} "
              f"= {ratio:.3f} (target <= 1/6 = 0.167): {'PASS' if ratio <= 1 / 6 else 'FAIL'}")
        print(f"peak memory, narrowed build: {narrowed['peak_mb']} MiB vs budget {budget_mb} MiB "
              f"({narrowed['mechanism']}); default build: {default['peak_mb']} MiB")
        print(f"3-host rollout: {builds} build(s), {installs} install(s) (target: 1 build): "
              f"{'PASS' if builds == 1 else 'FAIL'}")
    finally:
        if server:
            server.terminate()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
