"""Scanner behaviour on inputs that need no nvcc: what is a candidate, what is an error, what is empty."""

import os
import struct
import sys

import pytest
from ansible.module_utils.cuda_fatbin import DeviceCode, FatbinError, iter_candidate_files, scan_file

EMPTY = DeviceCode([], [], [])


def test_missing_path_is_an_error_naming_it(tmp_path):
    with pytest.raises(FatbinError, match=r"/nope\.so: no such file or directory"):
        list(iter_candidate_files([tmp_path / "nope.so"]))
    with pytest.raises(FatbinError, match=r"/nope\.so: cannot read: No such file or directory"):
        scan_file(tmp_path / "nope.so")


def test_host_executable_has_no_device_code():
    # The Python interpreter: a real ELF64 program with sections, and no fatbin.
    assert scan_file(os.path.realpath(sys.executable)) == EMPTY


def test_linker_script_and_empty_library_have_no_device_code(tmp_path):
    script = tmp_path / "libc.so"
    script.write_text("/* GNU ld script */\nGROUP ( /lib/libc.so.6 )\n")
    empty = tmp_path / "libempty.so"
    empty.write_bytes(b"")
    assert scan_file(script) == EMPTY
    assert scan_file(empty) == EMPTY


@pytest.mark.parametrize("name", ["kernel.cubin", "kernels.fatbin"])
def test_cubin_or_fatbin_without_a_binary_header_is_an_error(tmp_path, name):
    path = tmp_path / name
    path.write_text("not a binary\n")
    with pytest.raises(FatbinError, match=rf"{name}: not a cubin or fatbin"):
        scan_file(path)


def test_walk_picks_binaries_by_name_and_skips_special_files(tmp_path):
    for name in ("a.so", "b.so.12", "c.so.1.2.3", "d.o", "e.cubin", "f.fatbin", "g.txt", "h.sox", "i.py",
                 "sub/j.so"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    os.mkfifo(tmp_path / "pipe.so")  # opening it would block: never a candidate
    (tmp_path / "dangling.so").symlink_to(tmp_path / "gone.so")
    found = [os.path.relpath(path, tmp_path) for path in iter_candidate_files([tmp_path])]
    assert found == ["a.so", "b.so.12", "c.so.1.2.3", "d.o", "e.cubin", "f.fatbin", "sub/j.so"]


def test_explicit_special_file_is_an_error_not_a_hang(tmp_path):
    os.mkfifo(tmp_path / "pipe.so")
    with pytest.raises(FatbinError, match=r"pipe\.so: not a regular file"):
        scan_file(tmp_path / "pipe.so")


def test_explicit_file_is_scanned_whatever_its_name(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello\n")
    assert list(iter_candidate_files([path])) == [str(path)]
    assert scan_file(path) == EMPTY


# Hand-made hostile inputs (no compiler could emit them): the header caps must end the walk quickly.
CONTAINER = struct.Struct("<IHHQ")


@pytest.mark.timeout(60)
def test_a_million_empty_containers_is_refused(tmp_path):
    path = tmp_path / "hostile.fatbin"
    path.write_bytes(CONTAINER.pack(0xBA55ED50, 1, 16, 0) * 1000001)
    with pytest.raises(FatbinError, match="more than 1000000 fatbin headers"):
        scan_file(path)


@pytest.mark.timeout(60)
def test_a_container_of_minimal_entries_is_refused(tmp_path):
    entry = struct.pack("<HHIQ", 99, 0x0101, 48, 0).ljust(48, b"\0")  # unknown kind, empty payload
    path = tmp_path / "hostile.fatbin"
    path.write_bytes(CONTAINER.pack(0xBA55ED50, 1, 16, 48 * 1000001) + entry * 1000001)
    with pytest.raises(FatbinError, match="more than 1000000 fatbin headers"):
        scan_file(path)
    path.write_bytes(CONTAINER.pack(0xBA55ED50, 1, 16, 48 * 1000) + entry * 1000)
    assert scan_file(path) == EMPTY  # entries of a kind that is not code are skipped, not errors


# ELF headers that cannot hold device code, or are cut short (the fuzz test cuts real fixtures).
ELF64_LE = b"\x7fELF\x02\x01\x01" + b"\0" * 57


@pytest.mark.parametrize("name", ["libcut.so", "kernel.cubin", "kernel.o"])
@pytest.mark.parametrize("size", [1, 3, 4, 20, 63])
def test_elf_cut_inside_its_header_is_truncated(tmp_path, name, size):
    path = tmp_path / name
    path.write_bytes(ELF64_LE[:size])
    with pytest.raises(FatbinError, match=rf"{name}: truncated ELF header \({size} of 64 bytes\)"):
        scan_file(path)


@pytest.mark.parametrize("ident", [b"\x7fELF\x01\x01", b"\x7fELF\x02\x02"], ids=["elf32", "big-endian"])
def test_elf_that_is_not_64_bit_little_endian(tmp_path, ident):
    library = tmp_path / "libarm32.so"
    library.write_bytes(ident + b"\0" * 58)
    assert scan_file(library) == EMPTY  # a host library of another ABI: CUDA has no device code for it
    cubin = tmp_path / "kernel.cubin"
    cubin.write_bytes(ident + b"\0" * 58)
    with pytest.raises(FatbinError, match=r"not a cubin or fatbin \(a 32-bit or big-endian ELF; expected"):
        scan_file(cubin)
