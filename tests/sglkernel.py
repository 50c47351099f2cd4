"""The released sglang-kernel wheel, for the tests and tests/gpu_host_report.py: one pinned version,
downloaded once into the wheelhouse (tests/cache.py), unpacked as each user needs it.
"""

from __future__ import annotations

import fcntl
import shutil
import zipfile
from pathlib import Path
from typing import Callable

from cache import cache_dir, pip_download

# The version sglang 0.5.23 pins (shared upstream facts).
SGLANG_KERNEL_VERSION = "0.4.10"


def wheel() -> Path:
    """The cached ``sglang-kernel`` wheel file, downloaded on first use."""
    wheels = sorted(pip_download([f"sglang-kernel=={SGLANG_KERNEL_VERSION}"])
                    .glob(f"sglang_kernel-{SGLANG_KERNEL_VERSION}-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip downloaded no sglang_kernel-{SGLANG_KERNEL_VERSION} wheel")
    return wheels[-1]


def extract(destination: Path, keep: Callable[[str], bool], wheel_file: Path | None = None) -> list[str]:
    """Unpack the wheel's members under ``sgl_kernel/`` for which ``keep(name)`` holds; their names."""
    with zipfile.ZipFile(wheel_file or wheel()) as archive:
        members = [m for m in archive.namelist() if m.startswith("sgl_kernel/") and keep(m)]
        archive.extractall(destination, members)
    return members


def unpacked_package() -> Path:
    """The wheel's sgl_kernel/ directory, unpacked once into the cache, minus the 1.1 GB flash_ops
    library that no test reads."""
    root = cache_dir("sglang-kernel-unpacked", SGLANG_KERNEL_VERSION)
    package = root / "sgl_kernel"
    with open(root.parent / f"{SGLANG_KERNEL_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / ".ready").exists():
            shutil.rmtree(package, ignore_errors=True)
            wheel_file = wheel()
            extract(root, lambda name: not name.endswith("/flash_ops.abi3.so"), wheel_file)
            (root / ".ready").write_text(f"{wheel_file.name}\n")
    return package
