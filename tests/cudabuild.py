"""Real CUDA binaries for the scanner tests, compiled with this machine's nvcc and cached.

Each Fixture names the file nvcc makes, how (shared object, object, raw cubin, raw fatbin), and the device
code the build was asked for: ``sass``/``ptx``/``lto`` are written from the nvcc flags by hand, never from
the scanner, so a test compares the scanner with both the request and cuobjdump.

The outputs live under the test cache in a directory keyed by the nvcc version and a hash of the sources,
the fixture list and this file: a second run (or a fresh CI clone on the same machine) reuses them; a
change to any of them rebuilds. Builds run two at a time (CI has 2 cores) into a scratch directory that
is renamed into place when all succeeded, under a lock, so concurrent test sessions never see half a set.
"""

from __future__ import annotations

import fcntl
import hashlib
import re
import shutil
import subprocess
import time
from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from cache import cache_dir
from prereq import require

SOURCES = Path(__file__).resolve().parent / "fixtures" / "cuda"
BUILD_JOBS = 2

Fixture = namedtuple("Fixture", ["name", "kind", "sources", "args", "sass", "ptx", "lto"])


def gencode(arch: str, *codes: str) -> str:
    return f"-gencode=arch=compute_{arch},code=[{','.join(codes)}]"


def _fixture(name, kind, args, *, sass=(), ptx=(), lto=(), sources=("scale.cu",)):
    return Fixture(name, kind, tuple(sources), tuple(args), frozenset(sass), frozenset(ptx),
                   frozenset(lto))


SINGLE_ARCHES = ("90", "90a", "100a", "100f", "103a", "120", "120a", "120f", "121a")
COMPRESS_MODES = ("default", "size", "speed", "balance", "none")
RDC_SOURCES = ("rdc_kernel.cu", "rdc_helper.cu")
SM90_SM120A = (gencode("90", "sm_90", "compute_90"), gencode("120a", "sm_120a"))

FIXTURES = {f.name: f for f in [
    *(_fixture(f"sm_{arch}.so", "so", [gencode(arch, f"sm_{arch}", f"compute_{arch}")],
               sass=[f"sm_{arch}"], ptx=[f"compute_{arch}"]) for arch in SINGLE_ARCHES),
    _fixture("ptx_only.so", "so", [gencode("90", "compute_90"), gencode("120f", "compute_120f")],
             ptx=["compute_90", "compute_120f"]),
    _fixture("ptx_only_100a.so", "so", [gencode("100a", "compute_100a")], ptx=["compute_100a"]),
    _fixture("multi.so", "so",
             [gencode("80", "sm_80"), gencode("90", "sm_90"), gencode("90a", "sm_90a"),
              gencode("100a", "sm_100a"), gencode("120f", "sm_120f"), gencode("120", "compute_120")],
             sass=["sm_80", "sm_90", "sm_90a", "sm_100a", "sm_120f"], ptx=["compute_120"]),
    *(_fixture(f"compress_{mode}.so", "so", [f"-compress-mode={mode}", *SM90_SM120A],
               sass=["sm_90", "sm_120a"], ptx=["compute_90"]) for mode in COMPRESS_MODES),
    _fixture("debug_G.so", "so", ["-G", gencode("90", "sm_90", "compute_90")],
             sass=["sm_90"], ptx=["compute_90"]),
    _fixture("plain_100f.o", "o", [gencode("100f", "sm_100f", "compute_100f")],
             sass=["sm_100f"], ptx=["compute_100f"]),
    # -rdc objects carry their code in __nv_relfatbin only.
    _fixture("rdc_kernel.o", "o", ["-rdc=true", *SM90_SM120A], sass=["sm_90", "sm_120a"],
             ptx=["compute_90"], sources=["rdc_kernel.cu"]),
    # The device-linked library's .nv_fatbin holds the linked cubins only: nvlink keeps no PTX (the
    # objects' PTX stays in __nv_relfatbin, which cuobjdump, like the scanner, skips when .nv_fatbin
    # exists).
    _fixture("rdc_linked.so", "so", ["-rdc=true", *SM90_SM120A], sass=["sm_90", "sm_120a"],
             sources=RDC_SOURCES),
    _fixture("lto.o", "o", ["-rdc=true", gencode("90", "lto_90"), gencode("100f", "lto_100f")],
             lto=["lto_90", "lto_100f"]),
    *(_fixture(f"sm_{arch}.cubin", "cubin", [f"-arch=sm_{arch}"], sass=[f"sm_{arch}"])
      for arch in ("90", "90a", "100f", "120", "120a", "121f")),
    _fixture("rdc_sm_100a.cubin", "cubin", ["-rdc=true", "-arch=sm_100a"], sass=["sm_100a"]),
    _fixture("mixed.fatbin", "fatbin", [gencode("90a", "sm_90a", "compute_90a"), gencode("120f", "sm_120f")],
             sass=["sm_90a", "sm_120f"], ptx=["compute_90a"]),
    _fixture("host_only.so", "host", [], sources=["host_only.c"]),
]}


def nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True, timeout=60).stdout
    match = re.search(r"\bV(\d+\.\d+\.\d+)", out)
    if not match:
        raise RuntimeError(f"cannot read the version from `{nvcc} --version`: {out!r}")
    return match.group(1)


def _command(fixture: Fixture, nvcc: str, out: Path) -> list[str]:
    sources = [str(SOURCES / name) for name in fixture.sources]
    if fixture.kind == "host":
        compiler = shutil.which("cc") or shutil.which("gcc")
        if not compiler:
            raise RuntimeError("no host C compiler (cc/gcc) on PATH")
        return [compiler, "-shared", "-fPIC", "-o", str(out), *sources]
    mode = {"so": ["-shared", "-Xcompiler", "-fPIC", "-cudart", "shared"],
            "o": ["-c", "-Xcompiler", "-fPIC"], "cubin": ["-cubin"], "fatbin": ["-fatbin"]}[fixture.kind]
    return [nvcc, *mode, *fixture.args, "-o", str(out), *sources]


def _key(version: str) -> str:
    digest = hashlib.sha256(version.encode())
    for path in [Path(__file__), *sorted(SOURCES.iterdir())]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return f"nvcc-{version}-{digest.hexdigest()[:16]}"


def build_fixtures(nvcc: str) -> Path:
    """Directory holding every FIXTURES output; built on first use, then reused."""
    root = cache_dir("cuda-fixtures")
    final = root / _key(nvcc_version(nvcc))
    with open(root / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (final / ".ready").exists():
            return final
        scratch = root / (final.name + ".partial")
        shutil.rmtree(scratch, ignore_errors=True)
        scratch.mkdir()
        started = time.monotonic()

        def build(fixture: Fixture) -> None:
            cmd = _command(fixture, nvcc, scratch / fixture.name)
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
            if done.returncode != 0:
                raise RuntimeError(f"building fixture {fixture.name} failed ({' '.join(cmd)}):\n"
                                   f"{done.stdout}{done.stderr}")

        with ThreadPoolExecutor(max_workers=BUILD_JOBS) as pool:
            list(pool.map(build, FIXTURES.values()))
        seconds = time.monotonic() - started
        (scratch / "build-seconds.txt").write_text(f"{seconds:.1f}\n")
        (scratch / ".ready").write_text(f"{len(FIXTURES)} fixtures\n")
        shutil.rmtree(final, ignore_errors=True)
        scratch.rename(final)
        return final


@pytest.fixture(scope="session", name="cuda_fixtures")
def compiled_fixtures() -> dict[str, tuple[Path, Fixture]]:
    """{name: (path, Fixture)} for every compiled fixture (skips locally / fails in CI without nvcc)."""
    nvcc = shutil.which("nvcc")
    require(nvcc is not None, "nvcc is not on PATH (the CUDA toolkit builds the scanner's fixtures)")
    directory = build_fixtures(nvcc)
    return {name: (directory / name, fixture) for name, fixture in FIXTURES.items()}
