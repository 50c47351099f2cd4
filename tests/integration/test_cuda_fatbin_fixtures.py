"""The fatbin scanner on real nvcc-built binaries, checked against the build request and cuobjdump."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from ansible.module_utils.cuda_arch import sorted_archs
from ansible.module_utils.cuda_fatbin import FatbinError, iter_candidate_files, scan_file
from cudabuild import FIXTURES, compiled_fixtures
from cuobjdump import as_cuobjdump_lists, cuobjdump_listing, cuobjdump_path

pytestmark = pytest.mark.integration
cuda_fixtures = compiled_fixtures  # the session fixture, under the name the tests ask for

CONTAINER_KINDS = ("so", "o", "fatbin")


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_scan_reports_exactly_what_nvcc_was_asked_for(cuda_fixtures, name):
    path, fixture = cuda_fixtures[name]
    code = scan_file(path)
    assert code.sass == sorted_archs(fixture.sass)
    assert code.ptx == sorted_archs(fixture.ptx)
    assert code.lto == sorted_archs(fixture.lto)


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_scan_agrees_with_cuobjdump(cuda_fixtures, name):
    path, _fixture = cuda_fixtures[name]
    code = scan_file(path)
    # cuobjdump cannot list LTO-IR entries: lto.o lists no ELF/PTX there, and neither does the scanner.
    assert as_cuobjdump_lists(code.sass, code.ptx) == cuobjdump_listing(path)


@pytest.mark.parametrize("name", sorted(name for name, fixture in FIXTURES.items()
                                        if fixture.kind in CONTAINER_KINDS and fixture.sass))
def test_cubins_extracted_by_cuobjdump_decode_to_the_entry_arch(cuda_fixtures, name, tmp_path):
    """Each cubin inside a container (ptxas, nvlink device-link, compressed or not), once cuobjdump
    extracted it, is recognised as a raw cubin with the same precise arch, suffix included."""
    path, fixture = cuda_fixtures[name]
    subprocess.run([str(cuobjdump_path()), "-xelf", "all", str(path)], cwd=tmp_path, check=True,
                   capture_output=True, timeout=300)
    extracted = sorted(tmp_path.glob("*.cubin"))
    assert extracted, f"cuobjdump extracted no cubin from {name}"
    found = set()
    for cubin in extracted:
        code = scan_file(cubin)
        assert len(code.sass) == 1, (cubin.name, code)
        assert not code.ptx
        found.update(code.sass)
    assert found == set(fixture.sass)


def test_compress_modes_really_differ(cuda_fixtures):
    """Guards the compression fixtures: -compress-mode=size must really compress entries (a smaller
    file than -compress-mode=none), or the scanner's reading of compressed entries goes untested."""
    sizes = {mode: cuda_fixtures[f"compress_{mode}.so"][0].stat().st_size for mode in ("size", "none")}
    assert sizes["size"] < sizes["none"]


def test_directory_walk_finds_every_fixture_and_nothing_else(cuda_fixtures):
    directory = next(iter(cuda_fixtures.values()))[0].parent
    found = {path.rsplit("/", 1)[-1] for path in iter_candidate_files([directory])}
    assert found == set(FIXTURES)  # not build-seconds.txt, not .ready


def test_copies_and_symlinks_are_scanned_once_each(cuda_fixtures, tmp_path):
    source = cuda_fixtures["sm_120a.so"][0]
    (tmp_path / "lib").mkdir()
    shutil.copy(source, tmp_path / "lib" / "libk.so.1.2")
    (tmp_path / "lib" / "libk.so").symlink_to("libk.so.1.2")
    found = list(iter_candidate_files([tmp_path, tmp_path / "lib" / "libk.so"]))
    assert found == [str(tmp_path / "lib" / "libk.so")]
    assert scan_file(found[0]).sass == ["sm_120a"]


def _corrupt(source, tmp_path, offset, data):
    target = tmp_path / source.name
    blob = bytearray(source.read_bytes())
    blob[offset:offset + len(data)] = data
    target.write_bytes(bytes(blob))
    return target


@pytest.mark.parametrize("fraction", [0.02, 0.5, 0.97])
def test_truncated_library_is_an_error_naming_the_file(cuda_fixtures, tmp_path, fraction):
    source = cuda_fixtures["multi.so"][0]
    data = source.read_bytes()
    target = tmp_path / "multi.so"
    target.write_bytes(data[:int(len(data) * fraction)])
    with pytest.raises(FatbinError, match=r"multi\.so: truncated"):
        scan_file(target)


def test_truncated_fatbin_file_is_an_error(cuda_fixtures, tmp_path):
    source = cuda_fixtures["mixed.fatbin"][0]
    target = tmp_path / "mixed.fatbin"
    target.write_bytes(source.read_bytes()[:200])
    with pytest.raises(FatbinError, match=r"mixed\.fatbin: truncated fatbin file: fatbin container at "
                                          r"offset 0x0 declares"):
        scan_file(target)


# Offsets in a raw fatbin: container header (16 bytes), then the first entry's header.
@pytest.mark.parametrize(("offset", "data", "message"), [
    (4, b"\x02\x00", "unsupported fatbin container version 2"),
    (6, b"\x04\x00", "fatbin header size 4"),
    (16 + 4, b"\x00\x00\x00\x00", "fatbin entry at offset 0x10 has header size 0"),
    (16 + 8, b"\xff\xff\xff\xff", r"fatbin entry at offset 0x10 \(header 64 \+ payload \d+ bytes\) overruns"),
    (16 + 28, b"\x00\x00\x00\x00", "SM number 0"),
    (16 + 40 + 2, b"\x30", "both arch-specific and family"),
])
def test_corrupt_fatbin_headers_are_errors(cuda_fixtures, tmp_path, offset, data, message):
    target = _corrupt(cuda_fixtures["mixed.fatbin"][0], tmp_path, offset, data)
    with pytest.raises(FatbinError, match=message):
        scan_file(target)


def test_garbage_between_containers_is_an_error(cuda_fixtures, tmp_path):
    source = cuda_fixtures["mixed.fatbin"][0]
    target = tmp_path / "twice.fatbin"
    target.write_bytes(source.read_bytes() + b"\0" * 16 + source.read_bytes() + b"junk")
    with pytest.raises(FatbinError, match="no fatbin container header at offset"):
        scan_file(target)
    # Zero padding between and after back-to-back containers is how linkers align them: accepted.
    target.write_bytes(source.read_bytes() + b"\0" * 16 + source.read_bytes() + b"\0" * 8)
    assert scan_file(target).sass == ["sm_90a", "sm_120f"]
