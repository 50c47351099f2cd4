"""The scanner on hand-built fatbin containers, ELF libraries and raw cubins (no nvcc needed).

Every entry kind and flag combination, container padding and every corruption the scanner names; the
``__nv_relfatbin`` fallback; raw cubins of both ELF ABIs with the ``a``/``f`` markers nvcc 13 writes.
The byte layout is the one in module_utils/cuda_fatbin.py's docstring (and the shared upstream facts);
tests/integration/test_cuda_fatbin_fixtures.py checks the same scanner on what nvcc really emits.
"""

from __future__ import annotations

import struct

import pytest
from ansible.module_utils import cuda_fatbin
from ansible.module_utils.cuda_fatbin import DeviceCode, FatbinError, scan_file

MAGIC = 0xBA55ED50
A, F = 0x100000, 0x200000
ZSTD, LZ4, DEBUG = 0x8000, 0x2000, 0x2
EM_X86_64, EM_CUDA = 62, 190
SHT_PROGBITS, SHT_NOTE, SHT_NOBITS, SHT_STRTAB, SHT_COMPAT = 1, 7, 8, 3, 0x70000086


def entry(kind: int, sm: int, flags: int = 0, payload: bytes = b"code", header_size: int = 64) -> bytes:
    head = bytearray(max(header_size, 48))
    struct.pack_into("<HHIQ", head, 0, kind, 0x0101, header_size, len(payload))
    struct.pack_into("<I", head, 28, sm)
    struct.pack_into("<Q", head, 40, flags)
    return bytes(head[:header_size]) + payload


def container(*entries: bytes, version: int = 1, header_size: int = 16, declared: int | None = None) -> bytes:
    body = b"".join(entries)
    head = struct.pack("<IHHQ", MAGIC, version, header_size, len(body) if declared is None else declared)
    return head.ljust(header_size, b"\0") + body


def elf(sections: list[tuple[bytes, int, bytes]], *, machine: int = EM_X86_64, flags: int = 0, abi: int = 0,
        shentsize: int = 64, extended: bool = False) -> bytes:
    """An ELF64 LE file with the given (name, type, data) sections plus .shstrtab, headers at the end."""
    names = b"\0" + b"".join(name + b"\0" for name, _, _ in sections) + b".shstrtab\0"
    body, headers, offset, name_at = b"", [b"\0" * shentsize], 64, 1
    for name, sh_type, data in sections:
        headers.append(struct.pack("<IIQQQQIIQQ", name_at, sh_type, 0, 0, offset, len(data), 0, 0, 1, 0)
                       .ljust(shentsize, b"\0"))
        body, offset, name_at = body + data, offset + len(data), name_at + len(name) + 1
    headers.append(struct.pack("<IIQQQQIIQQ", name_at, SHT_STRTAB, 0, 0, offset, len(names), 0, 0, 1, 0)
                   .ljust(shentsize, b"\0"))
    body += names
    shoff, shnum, shstrndx = 64 + len(body), len(headers), len(headers) - 1
    if extended:  # e_shnum 0 and e_shstrndx SHN_XINDEX: the real values sit in section 0
        zero = struct.pack("<IIQQQQIIQQ", 0, 0, 0, 0, 0, shnum, shstrndx, 0, 0, 0)
        headers[0] = zero.ljust(shentsize, b"\0")
        shnum, shstrndx = 0, 0xFFFF
    ident = b"\x7fELF\x02\x01\x01\x33" + bytes([abi])
    header = struct.pack("<16sHHIQQQIHHHHHH", ident.ljust(16, b"\0"), 1, machine, 1, 0, 0, shoff, flags,
                         64, 0, 0, shentsize, shnum, shstrndx)
    return header + body + b"".join(headers)


def scan(tmp_path, data: bytes, name: str = "libk.so") -> DeviceCode:
    path = tmp_path / name
    path.write_bytes(data)
    return scan_file(path)


# Entry kinds and flags --------------------------------------------------------------------------------

