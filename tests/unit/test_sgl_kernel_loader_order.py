"""module_utils/sgl_kernel_layout.py with device code: the loader's candidate order among compiled and
source files, and ``selected_covers`` true and false, on hand-built fatbin files named like the wheel's
``common_ops.abi3.so`` (the scanner reads a fatbin by its header, whatever the name; the byte layout is
the one tests/unit/test_cuda_fatbin_synthetic.py documents). Real wheels: tests/integration/."""

from __future__ import annotations

import glob
import os
import struct

import pytest
from ansible.module_utils import sgl_kernel_layout
from ansible.module_utils.sgl_kernel_layout import LayoutError, inspect_layout, package_version

A, F = 0x100000, 0x200000


def fatbin(*entries: tuple[int, int, int]) -> bytes:
    """A fatbin of (kind, sm, flags) entries: kind 2 SASS, 1 PTX."""
    body = b""
    for kind, sm, flags in entries:
        head = bytearray(64)
        struct.pack_into("<HHIQ", head, 0, kind, 0x0101, 64, 0)
        struct.pack_into("<I", head, 28, sm)
        struct.pack_into("<Q", head, 40, flags)
        body += bytes(head)
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(body)) + body


# What released 0.4.10 wheels hold in both variants (shared upstream facts), and narrower builds.
RELEASED = fatbin((2, 80, 0), (2, 89, 0), (2, 90, 0), (2, 90, A), (2, 100, F), (2, 120, A))
HOPPER_PTX = fatbin((2, 90, A), (1, 90, 0))
FAMILY_120 = fatbin((2, 120, F))


def package(root, files: dict[str, bytes | str]) -> str:
    for name, content in files.items():
        path = root / "sgl_kernel" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    return str(root / "sgl_kernel")


def test_candidate_order_compiled_files_first_then_sources_in_glob_order(tmp_path):
    pkg = package(tmp_path, {"sm100/common_ops.py": "", "sm100/common_ops.abi3.so": RELEASED,
                             "sm100/common_ops.pyi": "", "sm100/other.so": RELEASED})
    result = inspect_layout(pkg, "12.0")
    sm100 = result["variants"]["sm100"]
    assert sm100["path"] == os.path.join(pkg, "sm100", "common_ops.abi3.so")
    sources = [p for p in glob.glob(os.path.join(pkg, "sm100", "common_ops.*")) if not p.endswith(".so")]
    assert sm100["other_files"] == sources
    assert sorted(os.path.basename(p) for p in sources) == ["common_ops.py", "common_ops.pyi"]


def test_a_source_file_alone_is_the_candidate_and_holds_no_code(tmp_path):
    pkg = package(tmp_path, {"sm100/common_ops.py": "", "common_ops.abi3.so": RELEASED})
    result = inspect_layout(pkg, "12.0")
    assert result["selected_variant"] == "sm100"
    assert result["selected_path"] == os.path.join(pkg, "sm100", "common_ops.py")
    assert result["variants"]["sm100"]["sass"] == []
    assert result["selected_covers"] is False
    assert result["message"].endswith("; common_ops.abi3.so has code for 12.0, but the loader falls back "
                                      "to it only when sm100/common_ops.py fails to load")


def test_selected_covers_with_native_sass(tmp_path):
    pkg = package(tmp_path, {"sm90/common_ops.abi3.so": RELEASED, "sm100/common_ops.abi3.so": RELEASED,
                             "version.py": "__version__ = '0.4.10'\n"})
    result = inspect_layout(pkg, "12.0")
    assert result["selected_variant"] == "sm100"
    assert result["selected_covers"] is True
    assert result["variants"]["sm100"]["sass"] == ["sm_80", "sm_89", "sm_90", "sm_90a", "sm_100f", "sm_120a"]
    assert result["variants"]["sm100"]["ptx"] == []
    assert result["variants"]["sm100"]["runs_on"] == "sass"
    assert result["variants"]["sm90"]["runs_on"] == "sass"
    assert result["message"] == ("the loader picks sm100/ for capability 12.0: sm100/common_ops.abi3.so runs "
                                 "on 12.0 (native SASS)")
    assert result["package_version"] == "0.4.10"


def test_hopper_takes_sm90_and_may_run_through_ptx(tmp_path):
    pkg = package(tmp_path, {"sm90/common_ops.abi3.so": fatbin((1, 80, 0)),
                             "sm100/common_ops.abi3.so": RELEASED})
    result = inspect_layout(pkg, "9.0")
    assert result["selected_variant"] == "sm90"
    assert result["selected_covers"] is True
    assert result["variants"]["sm90"]["runs_on"] == "ptx-jit"
    assert result["message"] == ("the loader picks sm90/ for capability 9.0: sm90/common_ops.abi3.so runs on "
                                 "9.0 (PTX JIT-compiled by the driver)")


