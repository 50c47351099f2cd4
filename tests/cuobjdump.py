"""cuobjdump as the oracle for the fatbin scanner: from the small ``nvidia-cuda-cuobjdump`` wheel.

The CUDA toolkit on the test machines has nvcc but no cuobjdump; the wheel carries the binary alone. It is
downloaded once into the wheelhouse (pinned version), extracted into the test cache and made executable.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import zipfile
from collections import namedtuple
from pathlib import Path

from cache import cache_dir, pip_download, wheelhouse

CUOBJDUMP_VERSION = "13.5.37"
NO_DEVICE_CODE_RC = 255  # cuobjdump's exit status for a file without any fatbin
LIST_ARGS = ("-lelf", "-lptx")

Listing = namedtuple("Listing", ["sass", "ptx"])
_LINE = re.compile(r"^(ELF|PTX) file\s+\d+:\s+\S*?\b(sm_\d+[af]?)\.(cubin|ptx)$")


def cuobjdump_path() -> Path:
    """The pinned cuobjdump binary, fetched and extracted on first use."""
    root = cache_dir("cuobjdump", CUOBJDUMP_VERSION)
    binary = root / "cuobjdump"
    with open(root / "extract.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if binary.exists() and os.access(binary, os.X_OK):
            return binary
        pip_download([f"nvidia-cuda-cuobjdump=={CUOBJDUMP_VERSION}"])
        wheels = sorted(wheelhouse().glob(f"nvidia_cuda_cuobjdump-{CUOBJDUMP_VERSION}-*.whl"))
        if not wheels:
            raise RuntimeError(f"pip downloaded no nvidia_cuda_cuobjdump-{CUOBJDUMP_VERSION} wheel into "
                               f"{wheelhouse()}")
        with zipfile.ZipFile(wheels[-1]) as wheel:
            member = next(name for name in wheel.namelist() if name.endswith("/bin/cuobjdump"))
            partial = root / "cuobjdump.partial"
            partial.write_bytes(wheel.read(member))
        partial.chmod(0o755)
        partial.rename(binary)
        return binary


def cuobjdump_listing(path: Path, timeout: int = 900) -> Listing:
    """SASS and PTX arches that ``cuobjdump -lelf -lptx`` lists, in the scanner's spelling.

    cuobjdump names entries ``<file>.<n>.sm_90a.cubin`` / ``.sm_120f.ptx``; PTX is reported here as
    ``compute_*`` like the scanner does. Raises on any line it does not understand, so a change in
    cuobjdump's output shows up as a test error instead of a silently empty set.
    """
    done = subprocess.run([str(cuobjdump_path()), *LIST_ARGS, str(path)], capture_output=True,
                          text=True, timeout=timeout, check=False)
    return parse_listing(path, done.returncode, done.stdout, done.stderr)


def parse_listing(path, returncode: int, stdout: str, stderr: str) -> Listing:
    """The Listing of one ``cuobjdump -lelf -lptx`` run from its exit status and output."""
    if returncode == NO_DEVICE_CODE_RC and "does not contain device code" in stderr:
        return Listing(frozenset(), frozenset())
    if returncode != 0:
        raise RuntimeError(f"cuobjdump failed on {path} (rc {returncode}): {stderr.strip()}")
    sass, ptx = set(), set()
    for line in stdout.splitlines():
        match = _LINE.match(line.strip())
        if not match:
            raise RuntimeError(f"unexpected cuobjdump output line for {path}: {line!r}")
        if match.group(3) == "cubin":
            sass.add(match.group(2))
        else:
            ptx.add("compute_" + match.group(2)[len("sm_"):])
    return Listing(frozenset(sass), frozenset(ptx))


def as_cuobjdump_lists(sass, ptx) -> Listing:
    """What cuobjdump prints for code the scanner reports precisely.

    cuobjdump names a family cubin by its plain arch (an sm_120f cubin is listed as ``sm_120``) while it
    keeps the suffix on family PTX (``sm_120f.ptx``): nothing in the cubin it extracts marks the family
    (neither e_flags nor .nv.compat; only the fatbin entry flags do), whereas the PTX text says
    ``.target sm_120f``. So only the scanner's SASS ``f`` suffix is dropped for the comparison; the
    precise value is checked against the requested build separately.
    """
    plain = {name[:-1] if name.endswith("f") else name for name in sass}
    return Listing(frozenset(plain), frozenset(ptx))
