"""module_utils/cuda_fatbin.py: the mappings dropped behind the walk, entry headers cut inside their
container, the header cap inside a container, error messages in full, and the candidate walk's
de-duplication and listing errors.
"""

from __future__ import annotations

import mmap
import os
import struct
from typing import ClassVar

import pytest
from ansible.module_utils import cuda_fatbin
from ansible.module_utils.cuda_fatbin import FatbinError, iter_candidate_files, scan_file
from prereq import require
from test_cuda_fatbin_synthetic import MAGIC, SHT_PROGBITS, container, elf, entry, scan

PAGE = mmap.PAGESIZE


class RecordingMmap(mmap.mmap):
    """A real mapping that records its madvise calls (and can be told to fail them)."""

    calls: ClassVar[list] = []
    fail_with: ClassVar[Exception | None] = None

    def madvise(self, *args):
        RecordingMmap.calls.append(args)
        if RecordingMmap.fail_with is not None:
            raise RecordingMmap.fail_with
        return super().madvise(*args)


@pytest.fixture
def recorded(monkeypatch):
    require(cuda_fatbin._MADV_DONTNEED is not None, "mmap has no MADV_DONTNEED here (Linux has it)")
    monkeypatch.setattr(RecordingMmap, "calls", [])
    monkeypatch.setattr(RecordingMmap, "fail_with", None)
    monkeypatch.setattr(mmap, "mmap", RecordingMmap)
    monkeypatch.setattr(cuda_fatbin, "RELEASE_STRIDE", 3 * PAGE)
    return RecordingMmap


def pages_of_entries(count: int) -> bytes:
    """One container whose entries are one page each: entry k starts at 16 + k * PAGE."""
    return container(*(entry(2, 80 + k, payload=b"x" * (PAGE - 64)) for k in range(count)))


def test_the_mapping_behind_the_walk_is_dropped_stride_by_stride(tmp_path, recorded):
    assert scan(tmp_path, pages_of_entries(8), "k.fatbin").sass == [f"sm_{80 + k}" for k in range(8)]
    # dropped once 3 pages lie behind the walk (entry 3), then again exactly 3 pages later (entry 6),
    # from the page the last drop ended in, and never past the entry the walk is at
    assert recorded.calls == [(mmap.MADV_DONTNEED, 0, 16 + 3 * PAGE),
                              (mmap.MADV_DONTNEED, 3 * PAGE, 3 * PAGE + 16)]


def test_a_short_walk_drops_nothing(tmp_path, recorded):
    assert scan(tmp_path, pages_of_entries(3), "k.fatbin").sass == ["sm_80", "sm_81", "sm_82"]
    assert recorded.calls == []


@pytest.mark.parametrize("error", [OSError(11, "Resource temporarily unavailable"), ValueError("madvise")],
                         ids=["OSError", "ValueError"])
def test_a_failing_drop_is_only_a_lost_optimisation(tmp_path, recorded, error):
    recorded.fail_with = error
    assert scan(tmp_path, pages_of_entries(8), "k.fatbin").sass == [f"sm_{80 + k}" for k in range(8)]
    assert len(recorded.calls) == 2


@pytest.mark.parametrize(("cut", "message"), [
    (1, r"fatbin entry header in fatbin file at offset 0x10 runs past 0x11$"),  # its kind
    (6, r"fatbin entry header in fatbin file at offset 0x14 runs past 0x16$"),  # its header size
    (12, r"fatbin entry header in fatbin file at offset 0x18 runs past 0x1c$"),  # its payload size
])
def test_an_entry_header_cut_inside_its_container(tmp_path, cut, message):
    # the file goes on after the container (padding): the container's end is the limit, not the file's
    data = container(entry(2, 90)[:cut], declared=cut) + b"\0" * 128
    with pytest.raises(FatbinError, match=r"k\.fatbin: truncated or corrupt: " + message):
        scan(tmp_path, data, "k.fatbin")


def test_a_container_header_cut_at_the_end_of_its_section(tmp_path):
    # the section name table follows the section in the file: the section's end is the limit
    section = container(entry(2, 90)) + struct.pack("<IH", MAGIC, 1)
    with pytest.raises(FatbinError) as caught:
        scan(tmp_path, elf([(b".nv_fatbin", SHT_PROGBITS, section)]))
    assert str(caught.value) == (f"{tmp_path}/libk.so: truncated or corrupt: fatbin header in section "
                                 ".nv_fatbin at offset 0x94 runs past 0x9a")


def test_a_section_ends_where_the_next_fatbin_begins(tmp_path):
    # sections back to back: each walk stops at its own section's end, even when a container follows
    first = (b".nv_fatbin", SHT_PROGBITS, container(entry(2, 80)))
    second = container(entry(2, 90))
    assert scan(tmp_path, elf([first, (b".nv_fatbin", SHT_PROGBITS, second)])).sass == ["sm_80", "sm_90"]
    assert scan(tmp_path, elf([first, (b"__nv_relfatbin", SHT_PROGBITS, second)])).sass == ["sm_80"]


def test_the_largest_container_header_is_accepted(tmp_path):
    assert scan(tmp_path, container(entry(2, 90), header_size=4096), "k.fatbin").sass == ["sm_90"]


def test_a_container_header_larger_than_what_is_left(tmp_path):
    with pytest.raises(FatbinError) as caught:
        scan(tmp_path, container(header_size=64)[:40], "k.fatbin")
    assert str(caught.value) == (f"{tmp_path}/k.fatbin: truncated fatbin file: fatbin container at offset "
                                 "0x0 declares 0 bytes, only 0 remain")


def test_the_header_cap_reached_at_an_entry_names_where(tmp_path, monkeypatch):
    monkeypatch.setattr(cuda_fatbin, "MAX_HEADERS", 2)
    with pytest.raises(FatbinError) as caught:
        scan(tmp_path, container(entry(2, 80), entry(2, 90)), "k.fatbin")
    assert str(caught.value) == f"{tmp_path}/k.fatbin: corrupt fatbin file: more than 2 fatbin headers"


def test_not_a_cubin_message_in_full(tmp_path):
    path = tmp_path / "k.cubin"
    path.write_bytes(b"text")
    with pytest.raises(FatbinError) as caught:
        scan_file(path)
    assert str(caught.value) == (f"{path}: not a cubin or fatbin (starts with b'text'; expected a 64-bit "
                                 "little-endian ELF or a fatbin header)")


def test_a_file_reached_twice_is_yielded_once(tmp_path):
    (tmp_path / "libk.so.1").write_bytes(b"")
    (tmp_path / "libk.so").symlink_to("libk.so.1")
    assert list(iter_candidate_files([tmp_path])) == [str(tmp_path / "libk.so")]
    given = tmp_path / "libk.so.1"
    assert list(iter_candidate_files([given, given, tmp_path])) == [str(given)]


def test_a_directory_that_cannot_be_listed_is_an_error(tmp_path, monkeypatch):
    (tmp_path / "locked").mkdir()
    (tmp_path / "a.so").write_bytes(b"")
    locked = str(tmp_path / "locked")
    real_scandir = os.scandir

    def scandir(path="."):
        # STAND-IN for a directory this user may not read (the tests may run as root, who may read all)
        if os.fspath(path) == locked:
            raise PermissionError(13, "Permission denied", locked)
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(FatbinError) as caught:
        list(iter_candidate_files([tmp_path]))
    assert str(caught.value) == f"{locked}: cannot list directory: Permission denied"
