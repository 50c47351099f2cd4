"""module_utils/kernel_source_bundle: a source-built kernel's archive and its pinned FetchContent tarballs,
put into an offline bundle by name and sha256.

Archives are real tarballs built here; the HTTP side is a real server on loopback (http.server serving a
directory, as GitHub or a mirror of it answers), not a mock of urllib.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import io
import os
import tarfile
import threading
import time
from pathlib import Path

import pytest
from ansible.module_utils.kernel_source_bundle import (
    BundleError,
    archive_file_name,
    bundle_kernel_source,
    bundled_dependencies,
    fetch_checked,
    github_path,
    kernel_cmake_files,
    source_archive_url,
)
from halves import send_in_halves

DEP_BYTES = b"tinydep tarball"
DEP_SHA = hashlib.sha256(DEP_BYTES).hexdigest()
DEP_URL = "https://${GITHUB_ARTIFACTORY}/fleet-test/tinydep/archive/v1.tar.gz"


def declare(name, url=DEP_URL, sha=DEP_SHA):
    pin = f"\n    URL_HASH SHA256={sha}" if sha else ""
    return f"FetchContent_Declare(\n    {name}\n    URL {url}{pin}\n)\n"


def tarball(files: dict[str, str | bytes | None], top="sglang-v1") -> bytes:
    """A .tar.gz of ``files`` under ``top/``; a None content is a directory."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w:gz") as tar:
        for name, content in files.items():
            if content is None:
                info = tarfile.TarInfo(f"{top}/{name}")
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
                continue
            data = content.encode() if isinstance(content, str) else content
            info = tarfile.TarInfo(f"{top}/{name}" if top else name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return raw.getvalue()


@pytest.fixture
def served(tmp_path):
    """A directory served over http on loopback: (directory, base URL)."""
    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(QuietHandler, directory=str(root))
    httpd = QuietServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that gave up (a timeout test) breaks the pipe: nothing to report


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the directory as a strict mirror: a path with an empty part (``//``) is not found. A path
    under ``/stall/`` answers only after STALL seconds; one under ``/slow/`` sends half its bytes, then
    (after SLOW seconds) calls ``watch`` and sends the rest; one under ``/cut/`` sends half its bytes
    under the whole Content-Length and closes (a dropped connection)."""

    watch = None

    def log_message(self, *args):
        pass

    def pause_and_watch(self):
        time.sleep(SLOW)
        type(self).watch()

    def do_GET(self):
        if "//" in self.path:
            self.send_error(404)
            return
        if self.path.startswith("/stall/"):
            time.sleep(STALL)
            self.path = self.path[len("/stall"):]
        for prefix in ("/cut/", "/slow/"):
            if self.path.startswith(prefix):
                data = Path(self.directory, self.path[len(prefix):]).read_bytes()
                send_in_halves(self, data, rest=prefix == "/slow/", between=self.pause_and_watch)
                return
        super().do_GET()


STALL, SLOW = 2.0, 0.5


def fetch(source, target, sha256=None, timeout=5):
    return fetch_checked(source, target, sha256, timeout)


def bundle(dest, url, *, sha256="", subdir="", github_url, timeout=5, check_only=False):
    return bundle_kernel_source(dest, url, sha256=sha256, subdir=subdir, github_url=github_url,
                                timeout=timeout, check_only=check_only)


def put(root: Path, relative: str, data: bytes) -> str:
    (root / relative).parent.mkdir(parents=True, exist_ok=True)
    (root / relative).write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file())


# --- where things are ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("url", "path"), [
    (DEP_URL, "fleet-test/tinydep/archive/v1.tar.gz"),
    ("https://github.com/NVIDIA/cutlass/archive/abc.tar.gz", "NVIDIA/cutlass/archive/abc.tar.gz"),
    ("https://gitlab.com/a/b/archive/v1.tar.gz", None),
    ("http://github.com/a/b/archive/v1.tar.gz", None),
    ("https://github.com.evil/a/b.tar.gz", None),
    ("https://github.com/a/../../etc/passwd", None),
    ("https://github.com/a/./b.tar.gz", None),
    ("https://github.com/a//b.tar.gz", None),
    ("https://github.com/", None),
    ("", None),
])
def test_github_path(url, path):
    assert github_path(url) == path


def test_source_archive_url_prefers_the_profiles_archive():
    assert source_archive_url("https://m/src.tar.gz", "https://github.com/o/r.git", "v1", "https://x") == \
        "https://m/src.tar.gz"


@pytest.mark.parametrize("git_url", ["https://github.com/sgl-project/sglang.git",
                                     "https://github.com/sgl-project/sglang", "https://github.com/sgl-project/sglang/"])
def test_source_archive_url_of_a_github_repository_under_the_github_base(git_url):
    assert source_archive_url("", git_url, "v0.5.23", "http://mirror:8080/gh/") == \
        "http://mirror:8080/gh/sgl-project/sglang/archive/v0.5.23.tar.gz"
    assert source_archive_url("", git_url, "v1", "http://mirror/ghX") == \
        "http://mirror/ghX/sgl-project/sglang/archive/v1.tar.gz"


@pytest.mark.parametrize("git_url", ["https://gitlab.com/o/r.git", "git@github.com:o/r.git", "",
                                     "https://github.com/o/r/tree/main"])
def test_source_archive_url_of_another_repository_asks_for_an_archive_url(git_url):
    with pytest.raises(BundleError) as error:
        source_archive_url("", git_url, "v1", "https://github.com")
    assert str(error.value) == (
        f"the profile's kernel source {git_url!r} is not a GitHub repository, so its archive URL is unknown: "
        "set sgl_kernel.source.archive_url in the profile")


def test_source_archive_url_needs_a_ref():
    with pytest.raises(BundleError, match=r"^the profile's sgl_kernel.source has no ref: set the commit "):
        source_archive_url("", "https://github.com/o/r.git", "", "https://github.com")


@pytest.mark.parametrize(("url", "name"), [
    ("https://github.com/sgl-project/sglang/archive/v0.5.23.tar.gz", "sglang-v0.5.23.tar.gz"),
    ("http://h/repo/archive/v1.tar.gz", "repo-v1.tar.gz"),
    ("http://h/archive/v1.tar.gz", "v1.tar.gz"),
    ("http://h/files/my%20src.tar.gz?x=1", "my src.tar.gz"),
    ("/srv/src/sglang.tar.gz", "sglang.tar.gz"),
    ("file:///srv/src/sglang.tar.gz", "sglang.tar.gz"),
])
def test_archive_file_name(url, name):
    assert archive_file_name(url) == name


@pytest.mark.parametrize("url", ["http://h", "http://h/", "http://h/a/..", "http://h/.hidden.tar.gz"])
def test_archive_file_name_refuses_a_url_without_a_plain_file_name(url):
    with pytest.raises(BundleError) as error:
        archive_file_name(url)
    assert str(error.value) == (f"cannot name the source archive after {url!r}: give a URL that ends in its "
                                "file name")


# --- the kernel's CMake files inside the archive -------------------------------------------------------

def write_archive(tmp_path, files, top="sglang-v1"):
    path = tmp_path / "src.tar.gz"
    path.write_bytes(tarball(files, top))
    return str(path)


def test_kernel_cmake_files_reads_the_new_layout_first(tmp_path):
    archive = write_archive(tmp_path, {
        "README.md": "x",
        "python/sglang/kernels/aot/CMakeLists.txt": "new",
        "python/sglang/kernels/aot/cmake": None,
        "python/sglang/kernels/aot/cmake/flashmla.cmake": "mla",
        "python/sglang/kernels/aot/cmake/directory.cmake": None,
        "python/sglang/kernels/aot/cmake/nested/skip.cmake": "no",
        "python/sglang/kernels/aot/cmake/notes.txt": "no",
        "python/sglang/kernels/aot/third_party/CMakeLists.txt": "no",
        "python/sglang/kernels/aot/cmake.cmake": "no",
        "sgl-kernel/CMakeLists.txt": "old",
        "other/python/sglang/kernels/aot/CMakeLists.txt": "no",
    })
    assert kernel_cmake_files(archive) == ("python/sglang/kernels/aot", {
        "python/sglang/kernels/aot/CMakeLists.txt": "new",
        "python/sglang/kernels/aot/cmake/flashmla.cmake": "mla"})


def test_kernel_cmake_files_falls_back_to_the_old_layout(tmp_path):
    archive = write_archive(tmp_path, {"sgl-kernel/CMakeLists.txt": "old\xff".encode("latin-1"),
                                       "sgl-kernel/cmake/a.cmake": "a", "sgl-kernex/CMakeLists.txt": "no"})
    assert kernel_cmake_files(archive) == ("sgl-kernel", {"sgl-kernel/CMakeLists.txt": "old\ufffd",
                                                          "sgl-kernel/cmake/a.cmake": "a"})


def test_kernel_cmake_files_of_a_given_subdir(tmp_path):
    archive = write_archive(tmp_path, {"sgl-kernel/CMakeLists.txt": "old", "kernels/CMakeLists.txt": "mine"})
    assert kernel_cmake_files(archive, "/kernels/") == ("kernels", {"kernels/CMakeLists.txt": "mine"})


def test_kernel_cmake_files_names_what_it_looked_for(tmp_path):
    archive = write_archive(tmp_path, {"CMakeLists.txt": "top-level file of the top dir", "toplevel": "x"})
    with pytest.raises(BundleError) as error:
        kernel_cmake_files(archive)
    assert str(error.value) == (
        "src.tar.gz has no python/sglang/kernels/aot/CMakeLists.txt or sgl-kernel/CMakeLists.txt: it is not "
        "an sglang source archive, or set sgl_kernel.source.subdir to its kernel package directory")
    with pytest.raises(BundleError, match=r"^src.tar.gz has no kernels/CMakeLists.txt: "):
        kernel_cmake_files(archive, "kernels")


def test_kernel_cmake_files_skips_files_outside_a_top_directory(tmp_path):
    archive = write_archive(tmp_path, {"sgl-kernel/CMakeLists.txt": "at the top"}, top="")
    with pytest.raises(BundleError, match=r"^src.tar.gz has no "):
        kernel_cmake_files(archive)


@pytest.mark.parametrize("data", [b"not a tarball", b""])
def test_kernel_cmake_files_of_a_file_that_is_no_archive(tmp_path, data):
    path = tmp_path / "src.tar.gz"
    path.write_bytes(data)
    with pytest.raises(BundleError, match=r"^src.tar.gz is not a readable tar archive: "):
        kernel_cmake_files(str(path))


# --- which dependencies, and which cannot be carried ---------------------------------------------------

def test_bundled_dependencies_one_per_file_from_every_cmake_file():
    cutlass = "https://github.com/N/c/archive/a.zip"
    texts = {"k/CMakeLists.txt": declare("repo-tinydep") + declare("repo-cutlass", cutlass),
             "k/cmake/flashmla.cmake": declare("repo-cutlass-mla", cutlass)}
    assert bundled_dependencies(texts) == [
        {"name": "repo-tinydep", "url": DEP_URL, "path": "fleet-test/tinydep/archive/v1.tar.gz",
         "sha256": DEP_SHA},
        {"name": "repo-cutlass", "url": cutlass, "path": "N/c/archive/a.zip", "sha256": DEP_SHA}]


def test_bundled_dependencies_names_each_one_a_bundle_cannot_carry():
    texts = {
        "k/CMakeLists.txt": (
            "FetchContent_Declare(repo-old GIT_REPOSITORY https://github.com/o/old GIT_TAG abc)\n"
            + declare("repo-nohash", sha=None)
            + declare("repo-elsewhere", "https://example.org/x.tar.gz")
            + declare("repo-same", "https://github.com/N/c/archive/a.zip")),
        "k/cmake/b.cmake": declare("repo-other", "https://github.com/N/c/archive/a.zip", "0" * 64),
    }
    with pytest.raises(BundleError) as error:
        bundled_dependencies(texts)
    assert str(error.value) == (
        "the kernel source's configure-time dependencies cannot all be bundled (each must be a URL on GitHub "
        "with a URL_HASH SHA256 pin, as sglang-kernel 0.4.x declares them): "
        "repo-old (k/CMakeLists.txt) is a git clone (https://github.com/o/old abc), not a tarball pinned by "
        "sha256; "
        f"repo-nohash (k/CMakeLists.txt) has no URL_HASH SHA256 pin for {DEP_URL}; "
        "repo-elsewhere (k/CMakeLists.txt) downloads https://example.org/x.tar.gz, not from "
        "https://${GITHUB_ARTIFACTORY}/ or https://github.com/, which sgl_kernel_source_mirror_url cannot "
        "replace; "
        f"repo-other (k/cmake/b.cmake) pins https://github.com/N/c/archive/a.zip to sha256 {'0' * 64}, "
        f"repo-same to {DEP_SHA}. Bundle a source that pins them, or build on a host that reaches them")


def test_bundled_dependencies_of_a_source_without_any():
    assert bundled_dependencies({"k/CMakeLists.txt": "project(x)\n"}) == []


# --- one checked file ----------------------------------------------------------------------------------

def test_fetch_checked_over_http(served, tmp_path):
    root, base = served
    sha = put(root, "a/dep.tar.gz", DEP_BYTES)
    target = tmp_path / "out" / "deep" / "dep.tar.gz"
    assert fetch(f"{base}/a/dep.tar.gz", str(target), sha, timeout=5) == sha
    assert target.read_bytes() == DEP_BYTES
    assert files_under(tmp_path / "out") == ["deep/dep.tar.gz"]


def test_fetch_checked_keeps_nothing_that_does_not_match(served, tmp_path):
    root, base = served
    got = put(root, "dep.tar.gz", b"tampered")
    with pytest.raises(BundleError) as error:
        fetch(f"{base}/dep.tar.gz", str(tmp_path / "out" / "dep.tar.gz"), DEP_SHA)
    assert str(error.value) == (f"dep.tar.gz: {base}/dep.tar.gz has sha256 {got}, expected {DEP_SHA}; "
                                "nothing was kept")
    assert files_under(tmp_path / "out") == []


def test_fetch_checked_names_an_http_error_and_keeps_nothing(served, tmp_path):
    _root, base = served
    with pytest.raises(BundleError) as error:
        fetch(f"{base}/gone.tar.gz", str(tmp_path / "out" / "gone.tar.gz"), DEP_SHA)
    assert str(error.value) == f"gone.tar.gz: {base}/gone.tar.gz: HTTP 404"
    assert files_under(tmp_path / "out") == []


def test_fetch_checked_names_an_unreachable_server(tmp_path):
    refused = r"^x.tar.gz: http://127.0.0.1:9/x.tar.gz: \[Errno 111\] Connection refused$"
    with pytest.raises(BundleError, match=refused):
        fetch("http://127.0.0.1:9/x.tar.gz", str(tmp_path / "x.tar.gz"), timeout=5)
    assert files_under(tmp_path) == []


def test_fetch_checked_downloads_an_https_url_rather_than_looking_for_a_file(tmp_path):
    with pytest.raises(BundleError) as error:
        fetch("https://127.0.0.1:9/x.tar.gz", str(tmp_path / "x.tar.gz"), timeout=5)
    assert str(error.value) == "x.tar.gz: https://127.0.0.1:9/x.tar.gz: [Errno 111] Connection refused"
    assert files_under(tmp_path) == []


def test_fetch_checked_from_a_path_or_file_url_without_a_pin(tmp_path):
    source = tmp_path / "src.tar.gz"
    source.write_bytes(b"archive")
    sha = hashlib.sha256(b"archive").hexdigest()
    assert fetch(str(source), str(tmp_path / "a" / "src.tar.gz")) == sha
    assert fetch(f"file://{source}", str(tmp_path / "b" / "src.tar.gz"), sha) == sha
    assert (tmp_path / "b" / "src.tar.gz").read_bytes() == b"archive"
    with pytest.raises(BundleError) as error:
        fetch(str(tmp_path / "missing.tar.gz"), str(tmp_path / "c" / "m.tar.gz"))
    assert str(error.value) == (f"m.tar.gz: {tmp_path}/missing.tar.gz: [Errno 2] No such file or directory: "
                                f"'{tmp_path}/missing.tar.gz'")
    assert files_under(tmp_path / "c") == []


# --- the whole kernel source ---------------------------------------------------------------------------

KERNEL = "python/sglang/kernels/aot"
ARCHIVE_PATH = "fleet-test/sglang/archive/v1.tar.gz"


def serve_source(root, cmake=None):
    """The kernel source archive and its one dependency under ``root`` (GitHub's paths); archive sha256."""
    put(root, "fleet-test/tinydep/archive/v1.tar.gz", DEP_BYTES)
    return put(root, ARCHIVE_PATH, tarball({f"{KERNEL}/CMakeLists.txt": cmake or declare("repo-tinydep")}))


def test_bundle_kernel_source_fetches_then_keeps(served, tmp_path):
    root, base = served
    sha = serve_source(root)
    url = f"{base}/{ARCHIVE_PATH}"
    dest = tmp_path / "bundle"
    first = bundle(str(dest), url, github_url=base, timeout=5)
    assert first == {
        "archive": {"path": "source/sglang-v1.tar.gz", "url": url, "sha256": sha,
                    "state": "fetched"},
        "package_dir": KERNEL,
        "dependencies": [{"name": "repo-tinydep", "url": DEP_URL, "sha256": DEP_SHA, "state": "fetched",
                          "path": "github/fleet-test/tinydep/archive/v1.tar.gz"}],
        "fetched": ["source/sglang-v1.tar.gz", "github/fleet-test/tinydep/archive/v1.tar.gz"],
        "present": [], "missing": []}
    assert files_under(dest) == first["fetched"][::-1]
    # the server's archive moves on (a branch): the bundle keeps the one it pinned, unless a sha256 is given
    put(root, ARCHIVE_PATH, tarball({f"{KERNEL}/CMakeLists.txt": ""}))
    again = bundle(str(dest), url, github_url=base)
    assert again["archive"] == dict(first["archive"], state="present")
    assert again["fetched"] == []
    assert again["present"] == first["fetched"]
    assert bundle(str(dest), url, sha256=sha, github_url=base)["fetched"] == []


def test_bundle_kernel_source_replaces_a_damaged_file(served, tmp_path):
    root, base = served
    sha = serve_source(root)
    url = f"{base}/{ARCHIVE_PATH}"
    dest = tmp_path / "bundle"
    put(dest, "source/sglang-v1.tar.gz", b"damaged")
    put(dest, "github/fleet-test/tinydep/archive/v1.tar.gz", b"damaged")
    result = bundle(str(dest), url, sha256=sha, github_url=base + "/")
    assert result["fetched"] == ["source/sglang-v1.tar.gz", "github/fleet-test/tinydep/archive/v1.tar.gz"]
    assert (dest / "github/fleet-test/tinydep/archive/v1.tar.gz").read_bytes() == DEP_BYTES


def test_bundle_kernel_source_in_check_mode_writes_nothing(served, tmp_path):
    root, base = served
    sha = serve_source(root)
    url = f"{base}/{ARCHIVE_PATH}"
    dest = tmp_path / "bundle"
    empty = bundle(str(dest), url, github_url=base, check_only=True)
    assert empty == {"archive": {"path": "source/sglang-v1.tar.gz", "url": url,
                                 "sha256": None, "state": "missing"},
                     "package_dir": None, "dependencies": [], "fetched": [], "present": [],
                     "missing": ["source/sglang-v1.tar.gz"]}
    assert not dest.exists()
    pinned = bundle(str(dest), url, sha256=sha, github_url=base, check_only=True)
    assert pinned["archive"]["sha256"] == sha
    put(dest, "source/sglang-v1.tar.gz", (root / ARCHIVE_PATH).read_bytes())
    put(dest, "github/fleet-test/tinydep/archive/v1.tar.gz", b"damaged")
    half = bundle(str(dest), url, sha256=sha, github_url=base, check_only=True)
    assert half["present"] == ["source/sglang-v1.tar.gz"]
    assert half["missing"] == ["github/fleet-test/tinydep/archive/v1.tar.gz"]
    assert half["dependencies"][0]["state"] == "missing"
    assert (dest / "github/fleet-test/tinydep/archive/v1.tar.gz").read_bytes() == b"damaged"  # untouched


def test_bundle_kernel_source_refuses_an_archive_that_does_not_match(served, tmp_path):
    root, base = served
    serve_source(root)
    url = f"{base}/{ARCHIVE_PATH}"
    dest = tmp_path / "bundle"
    with pytest.raises(BundleError, match=r"^sglang-v1.tar.gz: .* has sha256 [0-9a-f]{64}, expected 0{64}; "):
        bundle(str(dest), url, sha256="0" * 64, github_url=base)
    assert files_under(dest) == []


def test_bundle_kernel_source_names_each_dependency_it_could_not_get(served, tmp_path):
    root, base = served
    cmake = declare("repo-tinydep") + declare("repo-gone", "https://github.com/o/gone/archive/v2.tar.gz") + \
        declare("repo-bad", "https://github.com/o/bad/archive/v3.tar.gz")
    serve_source(root, cmake)
    url = f"{base}/{ARCHIVE_PATH}"
    bad = put(root, "o/bad/archive/v3.tar.gz", b"tampered")
    dest = tmp_path / "bundle"
    with pytest.raises(BundleError) as error:
        bundle(str(dest), url, github_url=base)
    assert str(error.value) == (
        "2 configure-time dependencies of sglang-v1.tar.gz could not be bundled: "
        f"repo-gone v2.tar.gz: {base}/o/gone/archive/v2.tar.gz: HTTP 404 | "
        f"repo-bad v3.tar.gz: {base}/o/bad/archive/v3.tar.gz has sha256 {bad}, expected {DEP_SHA}; "
        "nothing was kept")
    assert files_under(dest) == ["github/fleet-test/tinydep/archive/v1.tar.gz", "source/sglang-v1.tar.gz"]


def test_bundle_kernel_source_reads_the_given_package_directory(served, tmp_path):
    root, base = served
    put(root, "fleet-test/tinydep/archive/v1.tar.gz", DEP_BYTES)
    put(root, ARCHIVE_PATH, tarball({"kernels/CMakeLists.txt": declare("repo-tinydep"),
                                     f"{KERNEL}/CMakeLists.txt": "project(not-this-one)\n"}))
    result = bundle(str(tmp_path / "bundle"), f"{base}/{ARCHIVE_PATH}", subdir="kernels/",
                                  github_url=base)
    assert result["package_dir"] == "kernels"
    assert [dep["name"] for dep in result["dependencies"]] == ["repo-tinydep"]


def test_fetch_checked_names_a_url_it_cannot_read(tmp_path):
    with pytest.raises(BundleError) as error:
        fetch("http://127.0.0.1:notaport/x.tar.gz", str(tmp_path / "x.tar.gz"))
    assert str(error.value) == "x.tar.gz: http://127.0.0.1:notaport/x.tar.gz: nonnumeric port: 'notaport'"
    assert files_under(tmp_path) == []


def test_fetch_checked_gives_up_on_a_server_that_does_not_answer_in_time(served, tmp_path):
    root, base = served
    put(root, "dep.tar.gz", DEP_BYTES)
    with pytest.raises(BundleError, match=r"^dep.tar.gz: .*/stall/dep.tar.gz: timed out$"):
        fetch(f"{base}/stall/dep.tar.gz", str(tmp_path / "out" / "dep.tar.gz"), DEP_SHA, timeout=0.5)
    assert files_under(tmp_path / "out") == []


def test_a_download_in_progress_is_a_hidden_part_file_beside_the_target(served, tmp_path):
    root, base = served
    put(root, "dep.tar.gz", DEP_BYTES)
    target = tmp_path / "out" / "dep.tar.gz"
    seen = []
    QuietHandler.watch = lambda: seen.append(sorted(os.listdir(target.parent)))
    try:
        assert fetch(f"{base}/slow/dep.tar.gz", str(target), DEP_SHA) == DEP_SHA
    finally:
        QuietHandler.watch = None
    assert seen == [[".dep.tar.gz.part"]]
    assert files_under(tmp_path / "out") == ["dep.tar.gz"]


def test_bundle_kernel_source_gives_up_on_a_source_that_does_not_answer_in_time(served, tmp_path):
    root, base = served
    serve_source(root)
    dest = tmp_path / "bundle"
    with pytest.raises(BundleError, match=r"^sglang-v1.tar.gz: .*: timed out$"):
        bundle(str(dest), f"{base}/stall/{ARCHIVE_PATH}", github_url=base, timeout=0.5)
    timed_out = r"^1 configure-time dependencies .*: repo-tinydep v1.tar.gz: .*: timed out$"
    with pytest.raises(BundleError, match=timed_out):
        bundle(str(dest), f"{base}/{ARCHIVE_PATH}", github_url=f"{base}/stall", timeout=0.5)
    assert files_under(dest) == ["source/sglang-v1.tar.gz"]


def test_an_unpinned_archive_cut_short_is_never_taken_and_the_next_run_completes_it(served, tmp_path):
    root, base = served
    sha = serve_source(root)
    size = (root / ARCHIVE_PATH).stat().st_size
    dest = tmp_path / "bundle"
    with pytest.raises(BundleError) as error:
        bundle(str(dest), f"{base}/cut/{ARCHIVE_PATH}", github_url=base, timeout=5)
    assert str(error.value) == (f"sglang-v1.tar.gz: {base}/cut/{ARCHIVE_PATH}: the connection closed after "
                                f"{size // 2} of {size} bytes ({size // 2} kept to resume from)")
    assert files_under(dest) == ["source/.sglang-v1.tar.gz.part"]  # hidden: not the archive
    result = bundle(str(dest), f"{base}/{ARCHIVE_PATH}", github_url=base, timeout=5)
    assert result["archive"]["sha256"] == sha
    assert files_under(dest) == ["github/fleet-test/tinydep/archive/v1.tar.gz", "source/sglang-v1.tar.gz"]


def test_bundle_kernel_source_under_a_mirror_path(served, tmp_path):
    root, base = served
    serve_source(root / "mirrorX")
    result = bundle(str(tmp_path / "bundle"), f"{base}/mirrorX/{ARCHIVE_PATH}", github_url=f"{base}/mirrorX/")
    assert result["fetched"] == ["source/sglang-v1.tar.gz", "github/fleet-test/tinydep/archive/v1.tar.gz"]


def test_kernel_cmake_files_reads_a_file_that_is_not_utf8(tmp_path):
    cmake = b"# caf\xe9 (latin-1)\n" + declare("repo-tinydep").encode()
    archive = write_archive(tmp_path, {"python/sglang/kernels/aot/CMakeLists.txt": cmake})
    _package, texts = kernel_cmake_files(archive)
    assert [dep["name"] for dep in bundled_dependencies(texts)] == ["repo-tinydep"]
