#!/usr/bin/python
"""Ansible module: prepare, run (under a memory limit) and watch an sglang-kernel source build."""

DOCUMENTATION = r"""
---
module: sgl_kernel_build
short_description: Prepare, run and watch a controlled sglang-kernel wheel build
description:
  - O(state=prepare) adapts a checked-out sglang-kernel source directory (a staging copy) and plans the
    build. It narrows the hard-coded C(-gencode) flags to the target capabilities (adding a family target
    such as C(sm_120f) when only a newer CUDA target covers one), leaves out the loader variants no target
    selects, points configure-time C(FetchContent) URLs at a mirror or at pre-fetched directories, sets the
    C(torch==) pin to the stack's torch, chooses C(CMAKE_BUILD_PARALLEL_LEVEL) and
    C(SGL_KERNEL_COMPILE_THREADS) from the cores, the memory and the budget (a user value wins), and
    computes the build fingerprint. Files are rewritten from pristine copies, so a re-run changes nothing.
  - O(state=run) builds a wheel (never editable) with C(pip wheel --no-build-isolation) under a hard memory
    limit (a cgroup v2 scope, a v1 memory cgroup, or a watchdog over the build's processes, whichever can be
    enforced and read back first) and a timeout, with the whole output in O(log). Meant for C(async).
  - O(state=wait) waits up to O(interval) seconds for that build and returns its C([n/m]) progress, so a
    play can print progress while the build runs.
version_added: "1.0.0"
author: sglang-fleet maintainers (@sglang-fleet)
options:
  state:
    description: What to do.
    type: str
    choices: [prepare, run, wait]
    required: true
  source_dir:
    description:
      - The package directory (with CMakeLists.txt and pyproject.toml). O(state=prepare), O(state=run).
    type: path
  capabilities:
    description: Target compute capabilities as strings. O(state=prepare).
    type: list
    elements: str
    default: []
  cuda_version:
    description: CUDA toolkit version (V("13.0")). O(state=prepare).
    type: str
  torch_version:
    description: The stack's torch version. O(state=prepare).
    type: str
  source_commit:
    description: What identifies the source (a git commit, or an archive's sha256). O(state=prepare).
    type: str
  narrow:
    description: Build only the gencodes and variants the capabilities need.
    type: bool
    default: true
  enable_fa3:
    description:
      - C(SGL_KERNEL_ENABLE_FA3); V(auto) turns it on only for 8.x/9.0 targets when narrowing (FA3 holds
        sm_80/86/90a code only), and on without narrowing. The role passes V(auto) for a profile's
        C(sgl_kernel.build.enable_fa3=true) and V(off) for V(false).
    type: str
    choices: [auto, "on", "off"]
    default: auto
  enable_below_sm90:
    description:
      - The profile's C(sgl_kernel.build.enable_below_sm90). V(false) sets C(ENABLE_BELOW_SM90=OFF),
        comments out every gencode older than 9.0 in the CMake files (narrowed or not) and refuses a
        target capability older than 9.0. V(true) lets narrowing keep them for such targets; without
        narrowing it sets C(ENABLE_BELOW_SM90=ON) (upstream's default is OFF on aarch64).
    type: bool
    default: true
  extra_cmake_args:
    description:
      - The profile's C(sgl_kernel.build.extra_cmake_args), each a C(-DNAME=VALUE) string, passed as CMake
        cache settings and part of the fingerprint. Other CMake options, a C(:TYPE), a name given twice or
        a name the plan sets itself (C(SGL_KERNEL_ENABLE_FA3), C(ENABLE_BELOW_SM90),
        C(SGL_KERNEL_COMPILE_THREADS), the compiler launchers, C(FETCHCONTENT_SOURCE_DIR_*)) are errors.
    type: list
    elements: str
    default: []
  extra_cmake_defines:
    description: More CMake cache settings, name to value, applied after O(extra_cmake_args).
    type: dict
    default: {}
  mirror_url:
    description:
      - Prefix that replaces C(https://${GITHUB_ARTIFACTORY}) and C(https://github.com) in FetchContent
        URLs.
    type: str
    default: ""
  prefetched:
    description: FetchContent dependency name to a pre-fetched source directory on the host.
    type: dict
    default: {}
  cores:
    description: CPU cores of the build host. O(state=prepare).
    type: int
    default: 1
  memory_mb:
    description: Memory of the build host in MiB. O(state=prepare).
    type: int
    default: 1024
  compile_memory_mb:
    description: Estimated peak memory of one device compile (one nvcc thread of one unit), MiB.
    type: int
    default: 4096
  memory_budget_mb:
    description: Memory the build may use, MiB; 0 means the host's memory minus O(memory_reserve_mb).
    type: int
    default: 0
  memory_reserve_mb:
    description: Memory kept for the host's other services when the budget is derived, MiB.
    type: int
    default: 2048
  jobs:
    description: C(CMAKE_BUILD_PARALLEL_LEVEL); 0 lets the planner choose. With O(state=run), the value used.
    type: int
    default: 0
  threads:
    description: C(SGL_KERNEL_COMPILE_THREADS); 0 lets the planner choose.
    type: int
    default: 0
  python:
    description: Interpreter of the build environment (scikit-build-core, cmake, ninja, torch). O(state=run).
    type: path
  wheel_dir:
    description: Empty staging directory that receives the built wheel. O(state=run).
    type: path
  build_dir:
    description: Persistent CMake build directory; a re-run after a kill resumes there. O(state=run).
    type: path
  cmake_defines:
    description: CMake cache settings for the build (from O(state=prepare)). O(state=run).
    type: dict
    default: {}
  compiler_launcher:
    description: Compiler cache launcher (path of sccache or ccache) for C, C++ and CUDA; empty for none.
    type: str
    default: ""
  environment:
    description: Extra environment for the build (CUDA_HOME, PATH, SCCACHE_DIR, ...). O(state=run).
    type: dict
    default: {}
  memory_limit_mb:
    description: Hard memory limit of the build, MiB. O(state=run).
    type: int
    default: 0
  limit_mechanisms:
    description: Mechanisms to try, in order.
    type: list
    elements: str
    default: [cgroup-v2, cgroup-v1, watchdog]
  timeout:
    description: Seconds after which the build is killed. O(state=run).
    type: int
    default: 14400
  log:
    description: Build log on the host. O(state=run), O(state=wait).
    type: path
  status_file:
    description: JSON status written by the build. O(state=run), O(state=wait).
    type: path
  interval:
    description: Seconds O(state=wait) waits at most before it reports.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    description: In check mode C(prepare) plans without writing and C(run) starts no build.
  diff_mode:
    support: none
    description: No diff is produced.
notes:
  - In check mode, O(state=prepare) reports what it would change and writes nothing; O(state=run) does not
    build and returns C(skipped).
seealso:
  - module: sgl_kernel_wheel_check
"""

