"""Which GPU architectures a binary carries device code for, read from headers only.

Reads ELF shared objects and object files (the ``.nv_fatbin`` section, else ``__nv_relfatbin`` for
relocatable device code, the same choice cuobjdump makes by default), raw fatbin files and raw cubins
(ELF with e_machine EM_CUDA). Files are mmap'ed and only container/entry headers are touched: nothing is
decompressed, so a 500 MB library costs a few page faults, not its size in memory.

Fatbin layout (little endian; see the shared upstream facts):
- container: u32 magic 0xBA55ED50, u16 version 1, u16 header size, u64 size of the entries that follow;
  containers sit back to back (libtorch_cuda.so holds hundreds), possibly with zero padding between.
- entry: u16 kind at 0 (1 PTX, 2 cubin, 8 LTO-IR), u32 header size at 4, u64 payload size at 8, u32 SM
  number at 28, u64 flags at 40 (0x100000 arch-specific ``a``, 0x200000 family ``f``).

The ``a``/``f`` suffix comes from the entry flags: CUDA 13 cubins do not carry it in e_flags. A raw cubin
has no entry header, so there it comes from what nvcc 13 actually writes (found by experiment): the
``.nv.compat`` section's attribute 9 is 1 for ``a`` cubins, and only the ptxas/nvlink command line kept
in ``.note.nv.tkinfo`` ("-arch sm_120f") tells ``f`` from plain; older ABIs set e_flags bits instead.

Every offset and size read from the file is checked before use and every loop advances, so a truncated
or corrupted file raises FatbinError (naming the file and the problem) in bounded time.
Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import contextlib
import mmap
import os
import re
import stat
import struct
from collections import namedtuple

from ansible.module_utils.cuda_arch import Arch, format_arch, sorted_archs

DeviceCode = namedtuple("DeviceCode", ["sass", "ptx", "lto"])
"""Per file: sorted unique arch names, e.g. sass ["sm_90a", "sm_120f"], ptx ["compute_90"], lto ["lto_90"]."""

FATBIN_MAGIC = 0xBA55ED50
FATBIN_MAGIC_BYTES = struct.pack("<I", FATBIN_MAGIC)
ELF_MAGIC = b"\x7fELF"
ENTRY_KINDS = {1: "compute", 2: "sm", 8: "lto"}  # PTX, cubin, LTO-IR; other kinds are not code we rate
FLAG_ARCH_SPECIFIC = 0x100000
FLAG_FAMILY = 0x200000
EM_CUDA = 190
SHT_NOTE = 7
SHT_NOBITS = 8
SHT_CUDA_COMPAT = 0x70000086
CUDA_ELF_ABI_V2 = 8  # CUDA >= 12.8 cubins: SM in e_flags bits 8-15, `a` was bit 0x8 (nvcc 13 leaves it 0)
COMPAT_ATTR_ARCH_SPECIFIC = 9

# Caps that keep a hostile or corrupted file from costing unbounded time; real files are far below them
# (libtorch_cuda.so 2.14.1: 40 sections, 475 containers, 2975 entries).
MAX_SECTIONS = 1000000
MAX_HEADERS = 1000000  # containers + entries per file; the largest seen: libcublasLt.so.13, 5737 entries
MAX_CONTAINER_HEADER = 4096
MIN_ENTRY_HEADER = 48  # we read up to the flags at offset 40..48
MAX_NOTE_BYTES = 4096
# Linux maps a whole (large) page-cache folio on each fault, so reading one header per entry of a warm
# 500 MB library would map hundreds of MB into our RSS; dropping the mappings behind the walk every
# RELEASE_STRIDE bytes keeps the peak small (the pages stay cached; nothing is re-read from disk).
RELEASE_STRIDE = 16 << 20
_MADV_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)

CANDIDATE_NAME = re.compile(r"\.(so(\.\d+)*|o|cubin|fatbin)$")
_NONZERO = re.compile(rb"[^\x00]")
_TKINFO_ARCH = re.compile(rb"-arch[ =]+sm_(\d{2,3})([af]?)(?![0-9A-Za-z])")
_ELF64 = struct.Struct("<16sHHIQQQIHHHHHH")
_SHDR = struct.Struct("<IIQQQQIIQQ")
_CONTAINER = struct.Struct("<IHHQ")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")

Section = namedtuple("Section", ["name", "type", "offset", "size"])


class FatbinError(Exception):
    """The only error the scanner raises: unreadable, truncated or corrupt file (message names it)."""


class _Image:
    """A read-only mapped file with bounds-checked reads."""

    def __init__(self, path, data):
        self.path = path
        self.data = data
        self.size = len(data)
        self.released = 0

    def moved_to(self, offset):
        """The walk reached ``offset``: unmap what lies behind it, one stride at a time."""
        if offset - self.released >= RELEASE_STRIDE and _MADV_DONTNEED is not None:
            start = self.released - self.released % mmap.PAGESIZE
            with contextlib.suppress(OSError, ValueError):  # only a memory optimisation
                self.data.madvise(_MADV_DONTNEED, start, min(offset, self.size) - start)
            self.released = offset

    def fail(self, problem):
        raise FatbinError(f"{self.path}: {problem}")

    def unpack(self, fmt, offset, what, limit=None):
        limit = self.size if limit is None else limit
        if offset < 0 or offset + fmt.size > limit:
            self.fail(f"truncated or corrupt: {what} at offset {offset:#x} runs past {limit:#x}")
        return fmt.unpack_from(self.data, offset)

    def check_span(self, offset, size, what):
        if offset + size > self.size:
            self.fail(f"truncated: {what} (offset {offset:#x}, {size} bytes) runs past the end of "
                      f"the file ({self.size} bytes)")


class _Collector:
    def __init__(self, image):
        self.image = image
        self.found = {"sm": set(), "compute": set(), "lto": set()}
        self.headers = 0

    def count_header(self, where):
        self.headers += 1
        if self.headers > MAX_HEADERS:
            self.image.fail(f"corrupt {where}: more than {MAX_HEADERS} fatbin headers")

    def add(self, kind, sm, suffix, where):
        if not 10 <= sm <= 999:
            self.image.fail(f"corrupt: SM number {sm} in {where}")
        self.found[kind].add(format_arch(Arch(sm // 10, sm % 10, suffix), kind))

    def result(self):
        return DeviceCode(*(sorted_archs(self.found[kind]) for kind in ("sm", "compute", "lto")))


def scan_file(path):
    """DeviceCode of one file; empty lists for a file without device code. Raises FatbinError."""
    path = os.fspath(path)
    try:
        info = os.stat(path)
        if not stat.S_ISREG(info.st_mode):
            raise FatbinError(f"{path}: not a regular file")
        with open(path, "rb") as handle:
            if info.st_size == 0:
                return _not_device_code(path, b"")
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _scan_image(_Image(path, data))
    except (OSError, ValueError) as exc:  # ValueError: mmap of a file emptied meanwhile
        reason = getattr(exc, "strerror", None) or str(exc)
        raise FatbinError(f"{path}: cannot read: {reason}") from None


def _scan_image(image):
    head = image.data[:4]
    collector = _Collector(image)
    if head == FATBIN_MAGIC_BYTES:
        _scan_fatbin(image, 0, image.size, collector, "fatbin file")
        return collector.result()
    if image.size < _ELF64.size and ELF_MAGIC.startswith(head):
        # A cut-off ELF must not pass for a file without device code (a 1-3 byte file that starts
        # like the magic is no linker script or archive either).
        image.fail(f"truncated ELF header ({image.size} of {_ELF64.size} bytes)")
    if head != ELF_MAGIC:
        return _not_device_code(image.path, head)
    if image.data[4:6] != b"\x02\x01":  # CUDA device code exists only for ELF64 little endian
        return _not_device_code(image.path, head, "a 32-bit or big-endian ELF")
    header = image.unpack(_ELF64, 0, "ELF header")
    machine, flags = header[2], header[7]
    phoff, phentsize, phnum = header[5], header[9], header[10]
    if phoff and phnum:  # cubins keep it at the end: a cut there leaves the sections intact
        image.check_span(phoff, phnum * phentsize, "ELF program header table")
    sections = _sections(image, header)
    if machine == EM_CUDA:
        collector.add("sm", *_cubin_arch(image, flags, sections), where="cubin e_flags")
        return collector.result()
    fatbins = [s for s in sections if s.name == b".nv_fatbin" and s.type != SHT_NOBITS]
    if not fatbins:  # relocatable device code only (-rdc objects): what cuobjdump lists too
        fatbins = [s for s in sections if s.name == b"__nv_relfatbin" and s.type != SHT_NOBITS]
    for section in fatbins:
        name = section.name.decode()
        image.check_span(section.offset, section.size, f"section {name}")
        _scan_fatbin(image, section.offset, section.offset + section.size, collector, f"section {name}")
    return collector.result()


def _not_device_code(path, head, what=None):
    # A .so may be a linker script and a .o a non-ELF archive member; a .cubin/.fatbin must be binary.
    if path.endswith((".cubin", ".fatbin")):
        what = what or f"starts with {bytes(head)!r}"
        raise FatbinError(f"{path}: not a cubin or fatbin ({what}; expected a 64-bit little-endian ELF "
                          "or a fatbin header)")
    return DeviceCode([], [], [])


def _sections(image, header):
    shoff, shentsize, shnum, shstrndx = header[6], header[11], header[12], header[13]
    if shoff == 0:
        return []  # no section table (sstrip'ed): device code cannot be located
    if shentsize < _SHDR.size:
        image.fail(f"corrupt ELF: section header size {shentsize} < {_SHDR.size}")
    first = image.unpack(_SHDR, shoff, "ELF section header table")
    if shnum == 0:  # extended numbering: count in section 0's sh_size, string index in its sh_link
        shnum = first[5]
    if shstrndx == 0xFFFF:
        shstrndx = first[6]
    if shnum > MAX_SECTIONS:
        image.fail(f"corrupt ELF: {shnum} sections")
    image.check_span(shoff, shnum * shentsize, "ELF section header table")
    if shstrndx >= shnum:
        image.fail(f"corrupt ELF: section name table index {shstrndx} >= section count {shnum}")
    raw = [_SHDR.unpack_from(image.data, shoff + index * shentsize) for index in range(shnum)]
    names_offset, names_size = raw[shstrndx][4], raw[shstrndx][5]
    image.check_span(names_offset, names_size, "ELF section name table")
    names_end = names_offset + names_size
    sections = []
    for sh_name, sh_type, _flags, _addr, offset, size, _link, _info, _align, _entsize in raw:
        start = names_offset + sh_name
        end = image.data.find(b"\0", start, names_end) if start < names_end else -1
        if end < 0:
            image.fail(f"corrupt ELF: section name at {sh_name} outside the name table")
        sections.append(Section(image.data[start:end], sh_type, offset, size))
    return sections


def _scan_fatbin(image, start, end, collector, where):
    """Walk back-to-back fatbin containers in [start, end)."""
    data, pos = image.data, start
    while pos < end:
        if data[pos:pos + 4] != FATBIN_MAGIC_BYTES:
            nonzero = _NONZERO.search(data, pos, end)
            if nonzero is None:
                return  # trailing alignment padding
            if nonzero.start() == pos or data[nonzero.start():nonzero.start() + 4] != FATBIN_MAGIC_BYTES:
                image.fail(f"corrupt {where}: no fatbin container header at offset "
                           f"{nonzero.start():#x}")
            pos = nonzero.start()
        collector.count_header(where)
        _magic, version, header_size, body_size = image.unpack(_CONTAINER, pos, f"fatbin header in "
                                                               f"{where}", end)
        if version != 1:
            image.fail(f"unsupported fatbin container version {version} at offset {pos:#x} in {where}")
        if not _CONTAINER.size <= header_size <= MAX_CONTAINER_HEADER:
            image.fail(f"corrupt {where}: fatbin header size {header_size} at offset {pos:#x}")
        body = pos + header_size
        if body + body_size > end:
            image.fail(f"truncated {where}: fatbin container at offset {pos:#x} declares {body_size} "
                       f"bytes, only {max(end - body, 0)} remain")
        _scan_entries(image, body, body + body_size, collector, where)
        pos = body + body_size


def _scan_entries(image, pos, end, collector, where):
    while pos < end:
        image.moved_to(pos)
        collector.count_header(where)
        what = f"fatbin entry header in {where}"
        kind = image.unpack(_U16, pos, what, end)[0]
        header_size = image.unpack(_U32, pos + 4, what, end)[0]
        payload_size = image.unpack(_U64, pos + 8, what, end)[0]
        if header_size < MIN_ENTRY_HEADER:
            image.fail(f"corrupt {where}: fatbin entry at offset {pos:#x} has header size {header_size}")
        if pos + header_size + payload_size > end:
            image.fail(f"truncated or corrupt {where}: fatbin entry at offset {pos:#x} (header "
                       f"{header_size} + payload {payload_size} bytes) overruns its container ending "
                       f"at {end:#x}")
        prefix = ENTRY_KINDS.get(kind)
        if prefix:
            sm = _U32.unpack_from(image.data, pos + 28)[0]
            flags = _U64.unpack_from(image.data, pos + 40)[0]
            if flags & FLAG_ARCH_SPECIFIC and flags & FLAG_FAMILY:
                image.fail(f"corrupt {where}: entry at offset {pos:#x} is flagged both arch-specific "
                           "and family")
            suffix = "a" if flags & FLAG_ARCH_SPECIFIC else "f" if flags & FLAG_FAMILY else ""
            collector.add(prefix, sm, suffix, f"fatbin entry at offset {pos:#x} in {where}")
        pos += header_size + payload_size


def _cubin_arch(image, flags, sections):
    """(SM number, suffix) of a raw cubin."""
    if image.data[8] >= CUDA_ELF_ABI_V2:
        sm, arch_specific = (flags >> 8) & 0xFF, bool(flags & 0x8)
    else:
        sm, arch_specific = flags & 0xFF, bool(flags & 0x800)
    family = False
    for section in sections:
        if section.type == SHT_CUDA_COMPAT:
            arch_specific = arch_specific or _compat_arch_specific(image, section)
        elif section.type == SHT_NOTE and section.name == b".note.nv.tkinfo":
            image.check_span(section.offset, section.size, "section .note.nv.tkinfo")
            note = image.data[section.offset:section.offset + min(section.size, MAX_NOTE_BYTES)]
            match = _TKINFO_ARCH.search(note)
            if match and int(match.group(1)) == sm:
                arch_specific = arch_specific or match.group(2) == b"a"
                family = match.group(2) == b"f"
    return sm, "a" if arch_specific else "f" if family else ""


def _compat_arch_specific(image, section):
    """Attribute records of .nv.compat: u8 format, u8 attribute, then a value (format 4: u16 size + bytes)."""
    image.check_span(section.offset, section.size, "section .nv.compat")
    pos, end = section.offset, section.offset + min(section.size, MAX_NOTE_BYTES)
    data = image.data
    while pos + 4 <= end:
        fmt, attribute = data[pos], data[pos + 1]
        if attribute == COMPAT_ATTR_ARCH_SPECIFIC and fmt == 2:
            return data[pos + 2] == 1
        pos += 4 + (_U16.unpack_from(data, pos + 2)[0] if fmt == 4 else 0)
    return False


def iter_candidate_files(paths):
    """Yield the files to scan: given files as they are, directories walked for *.so[.N], *.o, *.cubin,
    *.fatbin (sorted, symlinks to a file already yielded skipped). Raises FatbinError for a missing path."""
    seen = set()
    for given in paths:
        path = os.fspath(given)
        if not os.path.exists(path):
            raise FatbinError(f"{path}: no such file or directory")
        candidates = _walk(path) if os.path.isdir(path) else [path]
        for candidate in candidates:
            real = os.path.realpath(candidate)
            if real not in seen:
                seen.add(real)
                yield candidate


def _walk(top):
    def fail(exc):
        raise FatbinError(f"{exc.filename}: cannot list directory: {exc.strerror}")

    for root, dirs, files in os.walk(top, onerror=fail):
        dirs.sort()
        for name in sorted(files):
            full = os.path.join(root, name)
            if CANDIDATE_NAME.search(name) and os.path.isfile(full):
                yield full
