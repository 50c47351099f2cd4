"""torch_cuda_archs through Ansible against real torch installs and real broken environments.

CUDA build: torch 2.14.1 (cu130); CPU build: torch 2.13.0+cpu (tests/torchenv.py, cached venvs).
The oracle for the arch list is torch itself, asked directly in the same interpreter.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.cuda_arch import KNOWN_CAPABILITIES
from ansible_run import run_module
from documented import assert_documented
from prereq import require
from torchenv import torch_python
from venvs import make_venv, purelib

pytestmark = pytest.mark.integration


@pytest.fixture(scope="session")
def cuda_torch():
    return str(torch_python("2.14.1"))


@pytest.fixture(scope="session")
def cpu_torch():
    return str(torch_python("2.13.0"))


def torch_says(python, *expressions):
    """What ``python``'s torch answers to each expression, from one import of torch (a few CPU-seconds
    each): the one value, or a tuple of them."""
    out = subprocess.run([python, "-c", f"import json, torch; print(json.dumps([{', '.join(expressions)}]))"],
                         check=True, capture_output=True, text=True, timeout=300).stdout
    values = json.loads(out.splitlines()[-1])
    return values[0] if len(values) == 1 else tuple(values)


@pytest.fixture(scope="session")
def bare_venv(tmp_path_factory):
    """A real venv without torch."""
    return make_venv(tmp_path_factory.mktemp("bare-venv"))


def venv_with_torch(tmp_path, source):
    """A venv whose torch/__init__.py is ``source`` (a hung or broken install)."""
    python = make_venv(tmp_path)
    package = purelib(python) / "torch"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(source)
    return str(python)


def test_cuda_build(cuda_torch):
    args = {"python": cuda_torch, "require": ["9.0", "10.0", "12.0", "12.1"]}
    result = run_module("torch_cuda_archs", args)
    assert result["event"] == "runner_on_ok", result.get("msg")
    assert result["changed"] is False
    version, cuda, git, flags, arch_list = torch_says(
        cuda_torch, "torch.__version__", "torch.version.cuda", "torch.version.git_version",
        "torch._C._cuda_getArchFlags().split()", "torch.cuda.get_arch_list()")
    assert result["torch_version"] == version == "2.14.1+cu130"
    assert result["cuda_version"] == cuda == "13.0"
    assert result["git_version"] == git
    assert result["build"] == "cuda"
    assert result["arch_list_source"] == "torch._C._cuda_getArchFlags"
    # torch >= 2.13 also answers get_arch_list() without a GPU: both must agree with what we report.
    assert result["arch_list"] == flags
    assert result["arch_list"] == arch_list
    assert result["arch_list"] == ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]
    assert result["cuda_available"] is False
    assert result["devices"] == []
    assert result["missing"] == []
    assert result["require"] == ["9.0", "10.0", "12.0", "12.1"]
    assert result["python"] == cuda_torch
    assert_documented("torch_cuda_archs", result)


def test_cuda_build_missing_capability(cuda_torch):
    failed = run_module("torch_cuda_archs", {"python": cuda_torch, "require": ["11.0", "120"]})
    assert failed["event"] == "runner_on_failed"
    assert failed["missing"] == ["11.0"]
    assert ("has no code for capability 11.0: its arch list is sm_75 sm_80 sm_86 sm_90 sm_100 sm_120"
            in failed["msg"])
    report = run_module("torch_cuda_archs",
                        {"python": cuda_torch, "require": ["11.0"], "fail_on_missing": False}, check=True)
    assert report["event"] == "runner_on_ok"
    assert report["missing"] == ["11.0"]
    assert report["changed"] is False


def test_an_earlier_answer_is_rated_without_a_second_probe(cuda_torch, cpu_torch, tmp_path):
    """probe: stack_facts' torch_probe (a real one, from the real CUDA build) rated as a fresh probe would be;
    the interpreter is not run again (it is gone by then)."""
    (tmp_path / "stacks").mkdir()  # the cached venv of the CUDA build, as the stack in use
    (tmp_path / "stacks" / "s1").symlink_to(Path(cuda_torch).parent.parent)
    (tmp_path / "stacks" / "current").symlink_to("s1")
    read = run_module("stack_facts", {"stack_root": str(tmp_path / "stacks")})
    assert read["event"] == "runner_on_ok", read.get("msg")
    answer = read["torch_probe"]
    assert answer["torch_version"] == "2.14.1+cu130"
    assert answer["python"] == cuda_torch
    assert_documented("stack_facts", read)
    fresh = run_module("torch_cuda_archs", {"python": cuda_torch, "require": ["11.0", "12.0"],
                                            "fail_on_missing": False})
    # the answer alone is rated: a probe of the interpreter it names would fail (it does not exist)
    answer = {**answer, "python": str(tmp_path / "gone" / "bin" / "python")}
    rated = run_module("torch_cuda_archs", {"probe": answer, "require": ["11.0", "12.0"],
                                            "fail_on_missing": False})
    assert rated["event"] == "runner_on_ok", rated.get("msg")
    keys = ("torch_version", "cuda_version", "git_version", "build", "arch_list", "devices", "require",
            "missing")
    assert {key: rated[key] for key in keys} == {key: fresh[key] for key in keys}
    assert rated["missing"] == ["11.0"]
    failed = run_module("torch_cuda_archs", {"probe": answer, "require": ["11.0"]})
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"].startswith(f"torch 2.14.1+cu130 in {tmp_path}/gone/bin/python (CUDA 13.0) has no "
                                    "code for capability 11.0")
    cpu = run_module("torch_cuda_archs", {"python": cpu_torch})
    answer_cpu = {key: value for key, value in cpu.items() if key in answer}
    failed = run_module("torch_cuda_archs", {"probe": answer_cpu, "require": ["9.0"]})
    assert failed["event"] == "runner_on_failed"
    assert "is a CPU build (torch.version.cuda is None)" in failed["msg"]


@pytest.mark.parametrize(("args", "message"), [
    ({"python": sys.executable, "probe": {}}, "parameters are mutually exclusive: python|probe"),
    ({"require": ["9.0"]}, "one of the following is required: python, probe"),
    ({"probe": {"torch_version": "2.14.1"}}, "probe is not an answer of the torch probe: its python is None"),
])
def test_python_or_probe(args, message):
    failed = run_module("torch_cuda_archs", args)
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"].startswith(message), failed["msg"]


def test_capability_newer_than_the_known_gpus_is_rated_with_a_warning(cuda_torch):
    result = run_module("torch_cuda_archs", {"python": cuda_torch, "require": ["12.2"]})
    assert result["event"] == "runner_on_ok", result.get("msg")
    assert result["require"] == ["12.2"]
    assert result["missing"] == []  # plain sm_120 runs on every 12.x
    assert result["warnings"] == [
        f"capability 12.2 is not one of the known NVIDIA GPU capabilities ({', '.join(KNOWN_CAPABILITIES)}); "
        "it was rated with the same rules, which a new architecture may not follow"]


def test_cpu_build(cpu_torch):
    result = run_module("torch_cuda_archs", {"python": cpu_torch}, check=True)
    assert result["event"] == "runner_on_ok", result.get("msg")
    assert result["torch_version"] == "2.13.0+cpu"
    assert result["cuda_version"] is None
    assert result["build"] == "cpu"
    assert result["arch_list"] == [] == torch_says(cpu_torch, "torch.cuda.get_arch_list()")
    assert result["arch_list_source"] == "torch.cuda.get_arch_list"
    assert result["cuda_available"] is False
    assert result["missing"] == []


def test_cpu_build_with_require_fails_naming_the_index(cpu_torch):
    failed = run_module("torch_cuda_archs", {
        "python": cpu_torch, "require": ["12.0"], "fail_on_missing": False,
        "cuda_index_url": "https://mirror.example.internal/whl/cu130"})
    assert failed["event"] == "runner_on_failed"
    assert "torch 2.13.0+cpu" in failed["msg"]
    assert "is a CPU build (torch.version.cuda is None)" in failed["msg"]
    assert "pip install --index-url https://mirror.example.internal/whl/cu130 torch==2.13.0" in failed["msg"]
    assert failed["missing"] == ["12.0"]


def test_python_without_torch(bare_venv):
    python = bare_venv
    failed = run_module("torch_cuda_archs", {"python": str(python)})
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"].startswith(f"torch is not installed for {python} (No module named 'torch')")


def test_python_path_with_tilde_is_expanded(tmp_path):
    make_venv(tmp_path / "venv")
    failed = run_module("torch_cuda_archs", {"python": "~/venv/bin/python"}, envvars={"HOME": str(tmp_path)})
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"].startswith(f"torch is not installed for {tmp_path}/venv/bin/python (No module named")


def test_system_python_without_torch():
    probe = subprocess.run(["python3", "-c", "import torch"], capture_output=True, check=False)
    require(probe.returncode != 0, "this machine's python3 has torch (the test needs one without)")
    failed = run_module("torch_cuda_archs", {"python": "python3"})
    assert failed["event"] == "runner_on_failed"
    assert "torch is not installed for" in failed["msg"]


def test_hung_import_is_killed(tmp_path):
    python = venv_with_torch(tmp_path, "import time\ntime.sleep(600)\n")
    failed = run_module("torch_cuda_archs", {"python": python, "timeout": 3})
    assert failed["event"] == "runner_on_failed"
    assert "the torch probe in" in failed["msg"]
    assert "did not finish within 3 s and was killed (a hung import or CUDA initialisation?)" in failed["msg"]


def test_broken_torch(tmp_path):
    python = venv_with_torch(tmp_path,
                             "raise ImportError('libtorch_cuda.so: cannot open shared object file')\n")
    failed = run_module("torch_cuda_archs", {"python": python})
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"] == (f"import torch failed in {python}: ImportError: libtorch_cuda.so: cannot "
                             "open shared object file; the install is broken or incomplete: reinstall "
                             "torch in that environment")


def test_stray_torch_directory_is_not_a_torch_install(tmp_path):
    # A directory left by a removed install imports as a namespace package: say so, not "is it Python?".
    python = venv_with_torch(tmp_path, "")
    package = purelib(python) / "torch"
    (package / "__init__.py").unlink()
    (package / "lib").mkdir()
    failed = run_module("torch_cuda_archs", {"python": python})
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"] == (
        f"import torch failed in {python}: torch in {package} is a directory without __init__.py (a "
        "namespace package, e.g. left over from an uninstall), not an installed torch; the install is "
        "broken or incomplete: reinstall torch in that environment")


def test_torch_without_version_fails_as_broken_not_as_not_python(tmp_path):
    python = venv_with_torch(tmp_path, "# an emptied torch/__init__.py\n")
    failed = run_module("torch_cuda_archs", {"python": python})
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"] == (f"import torch failed in {python}: AttributeError: module 'torch' has no "
                             "attribute '__version__'; the install is broken or incomplete: reinstall "
                             "torch in that environment")


@pytest.mark.parametrize(("args", "message"), [
    ({"python": "/nonexistent/venv/bin/python"}, "python /nonexistent/venv/bin/python does not exist"),
    ({"python": sys.executable, "require": ["blackwell"]}, "require: 'blackwell' is not a CUDA architecture"),
    ({"python": sys.executable, "require": [12.0]},
     "require: capability 12.0 is a number; write it as a quoted"),
    ({"python": sys.executable, "timeout": 0}, "timeout must be a positive number of seconds, got 0"),
])
def test_bad_input(args, message):
    failed = run_module("torch_cuda_archs", args)
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"].startswith(message)
    assert "Traceback" not in json.dumps(failed)


def test_python_not_executable(tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o644)
    failed = run_module("torch_cuda_archs", {"python": str(python)})
    assert failed["event"] == "runner_on_failed"
    assert failed["msg"] == (f"python {python} is not executable (check its mode and the mount's noexec "
                             "flag)")