EXAMPLES = r"""
- name: Plan a build for a Blackwell-only fleet
  sgl_kernel_build:
    state: prepare
    source_dir: /var/cache/sglang-fleet/sgl-kernel/src/python/sglang/kernels/aot
    capabilities: ["12.0", "10.0"]
    cuda_version: "13.0"
    torch_version: "2.14.1"
    source_commit: 3ec6e09487cbf7424f7875cb098860a2142666a3
    enable_fa3: "off"
    enable_below_sm90: false
    extra_cmake_args: ["-DSGL_KERNEL_ENABLE_FP4=ON"]
    mirror_url: https://mirror.example.org/github
    cores: "{{ ansible_processor_vcpus }}"
    memory_mb: "{{ ansible_memtotal_mb }}"
  register: sgl_kernel_plan

- name: Build in the background
  sgl_kernel_build:
    state: run
    python: /var/cache/sglang-fleet/sgl-kernel/buildenv/bin/python
    source_dir: /var/cache/sglang-fleet/sgl-kernel/src/python/sglang/kernels/aot
    wheel_dir: /var/cache/sglang-fleet/sgl-kernel/out
    build_dir: /var/cache/sglang-fleet/sgl-kernel/build
    cmake_defines: "{{ sgl_kernel_plan.cmake_defines }}"
    jobs: "{{ sgl_kernel_plan.jobs }}"
    memory_limit_mb: "{{ sgl_kernel_plan.budget_mb }}"
    log: /var/log/sglang-fleet/sgl-kernel-build.log
    status_file: /var/cache/sglang-fleet/sgl-kernel/status.json
  async: 14400
  poll: 0

- name: Progress
  sgl_kernel_build:
    state: wait
    log: /var/log/sglang-fleet/sgl-kernel-build.log
    status_file: /var/cache/sglang-fleet/sgl-kernel/status.json
    interval: 50
"""