@pytest.mark.parametrize(("kind", "flags", "expected"), [
    (2, 0, DeviceCode(["sm_120"], [], [])),
    (2, A, DeviceCode(["sm_120a"], [], [])),
    (2, F, DeviceCode(["sm_120f"], [], [])),
    (1, 0, DeviceCode([], ["compute_120"], [])),
    (1, A, DeviceCode([], ["compute_120a"], [])),
    (1, F, DeviceCode([], ["compute_120f"], [])),
    (8, 0, DeviceCode([], [], ["lto_120"])),
    (8, A, DeviceCode([], [], ["lto_120a"])),
    (8, F, DeviceCode([], [], ["lto_120f"])),
    # compression and debug flags change nothing about the arch
    (2, ZSTD | A, DeviceCode(["sm_120a"], [], [])),
    (2, LZ4 | F, DeviceCode(["sm_120f"], [], [])),
    (1, DEBUG | ZSTD, DeviceCode([], ["compute_120"], [])),
    (2, DEBUG | LZ4 | A, DeviceCode(["sm_120a"], [], [])),
    # kinds that are not code we rate (e.g. 4, 16) are skipped, whatever their flags
    (4, A, DeviceCode([], [], [])),
    (16, 0, DeviceCode([], [], [])),
    (0, 0, DeviceCode([], [], [])),
], ids=lambda value: hex(value) if isinstance(value, int) else None)
def test_every_entry_kind_and_flag(tmp_path, kind, flags, expected):
    assert scan(tmp_path, container(entry(kind, 120, flags)), "k.fatbin") == expected


def test_arch_specific_and_family_together_is_corrupt(tmp_path):
    with pytest.raises(FatbinError, match=r"k\.fatbin: corrupt fatbin file: entry at offset 0x10 is flagged "
                                          r"both arch-specific and family$"):
        scan(tmp_path, container(entry(2, 100, A | F)), "k.fatbin")


def test_several_entries_and_containers_sorted_and_unique(tmp_path):
    first = container(entry(2, 90), entry(2, 90, A), entry(1, 90), entry(2, 100, F, header_size=80),
                      entry(8, 90))
    second = container(entry(2, 80, payload=b"x" * 13), entry(2, 90), entry(1, 120, F), entry(2, 120, A),
                       entry(2, 86))
    assert scan(tmp_path, first + second, "k.fatbin") == DeviceCode(
        ["sm_80", "sm_86", "sm_90", "sm_90a", "sm_100f", "sm_120a"], ["compute_90", "compute_120f"],
        ["lto_90"])


def test_zero_padding_between_and_after_containers_is_skipped(tmp_path):
    data = container(entry(2, 80)) + b"\0" * 7 + container(entry(2, 90), header_size=24) + b"\0" * 9
    assert scan(tmp_path, data, "k.fatbin") == DeviceCode(["sm_80", "sm_90"], [], [])


@pytest.mark.parametrize("sm", [10, 999])
def test_sm_numbers_at_the_limits(tmp_path, sm):
    assert scan(tmp_path, container(entry(2, sm)), "k.fatbin").sass == [f"sm_{sm}"]


@pytest.mark.parametrize("sm", [0, 9, 1000])
def test_sm_number_out_of_range_is_corrupt(tmp_path, sm):
    with pytest.raises(FatbinError, match=rf"corrupt: SM number {sm} in fatbin entry at offset 0x10 in "
                                          r"fatbin file$"):
        scan(tmp_path, container(entry(1, sm)), "k.fatbin")


# Corrupt containers and entries ----------------------------------------------------------------------

@pytest.mark.parametrize(("data", "message"), [
    (container(entry(2, 90), version=2),
     r"unsupported fatbin container version 2 at offset 0x0 in fatbin file$"),
    (container(entry(2, 90), header_size=15), r"corrupt fatbin file: fatbin header size 15 at offset 0x0$"),
    (container(entry(2, 90), header_size=4097),
     r"corrupt fatbin file: fatbin header size 4097 at offset 0x0$"),
    (container(entry(2, 90), declared=69),
     r"truncated fatbin file: fatbin container at offset 0x0 declares 69 bytes, only 68 remain$"),
    (container(entry(2, 90, header_size=47)), r"corrupt fatbin file: fatbin entry at offset 0x10 has header "
                                                r"size 47$"),
    (container(entry(2, 90)) + b"junk", r"corrupt fatbin file: no fatbin container header at offset 0x54$"),
    (container(entry(2, 90)) + b"\0\0" + b"junk",
     r"corrupt fatbin file: no fatbin container header at offset 0x56$"),
    (container(entry(2, 90)) + struct.pack("<IH", MAGIC, 1), r"truncated or corrupt: fatbin header in fatbin "
                                                              r"file at offset 0x54 runs past 0x5a$"),
    (container(entry(2, 90)[:12], declared=12),
     r"truncated or corrupt: fatbin entry header in fatbin file at offset 0x18 runs past 0x1c$"),
], ids=["version", "header-small", "header-large", "body-overrun", "entry-header-small", "garbage-after",
        "garbage-after-padding", "cut-container-header", "cut-entry-header"])
