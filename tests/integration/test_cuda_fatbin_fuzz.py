"""Fuzz the scanner with truncated and mutated copies of the real fixtures.

Whatever the bytes, scan_file must either return a well-formed DeviceCode or raise FatbinError (always
FatbinError for a truncated ELF), and do it fast: each scan gets SCAN_CPU_SECONDS of this thread's CPU
time, the pytest timeout catches a hang outright. CPU time, not hypothesis's wall-clock deadline: on a
busy 2-core machine (the fleet's hosts beside) a case of a few milliseconds took 928 ms of wall time
(2026-12-06, a clean-clone CI run failed on it) while a pathological input would burn the CPU itself.
Mutations aim at the bytes the scanner reads (ELF header, section table, fatbin containers and entry
headers) as well as anywhere in the file.
"""

from __future__ import annotations

import struct
import time

import pytest
from ansible.module_utils.cuda_arch import parse_arch, sorted_archs
from ansible.module_utils.cuda_fatbin import DeviceCode, FatbinError, scan_file
from cudabuild import compiled_fixtures
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
cuda_fixtures = compiled_fixtures  # the session fixture, under the name the tests ask for

SOURCES = ["sm_120a.so", "multi.so", "compress_size.so", "debug_G.so", "ptx_only.so", "rdc_linked.so",
           "rdc_kernel.o", "lto.o", "mixed.fatbin", "sm_100f.cubin", "rdc_sm_100a.cubin"]
FATBIN_MAGIC = b"\x50\xed\x55\xba"
# Offsets, relative to an interesting position, of the fields the scanner reads there.
CONTAINER_AND_ENTRY_FIELDS = [0, 4, 6, 8, 16, 16 + 4, 16 + 8, 16 + 28, 16 + 40, 16 + 42]
ELF_HEADER_FIELDS = [4, 5, 8, 0x12, 0x28, 0x30, 0x3A, 0x3C, 0x3E]
FIELD_VALUES = st.one_of(st.sampled_from([0, 1, 2, 8, 15, 16, 47, 48, 0xFF, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF,
                                          2**63, 2**64 - 1]), st.integers(0, 2**64 - 1))
SCAN_CPU_SECONDS = 0.5
FUZZ = settings(max_examples=1500, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow])


class Inputs:
    def __init__(self, fixtures, scratch):
        self.data = {}
        self.hot = {}
        for name in SOURCES:
            self.add(name, fixtures[name][0].read_bytes())
        twice = fixtures["mixed.fatbin"][0].read_bytes()
        self.add("twice.fatbin", twice + b"\0" * 16 + twice)  # back-to-back containers with padding
        self.scratch = scratch

    def add(self, name, data):
        self.data[name] = data
        hot = [0]
        position = data.find(FATBIN_MAGIC)
        while position >= 0:
            hot.append(position)
            position = data.find(FATBIN_MAGIC, position + 1)
        if data[:4] == b"\x7fELF":
            shoff = struct.unpack_from("<Q", data, 0x28)[0]
            hot.extend(range(shoff, min(shoff + 64 * 8, len(data)), 16))  # first section headers
        self.hot[name] = hot

    def scan(self, name, data, must_fail=False):
        path = self.scratch / name
        path.write_bytes(bytes(data))
        start = time.thread_time()
        try:
            code = scan_file(path)
        except FatbinError as exc:
            code = str(exc)
        spent = time.thread_time() - start
        assert spent < SCAN_CPU_SECONDS, f"{len(data)} bytes of {name}: the scan took {spent:.3f} CPU-s"
        if isinstance(code, str):
            assert code.startswith(f"{path}: ")  # the error names the file
            return
        assert not must_fail, f"{len(data)} bytes of {name} gave {code}, not FatbinError"
        assert isinstance(code, DeviceCode)
        for names, kind in zip(code, ("sm", "compute", "lto")):
            assert names == sorted_archs(names)
            assert all(parse_arch(arch)[0] == kind for arch in names)


@pytest.fixture(scope="module")
def inputs(cuda_fixtures, tmp_path_factory):
    return Inputs(cuda_fixtures, tmp_path_factory.mktemp("fuzz"))


@st.composite
def offsets(draw, inputs, name):
    data = inputs.data[name]
    anywhere = st.integers(0, len(data) - 1)
    near_hot = st.builds(lambda base, delta: min(base + delta, len(data) - 1),
                         st.sampled_from(inputs.hot[name]), st.integers(0, 160))
    return draw(st.one_of(anywhere, near_hot))


@FUZZ
@given(data=st.data())
def test_truncated_copies(inputs, data):
    name = data.draw(st.sampled_from(sorted(inputs.data)))
    cut = data.draw(offsets(inputs, name))
    whole = inputs.data[name]
    if whole[:4] != b"\x7fELF":
        inputs.scan(name, whole[:cut])  # a raw fatbin cut between containers is a shorter valid fatbin
    elif cut == 0:
        assert_empty_file_rule(inputs, name)
    else:
        # The ELF header declares a section table (and in cubins a program header table) that ends the
        # file, so every cut, even inside the ELF header, must be an error, never "no device code".
        inputs.scan(name, whole[:cut], must_fail=True)


def assert_empty_file_rule(inputs, name):
    """An empty file is no binary at all: no device code for a library or object, an error for a cubin."""
    path = inputs.scratch / name
    path.write_bytes(b"")
    if name.endswith((".cubin", ".fatbin")):
        with pytest.raises(FatbinError, match="not a cubin or fatbin"):
            scan_file(path)
    else:
        assert scan_file(path) == DeviceCode([], [], [])


@FUZZ
@given(data=st.data())
def test_copies_with_random_bytes(inputs, data):
    name = data.draw(st.sampled_from(sorted(inputs.data)))
    blob = bytearray(inputs.data[name])
    for _ in range(data.draw(st.integers(1, 8))):
        blob[data.draw(offsets(inputs, name))] = data.draw(st.integers(0, 255))
    inputs.scan(name, blob)


@FUZZ
@given(data=st.data())
def test_copies_with_hostile_header_fields(inputs, data):
    name = data.draw(st.sampled_from(sorted(inputs.data)))
    blob = bytearray(inputs.data[name])
    for _ in range(data.draw(st.integers(1, 3))):
        base = data.draw(st.sampled_from(inputs.hot[name]))
        fields = ELF_HEADER_FIELDS if base == 0 and blob[:4] == b"\x7fELF" else CONTAINER_AND_ENTRY_FIELDS
        offset = base + data.draw(st.sampled_from(fields))
        width = data.draw(st.sampled_from([2, 4, 8]))
        value = data.draw(FIELD_VALUES) % (1 << (8 * width))
        if offset + width <= len(blob):
            blob[offset:offset + width] = value.to_bytes(width, "little")
    inputs.scan(name, blob)