RETURN = r"""
jobs:
  description: C(CMAKE_BUILD_PARALLEL_LEVEL) chosen (prepare).
  returned: state=prepare
  type: int
threads:
  description: C(SGL_KERNEL_COMPILE_THREADS) chosen (prepare).
  returned: state=prepare
  type: int
budget_mb:
  description: The memory budget, also the hard limit for the run (prepare).
  returned: state=prepare
  type: int
reason:
  description: Why these values (prepare).
  returned: state=prepare
  type: str
gencodes:
  description: The gencode flags left in the build (prepare).
  returned: state=prepare
  type: list
  elements: str
variants:
  description: The loader variants built (prepare).
  returned: state=prepare
  type: list
  elements: str
cmake_defines:
  description: CMake cache settings for the run, including SGL_KERNEL_COMPILE_THREADS (prepare).
  returned: state=prepare
  type: dict
fingerprint:
  description: sha256 of source commit, CUDA, torch, gencodes, variants and flags (prepare).
  returned: state=prepare
  type: str
source_dir:
  description: The package directory prepared (prepare).
  returned: state=prepare
  type: str
fingerprint_inputs:
  description: What the fingerprint covers (prepare).
  returned: state=prepare
  type: dict
dependencies:
  description: Configure-time downloads read from the CMake files (prepare).
  returned: state=prepare
  type: list
  elements: dict
status:
  description: >-
    The build status (mechanism, limit_bytes, limit_detail, rc, killed_by, peak_bytes, log).
  returned: state=run or state=wait
  type: dict
wheel:
  description: Path of the built wheel (run, when it succeeded).
  returned: state=run
  type: str
wheel_sha256:
  description: sha256 of the built wheel (run, when it succeeded).
  returned: state=run
  type: str
done:
  description: The build has ended (wait).
  returned: state=wait
  type: bool
progress:
  description: "One line: the last [n/m] counter, elapsed time, the log path (wait)."
  returned: state=wait
  type: str
last_line:
  description: The last non-empty line of the log (wait).
  returned: state=wait
  type: str
failed_tail:
  description: The last lines of the log when the build failed, else empty (wait).
  returned: state=wait
  type: list
  elements: str
"""

import glob
import hashlib
import os
import shutil
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.cuda_arch import ArchError
from ansible.module_utils.sgl_kernel_build import BuildPlanError, plan_parallelism
from ansible.module_utils.sgl_kernel_runner import (
    MIB,
    LimitError,
    log_tail,
    progress,
    read_status,
    run_limited,
)
from ansible.module_utils.sgl_kernel_source import prepare_source

REQUIRED = {"prepare": ("source_dir", "cuda_version", "torch_version", "source_commit"),
            "run": ("python", "source_dir", "wheel_dir", "build_dir", "log", "status_file"),
            "wait": ("log", "status_file")}


def prepare(module, p):
    plan = prepare_source(p["source_dir"], p["capabilities"], p["cuda_version"], p["torch_version"],
                          p["source_commit"], narrow=p["narrow"],
                          enable_fa3={"on": True, "off": False}.get(p["enable_fa3"], "auto"),
                          enable_below_sm90=p["enable_below_sm90"], extra_cmake_args=p["extra_cmake_args"],
                          extra_cmake_defines=p["extra_cmake_defines"], mirror_url=p["mirror_url"],
                          prefetched=p["prefetched"], check_mode=module.check_mode)
    gencodes = max(1, len(plan["gencodes"]))
    parallel = plan_parallelism(p["cores"], p["memory_mb"], p["compile_memory_mb"],
                                budget_mb=p["memory_budget_mb"] or None, gencodes=gencodes,
                                jobs=p["jobs"] or None, threads=p["threads"] or None,
                                reserve_mb=p["memory_reserve_mb"])
    plan["cmake_defines"]["SGL_KERNEL_COMPILE_THREADS"] = str(parallel["threads"])
    plan.update(parallel, source_dir=p["source_dir"])
    return plan