def test_corrupt_containers_name_the_problem(tmp_path, data, message):
    with pytest.raises(FatbinError, match=r"k\.fatbin: " + message):
        scan(tmp_path, data, "k.fatbin")


def test_entry_that_overruns_its_container(tmp_path):
    data = container(entry(2, 90, payload=b"x" * 8), declared=64 + 7) + b"x"
    with pytest.raises(FatbinError, match=r"truncated or corrupt fatbin file: fatbin entry at offset 0x10 "
                                          r"\(header 64 \+ payload 8 bytes\) overruns its container "
                                          r"ending at 0x57$"):
        scan(tmp_path, data, "k.fatbin")


def test_entry_exactly_filling_its_container_and_the_file(tmp_path):
    assert scan(tmp_path, container(entry(2, 90, payload=b"")), "k.fatbin").sass == ["sm_90"]


def test_header_cap_counts_containers_and_entries(tmp_path, monkeypatch):
    monkeypatch.setattr(cuda_fatbin, "MAX_HEADERS", 3)
    assert scan(tmp_path, container(entry(2, 80), entry(2, 90)), "k.fatbin").sass == ["sm_80", "sm_90"]
    with pytest.raises(FatbinError, match=r"corrupt fatbin file: more than 3 fatbin headers$"):
        scan(tmp_path, container(entry(2, 80), entry(2, 90)) + container(), "k.fatbin")


# ELF libraries: which section is read ----------------------------------------------------------------

def test_nv_fatbin_section_of_a_library(tmp_path):
    library = elf([(b".text", SHT_PROGBITS, b"\x90" * 5), (b".nv_fatbin", SHT_PROGBITS,
                                                             container(entry(2, 90, A)) + b"\0" * 8)])
    assert scan(tmp_path, library) == DeviceCode(["sm_90a"], [], [])


def test_relfatbin_is_read_only_without_nv_fatbin(tmp_path):
    rel = (b"__nv_relfatbin", SHT_PROGBITS, container(entry(2, 80), entry(8, 80)))
    assert scan(tmp_path, elf([rel]), "k.o") == DeviceCode(["sm_80"], [], ["lto_80"])
    fat = (b".nv_fatbin", SHT_PROGBITS, container(entry(2, 100, F)))
    assert scan(tmp_path, elf([rel, fat]), "k.o") == DeviceCode(["sm_100f"], [], [])


def test_every_nv_fatbin_section_is_read_and_nobits_ones_skipped(tmp_path):
    sections = [(b".nv_fatbin", SHT_PROGBITS, container(entry(2, 80))),
                (b".nv_fatbin", SHT_NOBITS, b"garbage that is not in the file"),
                (b".nv_fatbin", SHT_PROGBITS, container(entry(1, 90)))]
    assert scan(tmp_path, elf(sections)) == DeviceCode(["sm_80"], ["compute_90"], [])
    rel_only_nobits = [(b"__nv_relfatbin", SHT_NOBITS, b"garbage"),
                       (b"__nv_relfatbin", SHT_PROGBITS, container(entry(2, 86)))]
    assert scan(tmp_path, elf(rel_only_nobits)) == DeviceCode(["sm_86"], [], [])


def test_similar_section_names_are_not_fatbins(tmp_path):
    sections = [(b".nv_fatbin2", SHT_PROGBITS, container(entry(2, 80))),
                (b".nv_fatbi", SHT_PROGBITS, container(entry(2, 86)))]
    assert scan(tmp_path, elf(sections)) == DeviceCode([], [], [])


def test_fatbin_section_errors_name_the_section(tmp_path):
    library = elf([(b".nv_fatbin", SHT_PROGBITS, container(entry(2, 90), version=3))])
    with pytest.raises(FatbinError, match=r"unsupported fatbin container version 3 at offset 0x40 in section "
                                          r"\.nv_fatbin$"):
        scan(tmp_path, library)


def test_fatbin_section_past_the_end_of_the_file(tmp_path):
    library = bytearray(elf([(b"__nv_relfatbin", SHT_PROGBITS, container(entry(2, 90)))]))
    shoff = struct.unpack_from("<Q", library, 40)[0]
    struct.pack_into("<Q", library, shoff + 64 + 32, 10**6)  # section 1's sh_size
    with pytest.raises(FatbinError, match=r"truncated: section __nv_relfatbin \(offset 0x40, 1000000 bytes\) "
                                          r"runs past the end of the file"):
        scan(tmp_path, bytes(library))


def test_extended_section_numbering(tmp_path):
    library = elf([(b".nv_fatbin", SHT_PROGBITS, container(entry(2, 120, A)))], extended=True)
    assert scan(tmp_path, library) == DeviceCode(["sm_120a"], [], [])


