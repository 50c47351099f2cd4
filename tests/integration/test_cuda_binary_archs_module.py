"""The cuda_binary_archs module through Ansible, on the nvcc-built fixtures."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from ansible.module_utils.cuda_arch import KNOWN_CAPABILITIES
from ansible_run import run_module, run_playbook
from cudabuild import compiled_fixtures
from documented import assert_documented

pytestmark = pytest.mark.integration
cuda_fixtures = compiled_fixtures  # the session fixture, under the name the tests ask for


@pytest.fixture
def libdir(cuda_fixtures, tmp_path):
    """A small install tree: a Hopper+Blackwell library, a Blackwell-only one, PTX only, host only."""
    tree = tmp_path / "lib"
    (tree / "kernels").mkdir(parents=True)
    for name, target in [("multi.so", "libmulti.so"), ("sm_100a.so", "kernels/libb200.so.1"),
                         ("ptx_only.so", "libjit.so"), ("host_only.so", "libhost.so")]:
        shutil.copy(cuda_fixtures[name][0], tree / target)
    (tree / "README.txt").write_text("not scanned\n")
    return tree


def _assert_clean_failure(result, *fragments):
    assert result["event"] == "runner_on_failed", result
    assert result["changed"] is False
    for fragment in fragments:
        assert fragment in result["msg"]
    text = repr(result)
    assert "Traceback" not in text
    assert "MODULE FAILURE" not in text
    assert "module_stderr" not in result


def test_reports_every_file_and_where_it_runs(libdir):
    result = run_module("cuda_binary_archs", {"paths": [str(libdir)], "require": ["9.0", "12.0", "10.3"],
                                              "fail_on_missing": False})
    assert result["event"] == "runner_on_ok"
    assert result["changed"] is False
    files = {entry["path"][len(str(libdir)) + 1:]: entry for entry in result["files"]}
    # Walk order: a directory's files (sorted), then its subdirectories.
    assert list(files) == ["libhost.so", "libjit.so", "libmulti.so", "kernels/libb200.so.1"]
    assert files["libmulti.so"]["sass"] == ["sm_80", "sm_90", "sm_90a", "sm_100a", "sm_120f"]
    assert files["libmulti.so"]["ptx"] == ["compute_120"]
    assert files["libmulti.so"]["runs_on"] == {"9.0": "sass", "12.0": "sass", "10.3": False}
    assert files["kernels/libb200.so.1"]["runs_on"] == {"9.0": False, "12.0": False, "10.3": False}
    assert files["libjit.so"]["runs_on"] == {"9.0": "ptx-jit", "12.0": "ptx-jit", "10.3": "ptx-jit"}
    assert files["libhost.so"] == {"path": str(libdir / "libhost.so"), "sass": [], "ptx": [], "runs_on": {}}
    assert "lto" not in files["libmulti.so"]
    assert result["missing"] == {
        "9.0": [str(libdir / "kernels/libb200.so.1")],
        "12.0": [str(libdir / "kernels/libb200.so.1")],
        "10.3": [str(libdir / "libmulti.so"), str(libdir / "kernels/libb200.so.1")],
    }
    assert result["counts"] == {"files": 4, "with_device_code": 3, "without_device_code": 1}
    assert_documented("cuda_binary_archs", result)


def test_require_fails_by_default_and_names_the_files(libdir):
    result = run_module("cuda_binary_archs", {"paths": [str(libdir)], "require": ["120"]})
    _assert_clean_failure(
        result,
        f"no code for capability 12.0 in 1 of 3 files with device code: {libdir}/kernels/libb200.so.1 "
        "(has sm_100a, compute_100a); rebuild them for sm_120f, sm_120a, sm_120 or compute_120 PTX")
    assert result["missing"] == {"12.0": [str(libdir / "kernels/libb200.so.1")]}
    assert len(result["files"]) == 4  # the full report comes with the failure


def test_check_mode_passes_when_everything_runs(libdir):
    result = run_module("cuda_binary_archs",
                        {"paths": [str(libdir / "libmulti.so"), str(libdir / "libjit.so")],
                         "require": ["9.0", "sm_120"]}, check=True)
    assert result["event"] == "runner_on_ok"
    assert result["changed"] is False
    assert result["missing"] == {"9.0": [], "12.0": []}
    assert result["msg"] == "scanned 2 files, 2 with device code; all of them run on 9.0, 12.0"


def test_capability_newer_than_the_known_gpus_is_rated_with_a_warning(libdir):
    # The documented pipeline `require: "{{ gpu.capabilities }}"` must not fail on a GPU newer than
    # cuda_arch.KNOWN_CAPABILITIES: rated by the same rules, with a warning.
    result = run_module("cuda_binary_archs", {"paths": [str(libdir)], "require": ["12.2", "13.0"],
                                              "fail_on_missing": False})
    assert result["event"] == "runner_on_ok", result.get("msg")
    files = {Path(entry["path"]).name: entry["runs_on"] for entry in result["files"]}
    assert files["libmulti.so"] == {"12.2": "sass", "13.0": "ptx-jit"}  # sm_120f; compute_120
    assert files["libb200.so.1"] == {"12.2": False, "13.0": False}
    assert result["warnings"] == [
        f"capability {capability} is not one of the known NVIDIA GPU capabilities "
        f"({', '.join(KNOWN_CAPABILITIES)}); it was rated with the same rules, which a new architecture "
        "may not follow" for capability in ("12.2", "13.0")]


def test_lto_ir_is_reported_and_runs_nowhere(cuda_fixtures):
    result = run_module("cuda_binary_archs", {"paths": [str(cuda_fixtures["lto.o"][0])], "require": ["9.0"],
                                              "fail_on_missing": False})
    (entry,) = result["files"]
    assert entry["lto"] == ["lto_90", "lto_100f"]
    assert entry["runs_on"] == {"9.0": False}
    assert "lto_90 (LTO-IR, runs only after a device link)" in result["msg"]
    assert_documented("cuda_binary_archs", result)


def test_bad_input_fails_with_an_actionable_message(cuda_fixtures, tmp_path):
    truncated = tmp_path / "libcut.so"
    truncated.write_bytes(cuda_fixtures["multi.so"][0].read_bytes()[:4000])
    library = str(cuda_fixtures["sm_90.so"][0])
    cases = {
        "missing path": ({"paths": [str(tmp_path / "nope")]}, [f"cannot scan {tmp_path}/nope: no such file"]),
        "float capability": ({"paths": [library], "require": [12.0]},
                             ['require: capability 12.0 is a number; write it as a quoted string']),
        "unknown arch": ({"paths": [library], "require": ["sm_12x"]},
                         ["require: 'sm_12x' is not a CUDA architecture; use a capability like"]),
        "arch instead of capability": ({"paths": [library], "require": ["sm_120a"]},
                                       ['a GPU capability has no suffix (use "12.0")']),
        "no paths": ({"paths": []}, ["paths is empty"]),
        "truncated binary": ({"paths": [str(tmp_path)]}, [f"cannot scan {truncated}: truncated"]),
    }
    play = [{"hosts": "localhost", "gather_facts": False, "tasks": [
        {"name": name, "cuda_binary_archs": args, "ignore_errors": True} for name, (args, _) in cases.items()
    ]}]
    played = run_playbook(play)
    for name, (_args, fragments) in cases.items():
        _assert_clean_failure(played.task("localhost", name), *fragments)
