"""module_utils/cuda_binaries.py: the report and message of the cuda_binary_archs module, on hand-built
fatbin files (no nvcc). The scanner itself is tested in test_cuda_fatbin_synthetic.py, whose builders
this file reuses; tests/integration runs the module on what nvcc really emits.
"""

from __future__ import annotations

import pytest
from ansible.module_utils.cuda_binaries import MAX_FILES_IN_MESSAGE, inspect_binaries, missing_message
from ansible.module_utils.cuda_fatbin import FatbinError
from test_cuda_fatbin_synthetic import A, container, entry

SASS, PTX, LTO = 2, 1, 8


@pytest.fixture
def libs(tmp_path):
    """sass80+ptx90, arch-specific sm_90a, LTO-IR only, and a linker script (no device code)."""
    (tmp_path / "a.fatbin").write_bytes(container(entry(SASS, 80), entry(PTX, 90)))
    (tmp_path / "b.fatbin").write_bytes(container(entry(SASS, 90, A)))
    (tmp_path / "c.fatbin").write_bytes(container(entry(LTO, 90)))
    (tmp_path / "d.so").write_text("INPUT(libreal.so.1)\n")
    return tmp_path


def test_report_rates_every_file_on_every_capability(libs):
    a, b, c, d = (str(libs / name) for name in ("a.fatbin", "b.fatbin", "c.fatbin", "d.so"))
    assert inspect_binaries([libs], ["8.0", "9.0", "8.6"]) == {
        "files": [
            {"path": a, "sass": ["sm_80"], "ptx": ["compute_90"],
             "runs_on": {"8.0": "sass", "9.0": "ptx-jit", "8.6": "sass"}},
            {"path": b, "sass": ["sm_90a"], "ptx": [],
             "runs_on": {"8.0": False, "9.0": "sass", "8.6": False}},
            # LTO-IR counts as device code, but runs nowhere until a device link
            {"path": c, "sass": [], "ptx": [], "lto": ["lto_90"],
             "runs_on": {"8.0": False, "9.0": False, "8.6": False}},
            {"path": d, "sass": [], "ptx": [], "runs_on": {}},
        ],
        "missing": {"8.0": [b, c], "9.0": [c], "8.6": [b, c]},
        "counts": {"files": 4, "with_device_code": 3, "without_device_code": 1},
    }


def test_ptx_jit_is_how_a_newer_capability_runs(libs):
    report = inspect_binaries([libs / "a.fatbin"], ["12.0"])
    assert report["files"][0]["runs_on"] == {"12.0": "ptx-jit"}
    assert report["missing"] == {"12.0": []}
    assert missing_message(report) == ""


def test_no_capabilities_rates_nothing(libs):
    report = inspect_binaries([libs / "a.fatbin", libs / "d.so"], [])
    assert [f["runs_on"] for f in report["files"]] == [{}, {}]
    assert report["missing"] == {}
    assert report["counts"] == {"files": 2, "with_device_code": 1, "without_device_code": 1}


def test_a_missing_path_is_an_error(tmp_path):
    with pytest.raises(FatbinError, match="no such file or directory"):
        inspect_binaries([tmp_path / "absent.so"], ["9.0"])


def test_message_names_each_capability_its_files_and_what_to_build(libs):
    b, c = str(libs / "b.fatbin"), str(libs / "c.fatbin")
    message = missing_message(inspect_binaries([libs], ["8.0", "9.0", "12.0"]))
    assert message == (
        f"no code for capability 8.0 in 2 of 3 files with device code: {b} (has sm_90a), {c} (has lto_90 "
        "(LTO-IR, runs only after a device link)); rebuild them for sm_80 or compute_80 PTX; "
        f"no code for capability 9.0 in 1 of 3 files with device code: {c} (has lto_90 (LTO-IR, runs only "
        "after a device link)); rebuild them for sm_90a, sm_90 or compute_90 PTX; "
        f"no code for capability 12.0 in 2 of 3 files with device code: {b} (has sm_90a), {c} (has lto_90 "
        "(LTO-IR, runs only after a device link)); rebuild them for sm_120f, sm_120a, sm_120 or compute_120 "
        "PTX")


@pytest.mark.parametrize("count", [MAX_FILES_IN_MESSAGE, MAX_FILES_IN_MESSAGE + 1, MAX_FILES_IN_MESSAGE + 3])
def test_message_lists_at_most_ten_files_then_how_many_more(tmp_path, count):
    names = [f"k{i:02}.fatbin" for i in range(count)]
    for name in names:
        (tmp_path / name).write_bytes(container(entry(SASS, 80)))
    message = missing_message(inspect_binaries([tmp_path], ["9.0"]))
    shown = ", ".join(f"{tmp_path / name} (has sm_80)" for name in names[:MAX_FILES_IN_MESSAGE])
    more = f", and {count - MAX_FILES_IN_MESSAGE} more" if count > MAX_FILES_IN_MESSAGE else ""
    assert message == (f"no code for capability 9.0 in {count} of {count} files with device code: "
                       f"{shown}{more}; rebuild them for sm_90a, sm_90 or compute_90 PTX")


def test_message_skips_capabilities_every_file_runs_on(libs):
    b = str(libs / "b.fatbin")
    report = inspect_binaries([libs / "a.fatbin", libs / "b.fatbin"], ["9.0", "8.0"])
    assert missing_message(report) == (f"no code for capability 8.0 in 1 of 2 files with device code: {b} "
                                       "(has sm_90a); rebuild them for sm_80 or compute_80 PTX")