def test_larger_section_header_entries(tmp_path):
    library = elf([(b".nv_fatbin", SHT_PROGBITS, container(entry(2, 120, F)))], shentsize=80)
    assert scan(tmp_path, library) == DeviceCode(["sm_120f"], [], [])


@pytest.mark.parametrize(("patch", "message"), [
    ({"shentsize": 63}, r"corrupt ELF: section header size 63 < 64$"),
    ({"shstrndx": 3}, r"corrupt ELF: section name table index 3 >= section count 3$"),
    ({"shnum": 2000000}, r"corrupt ELF: 2000000 sections$"),
    ({"shoff": 10**6}, r"truncated or corrupt: ELF section header table at offset 0xf4240 runs past"),
    ({"shnum": 40}, r"truncated: ELF section header table \(offset 0x\w+, 2560 bytes\) runs past the end"),
])
def test_corrupt_section_table(tmp_path, patch, message):
    library = bytearray(elf([(b".nv_fatbin", SHT_PROGBITS, container(entry(2, 90)))]))
    fields = {"shoff": ("<Q", 40), "shentsize": ("<H", 58), "shnum": ("<I", 60), "shstrndx": ("<H", 62)}
    for field, value in patch.items():
        fmt, at = fields[field]
        if field == "shnum" and value > 0xFFFF:  # only reachable through extended numbering
            struct.pack_into("<H", library, 60, 0)
            struct.pack_into("<Q", library, struct.unpack_from("<Q", library, 40)[0] + 32, value)
        else:
            struct.pack_into("<H" if field == "shnum" else fmt, library, at, value)
    with pytest.raises(FatbinError, match=r"libk\.so: " + message):
        scan(tmp_path, bytes(library))


def test_section_name_outside_the_name_table(tmp_path):
    library = bytearray(elf([(b".nv_fatbin", SHT_PROGBITS, container(entry(2, 90)))]))
    shoff = struct.unpack_from("<Q", library, 40)[0]
    struct.pack_into("<I", library, shoff + 64, 500)  # section 1's sh_name
    with pytest.raises(FatbinError, match=r"corrupt ELF: section name at 500 outside the name table$"):
        scan(tmp_path, bytes(library))


def test_no_section_table_means_no_device_code(tmp_path):
    library = bytearray(elf([(b".nv_fatbin", SHT_PROGBITS, container(entry(2, 90)))]))
    struct.pack_into("<Q", library, 40, 0)
    assert scan(tmp_path, bytes(library)) == DeviceCode([], [], [])


def test_program_header_table_past_the_end(tmp_path):
    library = bytearray(elf([]))
    struct.pack_into("<Q", library, 32, len(library) - 8)  # e_phoff
    struct.pack_into("<HH", library, 54, 56, 1)  # e_phentsize, e_phnum
    with pytest.raises(FatbinError, match=r"truncated: ELF program header table \(offset 0x\w+, 56 bytes\)"):
        scan(tmp_path, bytes(library))
    struct.pack_into("<HH", library, 54, 56, 0)  # no program headers: the offset is not checked
    assert scan(tmp_path, bytes(library)) == DeviceCode([], [], [])


# Raw cubins ------------------------------------------------------------------------------------------

def compat(*records: tuple[int, int, bytes]) -> bytes:
    return b"".join(struct.pack("<BB", fmt, attribute) + value for fmt, attribute, value in records)


def tkinfo(arch: bytes) -> bytes:
    return b"\x04\0\0\0" + b"ptxas -O3 " + arch + b" -lineinfo\0"


