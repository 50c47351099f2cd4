"""A real, signed, flat apt repository for tests, laid out like NVIDIA's CUDA repository
(``<base>/<distro>/<arch>/`` with ``InRelease``, ``Packages`` and the .deb files), served over http.

apt on the test hosts checks its InRelease signature against the key the role installs (Signed-By), so
a wrong keyring path, an unsigned source or a key apt cannot read fails exactly as it would against
NVIDIA. What it serves is a STAND-IN: packages named like NVIDIA's (``cuda-toolkit-13-0``) that install
nothing; the toolkit itself comes from the hosts' bind-mounted CUDA.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import subprocess
import threading
from email.utils import formatdate
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator


def _stand_in_deb(workdir: Path, package: str, version: str) -> tuple[Path, str]:
    """A package that installs nothing, and its control stanza."""
    control = (f"Package: {package}\nVersion: {version}\nArchitecture: all\nMaintainer: sglang-fleet tests\n"
               f"Description: STAND-IN for NVIDIA's {package} (tests only)\n installs nothing.\n")
    root = workdir / f"{package}-root"
    (root / "DEBIAN").mkdir(parents=True)
    (root / "DEBIAN" / "control").write_text(control)
    deb = workdir / f"{package}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], check=True,
                   capture_output=True)
    return deb, control


def build_repository(root: Path, distro: str, arch: str, packages: dict[str, str]) -> Path:
    """Build the repository under ``root``; return the ASCII-armored public key that signs it."""
    gnupg = root / "gnupg"
    gnupg.mkdir(mode=0o700, parents=True)
    env = {**os.environ, "GNUPGHOME": str(gnupg)}
    subprocess.run(["gpg", "--batch", "--quiet", "--passphrase", "", "--quick-gen-key",
                    "sglang-fleet test repository <tests@sglang-fleet.invalid>", "ed25519", "sign", "never"],
                   check=True, env=env, capture_output=True)
    key = root / "repository-key.asc"
    key.write_bytes(subprocess.run(["gpg", "--batch", "--armor", "--export"], check=True, env=env,
                                   capture_output=True).stdout)
    repo = root / "www" / distro / arch
    repo.mkdir(parents=True)
    stanzas = []
    for package, version in packages.items():
        deb, control = _stand_in_deb(root, package, version)
        data = deb.read_bytes()
        deb.rename(repo / deb.name)
        md5, sha256 = hashlib.md5(data).hexdigest(), hashlib.sha256(data).hexdigest()
        stanzas.append(f"{control}Filename: ./{deb.name}\nSize: {len(data)}\n"
                       f"MD5sum: {md5}\nSHA256: {sha256}\n")
    listing = "\n".join(stanzas).encode()
    (repo / "Packages").write_bytes(listing)
    sums = {name: hashlib.new(name, listing).hexdigest() for name in ("md5", "sha256")}
    release = (f"Origin: sglang-fleet tests\nLabel: stand-in CUDA repository\nArchitectures: {arch} all\n"
               f"Date: {formatdate(usegmt=True)}\n"
               f"MD5Sum:\n {sums['md5']} {len(listing)} Packages\n"
               f"SHA256:\n {sums['sha256']} {len(listing)} Packages\n")
    (repo / "Release").write_text(release)
    subprocess.run(["gpg", "--batch", "--yes", "--clearsign", "--output", str(repo / "InRelease"),
                    str(repo / "Release")], check=True, env=env, capture_output=True)
    return key


@contextlib.contextmanager
def serve(directory: Path, address: str) -> Iterator[str]:
    """Serve ``directory`` over http on ``address`` (a free port); yield the base URL."""
    handler = functools.partial(_QuietHandler, directory=str(directory))
    server = ThreadingHTTPServer((address, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


class _QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, format, *args):
        pass
