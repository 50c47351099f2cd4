"""No module ever ends in a traceback: an unexpected error, and a real permission error, give fail_json.

Ansible shows a module's traceback as "MODULE FAILURE" with the module's stderr, which tells a user
nothing they can act on; every module wraps its work in a last-resort handler that names the module and
the error instead. The injected failure stands in for a bug or a changed dependency, which no input
of ours can produce on purpose.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from module_direct import INJECTED, run_module_directly
from prereq import require

NOBODY = 65534


def assert_clean_failure(outcome, message):
    returncode, result, stderr = outcome
    assert result is not None, f"the module printed no result; stderr: {stderr}"
    assert returncode == 1
    assert result["failed"] is True
    assert result["msg"] == message
    assert "Traceback" not in stderr + repr(result)


@pytest.mark.parametrize(("module", "args", "fail_in"), [
    ("cuda_binary_archs", {"paths": ["/"]}, "cuda_binaries.inspect_binaries"),
    ("torch_cuda_archs", {"python": "python3"}, "torch_probe.inspect_torch"),
    ("gpu_facts", {}, "nvidia_smi.gpu_facts"),
    ("cuda_toolkit", {"search": []}, "cuda_toolkit.find_nvcc"),
    ("nvidia_driver_facts", {"cuda_version": "13.0"}, "nvidia_driver.decide"),
    ("sgl_kernel_variants", {"package_dir": "/tmp", "capability": "9.0"},
     "sgl_kernel_probe.check_sgl_kernel"),
    ("stack_plan", {"profile": {}, "stack_root": "/tmp"}, "stack_profile.validate_profile"),
    ("stack_retention", {"stack_root": "/tmp"}, "stack_profile.stacks_to_prune"),
    ("sgl_kernel_wheel_check", {"wheel": "/tmp/x.whl", "capabilities": ["9.0"], "torch_version": "2.14.1"},
     "sgl_kernel_wheel.scan_wheel"),
    ("sgl_kernel_build", {"state": "prepare", "source_dir": "/tmp", "cuda_version": "13.0",
                          "torch_version": "2.14.1", "source_commit": "abc"},
     "sgl_kernel_source.prepare_source"),
    ("sglang_server_args", {"model": {"name": "m", "model_path": "/m"}}, "sglang_cmdline.render"),
    ("sglang_models_check", {"host": "h", "models": []}, "sglang_models.check_host_models"),
    ("smg_manifest", {"workers": []}, "smg_manifest.build_manifest"),
    ("sglang_readiness", {"url": "http://127.0.0.1:9/"}, "sglang_readiness.wait_ready"),
    ("smg_route_check", {"url": "http://127.0.0.1:9", "metrics_url": "http://127.0.0.1:9/metrics",
                         "workers": [{"id": "a", "url": "http://127.0.0.1:9"}]}, "smg_routing.check_routing"),
    ("sglang_spec_acceptance", {"url": "http://127.0.0.1:9", "name": "m", "prompts": ["p"],
                                "speculative": {"algorithm": "EAGLE3"}}, "spec_acceptance.probe"),
    ("stack_wheels", {"lock_files": []}, "wheel_cache.missing_pins"),
    ("stack_bundle_kernel_source", {"dest": "/nonexistent", "archive_url": "http://127.0.0.1:9/s.tar.gz"},
     "kernel_source_bundle.bundle_kernel_source"),
    ("python_distributions", {"python": "python3"}, "python_dists.probe_distributions"),
    ("stack_facts", {"stack_root": "/tmp"}, "stack_facts.read"),
    ("stack_lock", {"action": "compare", "lock": {}, "facts": {}}, "stack_lock.validate_lock"),
    ("verify_checks", {"gpu": {}, "stack": {}}, "verify_report.host_checks"),
    ("verify_report", {"hosts": {}}, "verify_report.summarize"),
])
def test_unexpected_error_is_a_clean_failure(module, args, fail_in):
    outcome = run_module_directly(module, args, fail_in=fail_in)
    assert_clean_failure(outcome, f"{module} failed unexpectedly: RuntimeError: {INJECTED}")


@pytest.fixture
def unlistable_package():
    """An sgl_kernel directory that a non-root user may enter but not list (mode 0711)."""
    root = Path(tempfile.mkdtemp(prefix="sglang-fleet-"))  # not under pytest's 0700 tmp root
    try:
        package = root / "sgl_kernel"
        (package / "sm90").mkdir(parents=True)
        (package / "sm90" / "common_ops.abi3.so").write_bytes(b"")
        root.chmod(0o711)
        package.chmod(0o711)
        yield package
    finally:
        shutil.rmtree(root)


def test_unlistable_package_dir_as_a_normal_user(unlistable_package):
    require(os.geteuid() == 0 and shutil.which("setpriv") is not None,
            "needs root and setpriv (util-linux) to run the module as another user")
    outcome = run_module_directly("sgl_kernel_variants",
                                  {"package_dir": str(unlistable_package), "capability": "9.0"}, user=NOBODY)
    assert_clean_failure(outcome, f"cannot list {unlistable_package}: Permission denied; check that the "
                                  "user running the module may read the sgl_kernel package")