def test_selected_covers_false_names_what_would_run(tmp_path):
    # GB10 (12.1): sm_120a is 12.0 only, and the released wheel has no PTX.
    pkg = package(tmp_path, {"sm90/common_ops.abi3.so": HOPPER_PTX, "sm100/common_ops.abi3.so": RELEASED,
                             "common_ops.abi3.so": FAMILY_120, "sm80/common_ops.abi3.so": fatbin((2, 80, 0))})
    result = inspect_layout(pkg, "12.1")
    assert result["selected_variant"] == "sm100"
    assert result["selected_covers"] is False
    assert result["variants"]["sm100"]["runs_on"] is False
    assert result["variants"]["sm90"]["runs_on"] == "ptx-jit"
    assert result["variants"]["root"]["runs_on"] == "sass"
    assert result["variants"]["sm80"]["runs_on"] is False
    assert result["message"] == (
        "sm100/common_ops.abi3.so has no code for 12.1: sm_80, sm_89, sm_90, sm_90a, sm_100f, sm_120a (the "
        "loader picks sm100/ for capability 12.1); install an sglang-kernel build whose sm100/common_ops has "
        "code for 12.1 (sm_120f, sm_121a, sm_121 or compute_121 PTX) or build it from source for that "
        "target; sm90/common_ops.abi3.so has code for 12.1 but the loader does not pick it for this "
        "capability; common_ops.abi3.so has code for 12.1, but the loader falls back to it only when "
        "sm100/common_ops.abi3.so fails to load")


def test_without_a_capability_coverage_is_unknown(tmp_path):
    pkg = package(tmp_path, {"sm90/common_ops.abi3.so": HOPPER_PTX, "sm100/common_ops.abi3.so": RELEASED})
    result = inspect_layout(pkg, None)
    assert result["selected_variant"] == "sm100"
    assert result["selected_covers"] is None
    assert result["variants"]["sm100"]["runs_on"] is None
    assert result["message"] == ("no GPU capability given or found, so coverage is unknown; without a GPU "
                                 "the loader tries sm100/common_ops.abi3.so first, which holds sm_80, "
                                 "sm_89, sm_90, sm_90a, sm_100f, sm_120a")


def test_directories_that_are_not_variants(tmp_path):
    pkg = package(tmp_path, {"__pycache__/common_ops.abi3.so": RELEASED, "ops/kernels.so": RELEASED,
                             "sm100/common_ops.abi3.so": RELEASED, "sm90": "a file, not a directory"})
    assert sorted(inspect_layout(pkg, "12.0")["variants"]) == ["sm100"]


def test_a_corrupt_library_is_a_layout_error(tmp_path):
    pkg = package(tmp_path, {"sm100/common_ops.abi3.so": RELEASED[:40]})
    with pytest.raises(LayoutError, match=r"^sm100/common_ops\.abi3\.so in .*/sgl_kernel is not a readable "
                                          r"shared object \(.*truncated.*\); reinstall sglang-kernel$"):
        inspect_layout(pkg, "12.0")


@pytest.mark.parametrize(("text", "version"), [
    ('__version__ = "0.4.10"\n', "0.4.10"), ("__version__='0.3.21.post1'\n", "0.3.21.post1"),
    ("version = '1'\n", None), ("", None)])
def test_package_version(tmp_path, text, version):
    pkg = package(tmp_path, {"version.py": text})
    assert package_version(pkg) == version
    assert package_version(str(tmp_path / "missing")) is None


def test_an_unreadable_variant_directory_is_an_error_not_an_empty_one(tmp_path, monkeypatch):
    # As root nothing is unreadable, so the refusal is made by a stand-in listdir (a normal user's run
    # is in tests/unit/test_modules_fail_cleanly.py).
    pkg = package(tmp_path, {"sm100/common_ops.abi3.so": RELEASED})
    real_listdir = sgl_kernel_layout.os.listdir

    def listdir(path=None):
        if path == os.path.join(pkg, "sm100"):
            raise PermissionError(13, "Permission denied", path)
        return real_listdir(path)

    monkeypatch.setattr(sgl_kernel_layout.os, "listdir", listdir)
    with pytest.raises(LayoutError) as caught:
        inspect_layout(pkg, "12.0")
    assert str(caught.value) == (f"cannot list {pkg}/sm100: Permission denied; check that the user running "
                                 "the module may read the sgl_kernel package")


def test_nothing_to_load_names_the_directory_the_loader_wants(tmp_path):
    pkg = package(tmp_path, {"sm100/common_ops.abi3.so": RELEASED})
    result = inspect_layout(pkg, "9.0")
    assert (result["package_dir"], result["capability"]) == (pkg, "9.0")
    assert result["selected_variant"] is None
    assert result["message"].startswith(f"no sm90/common_ops.* and no package-root common_ops.* in {pkg}: ")
    pkg = package(tmp_path / "root-only", {"common_ops.abi3.so": fatbin((2, 80, 0))})
    assert "whose sm90/common_ops has code for 9.0" in inspect_layout(pkg, "9.0")["message"]
