"""module_utils/sgl_kernel_layout.py: the upstream loader's choice of common_ops file, on plain files.

Device-code coverage on real binaries (nvcc fixtures, the released wheel) is in
tests/integration/test_sgl_kernel_variants.py; here the files hold no device code, which is itself a
case the module must explain.
"""

import os

import pytest
from ansible.module_utils.sgl_kernel_layout import (
    LayoutError,
    filter_compiled_extensions,
    find_variants,
    inspect_layout,
    loader_subdir,
    package_version,
)
from locales import c_locale


def make_tree(root, files):
    for name, text in files.items():
        path = root / "sgl_kernel" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return str(root / "sgl_kernel")


def test_filter_compiled_extensions_matches_upstream():
    files = ["/p/common_ops.py", "/p/common_ops.abi3.so", "/p/common_ops.txt", "/p/common_ops.cpython-312.so",
             "/p/common_ops.pyd"]
    assert filter_compiled_extensions(files) == [
        "/p/common_ops.abi3.so", "/p/common_ops.cpython-312.so", "/p/common_ops.pyd", "/p/common_ops.py",
        "/p/common_ops.txt"]
    # Upstream tests ".so" anywhere in the path, directory included: replicated on purpose.
    assert filter_compiled_extensions(["/x.sofar/common_ops.py", "/y/common_ops.so"]) == [
        "/x.sofar/common_ops.py", "/y/common_ops.so"]


@pytest.mark.parametrize(("capability", "subdir"), [
    ("9.0", "sm90"), ("8.0", "sm100"), ("8.6", "sm100"), ("8.9", "sm100"), ("10.0", "sm100"),
    ("10.3", "sm100"), ("12.0", "sm100"), ("12.1", "sm100"), (None, "sm100"),
])
def test_loader_subdir(capability, subdir):
    assert loader_subdir(capability) == subdir


def test_find_variants(tmp_path):
    package = make_tree(tmp_path, {
        "sm90/common_ops.abi3.so": "", "sm100/common_ops.py": "", "sm100/common_ops.abi3.so": "",
        "common_ops.py": "", "__pycache__/common_ops.cpython-311.pyc": "", "quantization/gguf.py": "",
        "version.py": '__version__ = "0.4.10"\n'})
    variants = find_variants(package)
    assert sorted(variants) == ["root", "sm100", "sm90"]
    assert variants["sm100"] == [os.path.join(package, "sm100", "common_ops.abi3.so"),
                                 os.path.join(package, "sm100", "common_ops.py")]
    assert variants["root"] == [os.path.join(package, "common_ops.py")]
    assert package_version(package) == "0.4.10"


def test_root_fallback_when_the_variant_directory_is_missing(tmp_path):
    package = make_tree(tmp_path, {"sm90/common_ops.abi3.so": "", "common_ops.abi3.so": ""})
    result = inspect_layout(package, "12.0")
    assert result["selected_variant"] == "root"
    assert result["selected_path"] == os.path.join(package, "common_ops.abi3.so")
    assert result["selected_covers"] is False
    assert result["message"].startswith(
        "common_ops.abi3.so has no code for 12.0: no device code (sm100/common_ops.* is missing, so the "
        "loader falls back to the package-root common_ops); install an sglang-kernel build whose "
        "sm100/common_ops has code for 12.0 (sm_120f, sm_120a, sm_120 or compute_120 PTX)")
    assert result["package_version"] is None


def test_python_only_variant_holds_no_code(tmp_path):
    package = make_tree(tmp_path, {"sm90/common_ops.py": ""})
    result = inspect_layout(package, "9.0")
    assert result["variants"]["sm90"]["sass"] == []
    assert result["selected_covers"] is False
    assert result["message"].startswith("sm90/common_ops.py has no code for 9.0: no device code")


def test_nothing_to_load(tmp_path):
    package = make_tree(tmp_path, {"sm90/common_ops.abi3.so": "", "__init__.py": ""})
    result = inspect_layout(package, None)
    assert result["selected_variant"] is None
    assert result["selected_covers"] is False
    assert "no sm100/common_ops.* and no package-root common_ops.*" in result["message"]
    assert ("the loader finds nothing to load in the package, so import sgl_kernel could only succeed "
            "through its last fallback, a top-level common_ops module elsewhere on sys.path (else \"Could "
            "not load any common_ops library\"); reinstall sglang-kernel") in result["message"]


def test_not_a_directory(tmp_path):
    with pytest.raises(LayoutError, match="is not a directory; give the sgl_kernel package directory"):
        inspect_layout(str(tmp_path / "missing"), "9.0")


def test_package_version_reads_utf8_whatever_the_locale(tmp_path):
    # version.py is Python source, UTF-8 by definition; a host whose locale is plain ASCII (LC_CTYPE=C
    # with locale coercion and UTF-8 mode turned off) reads it the same.
    package = tmp_path / "sgl_kernel"
    package.mkdir()
    (package / "version.py").write_bytes('# build by Jos\u00e9\n__version__ = "0.4.10"\n'.encode())
    with c_locale():
        assert package_version(str(package)) == "0.4.10"


def test_package_version_of_a_version_py_that_is_not_utf8(tmp_path):
    # Python would refuse to import it, so the version is unknown (it used to raise UnicodeDecodeError
    # out of inspect_layout, a traceback instead of a result).
    package = tmp_path / "sgl_kernel"
    package.mkdir()
    (package / "version.py").write_bytes(b'# build by Jos\xe9\n__version__ = "0.4.10"\n')
    assert package_version(str(package)) is None
    assert inspect_layout(str(package), "9.0")["package_version"] is None