def run(module, p):
    if module.check_mode:
        return {"changed": False, "skipped": True, "msg": "check mode: not building"}
    if os.path.isdir(p["wheel_dir"]):
        shutil.rmtree(p["wheel_dir"])
    os.makedirs(p["wheel_dir"])
    os.makedirs(p["build_dir"], exist_ok=True)
    defines = dict(p["cmake_defines"])
    if p["compiler_launcher"]:
        for language in ("C", "CXX", "CUDA"):
            defines[f"CMAKE_{language}_COMPILER_LAUNCHER"] = p["compiler_launcher"]
    argv = [p["python"], "-m", "pip", "wheel", "-v", "--no-build-isolation", "--no-deps", "--no-index",
            "--wheel-dir", p["wheel_dir"], p["source_dir"], f"--config-settings=build-dir={p['build_dir']}",
            "--config-settings=build.verbose=true",
            *(f"--config-settings=cmake.define.{k}={v}" for k, v in sorted(defines.items()))]
    env = dict(os.environ, **{k: str(v) for k, v in p["environment"].items()})
    env["CMAKE_BUILD_PARALLEL_LEVEL"] = str(p["jobs"] or 1)
    status = run_limited(argv, log_path=p["log"], status_path=p["status_file"],
                         limit_bytes=p["memory_limit_mb"] * MIB, timeout=p["timeout"], env=env,
                         name="sgl-kernel", mechanisms=tuple(p["limit_mechanisms"]))
    wheels = sorted(glob.glob(os.path.join(p["wheel_dir"], "*.whl")))
    result = {"changed": True, "status": status}
    if status["rc"] != 0 or len(wheels) != 1:
        why = status["killed_by"] or f"the build exited with {status['rc']}"
        module.fail_json(msg=f"sglang-kernel build failed: {why}; full log: {p['log']}", **result)
    digest = hashlib.sha256()
    with open(wheels[0], "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    result.update(wheel=wheels[0], wheel_sha256=digest.hexdigest())
    return result


def wait(p):
    deadline = time.monotonic() + max(1, p["interval"])
    status = read_status(p["status_file"])
    while time.monotonic() < deadline and not (status and status.get("finished")):
        time.sleep(1)
        status = read_status(p["status_file"])
    counter, last = progress(p["log"])
    tail = log_tail(p["log"]) if status and status.get("finished") and status.get("rc") else []
    done = bool(status and status.get("finished"))
    elapsed = int((status.get("finished") or time.time()) - status["started"]) if status else 0
    state = "finished" if done else "running" if status else "not started"
    line = (f"sglang-kernel build {state}: {counter or 'no [n/m] yet'} after "
            f"{elapsed // 60}m{elapsed % 60:02d}s; log {p['log']}")
    return {"changed": False, "done": done, "progress": line, "last_line": last, "status": status or {},
            "failed_tail": tail}


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["prepare", "run", "wait"], "required": True},
            "source_dir": {"type": "path"},
            "capabilities": {"type": "list", "elements": "str", "default": []},
            "cuda_version": {"type": "str"},
            "torch_version": {"type": "str"},
            "source_commit": {"type": "str"},
            "narrow": {"type": "bool", "default": True},
            "enable_fa3": {"type": "str", "choices": ["auto", "on", "off"], "default": "auto"},
            "enable_below_sm90": {"type": "bool", "default": True},
            "extra_cmake_args": {"type": "list", "elements": "str", "default": []},
            "extra_cmake_defines": {"type": "dict", "default": {}},
            "mirror_url": {"type": "str", "default": ""},
            "prefetched": {"type": "dict", "default": {}},
            "cores": {"type": "int", "default": 1},
            "memory_mb": {"type": "int", "default": 1024},
            "compile_memory_mb": {"type": "int", "default": 4096},
            "memory_budget_mb": {"type": "int", "default": 0},
            "memory_reserve_mb": {"type": "int", "default": 2048},
            "jobs": {"type": "int", "default": 0},
            "threads": {"type": "int", "default": 0},
            "python": {"type": "path"},
            "wheel_dir": {"type": "path"},
            "build_dir": {"type": "path"},
            "cmake_defines": {"type": "dict", "default": {}},
            "compiler_launcher": {"type": "str", "default": ""},
            "environment": {"type": "dict", "default": {}},
            "memory_limit_mb": {"type": "int", "default": 0},
            "limit_mechanisms": {"type": "list", "elements": "str",
                                 "default": ["cgroup-v2", "cgroup-v1", "watchdog"]},
            "timeout": {"type": "int", "default": 14400},
            "log": {"type": "path"},
            "status_file": {"type": "path"},
            "interval": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    p = module.params
    missing = [name for name in REQUIRED[p["state"]] if not p[name]]
    if missing:
        module.fail_json(msg=f"state={p['state']} needs {', '.join(missing)}")
    if p["state"] == "run" and p["memory_limit_mb"] <= 0:
        module.fail_json(msg="state=run needs memory_limit_mb > 0: the build always runs under a memory "
                             "limit")
    try:
        if p["state"] == "prepare":
            module.exit_json(**prepare(module, p))
        module.exit_json(**(run(module, p) if p["state"] == "run" else wait(p)))
    except (BuildPlanError, ArchError, LimitError) as exc:
        module.fail_json(msg=str(exc))
    except Exception as exc:  # never a traceback: say what failed
        module.fail_json(msg=f"sgl_kernel_build failed unexpectedly: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    main()