@pytest.mark.parametrize(("abi", "flags", "sections", "expected"), [
    # CUDA >= 12.8 (ELF ABI 8): SM in bits 8-15; `a` from .nv.compat attribute 9, `f` from tkinfo
    (8, 120 << 8, [], "sm_120"),
    (8, 120 << 8 | 0x8, [], "sm_120a"),
    (9, 100 << 8, [], "sm_100"),
    (8, 120 << 8, [(b".nv.compat", SHT_COMPAT, compat((2, 9, b"\x01\0")))], "sm_120a"),
    (8, 120 << 8, [(b".nv.compat", SHT_COMPAT, compat((2, 9, b"\x00\0")))], "sm_120"),
    (8, 120 << 8, [(b".nv.compat", SHT_COMPAT, compat((4, 7, b"\x02\0ab"), (1, 3, b"\0\0"),
                                                       (2, 9, b"\x01\0")))], "sm_120a"),
    (8, 120 << 8, [(b".nv.compat", SHT_COMPAT, compat((3, 9, b"\x01\0")))], "sm_120"),  # not format 2
    (8, 120 << 8, [(b".nv.compat", SHT_COMPAT, compat((2, 8, b"\x01\0")))], "sm_120"),  # not attribute 9
    (8, 120 << 8, [(b".nv.compat", SHT_COMPAT, b"\x02\x09\x01")], "sm_120"),  # record cut short
    (8, 120 << 8, [(b".nv.compat", SHT_PROGBITS, compat((2, 9, b"\x01\0")))], "sm_120"),  # not the type
    (8, 120 << 8, [(b".note.nv.tkinfo", SHT_NOTE, tkinfo(b"-arch sm_120f"))], "sm_120f"),
    (8, 120 << 8, [(b".note.nv.tkinfo", SHT_NOTE, tkinfo(b"-arch=sm_120a"))], "sm_120a"),
    (8, 120 << 8, [(b".note.nv.tkinfo", SHT_NOTE, tkinfo(b"-arch sm_120"))], "sm_120"),
    (8, 100 << 8, [(b".note.nv.tkinfo", SHT_NOTE, tkinfo(b"-arch sm_120f"))], "sm_100"),  # another SM
    (8, 120 << 8, [(b".note.nv.tkinfo", SHT_NOTE, tkinfo(b"-arch sm_120fx"))], "sm_120"),
    (8, 120 << 8, [(b".note.nv.tkinfo", SHT_PROGBITS, tkinfo(b"-arch sm_120f"))], "sm_120"),  # not a note
    (8, 120 << 8, [(b".note.other", SHT_NOTE, tkinfo(b"-arch sm_120f"))], "sm_120"),
    (8, 120 << 8, [(b".nv.compat", SHT_COMPAT, compat((2, 9, b"\x01\0"))),
                   (b".note.nv.tkinfo", SHT_NOTE, tkinfo(b"-arch sm_120"))], "sm_120a"),
    (8, 120 << 8 | 0x8, [(b".note.nv.tkinfo", SHT_NOTE, tkinfo(b"-arch sm_120"))], "sm_120a"),
    # older ABIs: SM in bits 0-7, `a` in bit 0x800
    (7, 90, [], "sm_90"),
    (7, 90 | 0x800, [], "sm_90a"),
    (7, 90 | 0x8, [], "sm_90"),
    (0, 86 | 100 << 8, [], "sm_86"),
], ids=str)
def test_raw_cubin_arch_and_suffix(tmp_path, abi, flags, sections, expected):
    cubin = elf(sections, machine=EM_CUDA, flags=flags, abi=abi)
    assert scan(tmp_path, cubin, "k.cubin") == DeviceCode([expected], [], [])


def test_only_the_start_of_a_long_note_is_searched(tmp_path):
    note = b"\0" * 4096 + b"-arch sm_120f"
    cubin = elf([(b".note.nv.tkinfo", SHT_NOTE, note)], machine=EM_CUDA, flags=120 << 8, abi=8)
    assert scan(tmp_path, cubin, "k.cubin").sass == ["sm_120"]
    note = b"\0" * 4070 + b"-arch sm_120f\0"
    cubin = elf([(b".note.nv.tkinfo", SHT_NOTE, note)], machine=EM_CUDA, flags=120 << 8, abi=8)
    assert scan(tmp_path, cubin, "k.cubin").sass == ["sm_120f"]


def test_cubin_with_an_impossible_sm_is_corrupt(tmp_path):
    with pytest.raises(FatbinError, match=r"k\.cubin: corrupt: SM number 5 in cubin e_flags$"):
        scan(tmp_path, elf([], machine=EM_CUDA, flags=5 << 8, abi=8), "k.cubin")


@pytest.mark.parametrize("name", [b".note.nv.tkinfo", b".nv.compat"])
def test_cubin_note_past_the_end_of_the_file(tmp_path, name):
    sh_type = SHT_NOTE if name == b".note.nv.tkinfo" else SHT_COMPAT
    cubin = bytearray(elf([(name, sh_type, b"\0" * 8)], machine=EM_CUDA, flags=90 << 8, abi=8))
    shoff = struct.unpack_from("<Q", cubin, 40)[0]
    struct.pack_into("<Q", cubin, shoff + 64 + 32, 10**6)
    with pytest.raises(FatbinError,
                       match=rf"truncated: section {name.decode()} \(offset 0x40, 1000000 bytes\)"):
        scan(tmp_path, bytes(cubin), "k.cubin")
