"""A source-built kernel carried by an offline bundle: the source archive and every configure-time source.

The bundle holds ``source/<archive>`` and, under ``github/``, each FetchContent tarball at the path it has
on GitHub (``github/<owner>/<repo>/archive/<file>``), so serving ``github/`` as the sgl_kernel role's
``sgl_kernel_source_mirror_url`` (a prefix replacing ``https://${GITHUB_ARTIFACTORY}`` and
``https://github.com``) builds the kernel with no other server. The dependencies are read from the
archive's own CMake files (CMakeLists.txt and cmake/*.cmake of the package directory, as the build
reads them); each must be a URL on GitHub pinned by a SHA256 ``URL_HASH``. A file's identity is its
name and sha256: a file that is there with its sha256 is kept, a download that does not match is
removed, and nothing is kept half-written (downloads go to a hidden ``.part`` file first).

Stdlib only, Python 3.8+.
"""

import http.client
import os
import posixpath
import re
import tarfile
import urllib.error
import urllib.parse

from ansible.module_utils.sgl_kernel_source import fetchcontent_dependencies
from ansible.module_utils.wheel_fetch import ShortRead, copy_local, download, file_sha256, is_url, local_path

SOURCE_DIR = "source"
MIRROR_DIR = "github"
# Package directories of the two source layouts, newest first (as the sgl_kernel role looks for them).
PACKAGE_DIRS = ("python/sglang/kernels/aot", "sgl-kernel")
_GITHUB_PREFIX = re.compile(r"^https://(?:\$\{GITHUB_ARTIFACTORY\}|github\.com)/(?P<path>.+)$")
_GITHUB_REPO = re.compile(r"^https://github\.com/(?P<owner>[^/]+)/(?P<repo>[^/]+?)(?:\.git)?/?$")


class BundleError(Exception):
    """The kernel source cannot be bundled; the message says what and what to do."""


def _safe_relative(path):
    """``path`` as a relative POSIX path with no empty, ``.`` or ``..`` part; None otherwise."""
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return None
    return path


def github_path(url):
    """Path of a FetchContent ``url`` under a GitHub-like mirror (``owner/repo/archive/<file>``), or None
    when the URL is not on ``https://${GITHUB_ARTIFACTORY}/`` or ``https://github.com/``."""
    match = _GITHUB_PREFIX.match(url)
    return _safe_relative(match.group("path")) if match else None


def source_archive_url(archive_url, git_url, ref, github_url):
    """Where the source archive comes from: ``archive_url``, else GitHub's archive of ``ref`` of a
    ``https://github.com/<owner>/<repo>[.git]`` ``git_url``, under ``github_url`` (GitHub or a mirror)."""
    if archive_url:
        return archive_url
    match = _GITHUB_REPO.match(git_url)
    if not match:
        raise BundleError(
            f"the profile's kernel source {git_url!r} is not a GitHub repository, so its archive URL is "
            "unknown: set sgl_kernel.source.archive_url in the profile")
    if not ref:
        raise BundleError("the profile's sgl_kernel.source has no ref: set the commit or tag to bundle")
    return f"{github_url.rstrip('/')}/{match.group('owner')}/{match.group('repo')}/archive/{ref}.tar.gz"


def archive_file_name(url):
    """The archive's file name in the bundle: ``<repo>-<file>`` for a GitHub-style ``.../<repo>/archive/
    <file>`` URL (GitHub names every archive by its ref alone), else the URL's last path part."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
    parts = [part for part in path.split("/") if part]
    github_style = len(parts) >= 3 and parts[-2] == "archive"
    name = f"{parts[-3]}-{parts[-1]}" if github_style else (parts or [""])[-1]
    if not name or name.startswith("."):
        raise BundleError(f"cannot name the source archive after {url!r}: give a URL that ends in its "
                          "file name")
    return name


def kernel_cmake_files(archive, subdir=""):
    """(package directory, {path: text}) of the kernel's CMake files inside the source ``archive``.

    The archive has one top directory (GitHub's archives, ``make_archive``); the package directory is
    ``subdir`` or the first of PACKAGE_DIRS that has a CMakeLists.txt. The files are CMakeLists.txt and
    cmake/*.cmake of it, as the build reads them.
    """
    try:
        with tarfile.open(archive) as tar:
            members = {}
            for member in tar.getmembers():
                if member.isfile() and "/" in member.name:
                    members[member.name.split("/", 1)[1]] = member
            # the subdir as a plain relative path ("/kernels/" -> "kernels")
            candidates = [posixpath.relpath(posixpath.join("/", subdir), "/")] if subdir else PACKAGE_DIRS
            package = next((c for c in candidates if f"{c}/CMakeLists.txt" in members), None)
            if package is None:
                looked_for = " or ".join(f"{c}/CMakeLists.txt" for c in candidates)
                raise BundleError(
                    f"{os.path.basename(archive)} has no {looked_for}: it is not an sglang source archive, "
                    "or set sgl_kernel.source.subdir to its kernel package directory")
            texts = {}
            for name in sorted(members):
                inside = name[len(package) + 1:] if name.startswith(package + "/") else None
                if inside == "CMakeLists.txt" or (inside and re.match(r"^cmake/[^/]+\.cmake$", inside)):
                    texts[name] = tar.extractfile(members[name]).read().decode(errors="replace")
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BundleError(f"{os.path.basename(archive)} is not a readable tar archive: {exc}") from exc
    return package, texts


def bundled_dependencies(cmake_texts):
    """Every FetchContent dependency of ``cmake_texts`` ({path: text}) the bundle carries:
    [{name, url, path (under the mirror dir), sha256}], one per path.

    Raises BundleError naming each dependency that cannot be carried: a git clone (no URL), a URL with
    no SHA256 pin, a URL not on GitHub, or one path pinned with two sha256.
    """
    found, problems = {}, []
    for where, text in sorted(cmake_texts.items()):
        for dep in fetchcontent_dependencies(text):
            name, url = dep["name"], dep["url"]
            path = github_path(url) if url else None
            if not url:
                problems.append(
                    f"{name} ({where}) is a git clone ({dep['git_repository']} {dep['git_tag']}), not a "
                    "tarball pinned by sha256")
            elif not dep["sha256"]:
                problems.append(f"{name} ({where}) has no URL_HASH SHA256 pin for {url}")
            elif path is None:
                problems.append(
                    f"{name} ({where}) downloads {url}, not from https://${{GITHUB_ARTIFACTORY}}/ or "
                    "https://github.com/, which sgl_kernel_source_mirror_url cannot replace")
            elif path in found and found[path]["sha256"] != dep["sha256"]:
                problems.append(f"{name} ({where}) pins {url} to sha256 {dep['sha256']}, "
                                f"{found[path]['name']} to {found[path]['sha256']}")
            elif path not in found:
                found[path] = {"name": name, "url": url, "path": path, "sha256": dep["sha256"]}
    if problems:
        raise BundleError(
            "the kernel source's configure-time dependencies cannot all be bundled (each must be a URL on "
            "GitHub with a URL_HASH SHA256 pin, as sglang-kernel 0.4.x declares them): " + "; ".join(problems)
            + ". Bundle a source that pins them, or build on a host that reaches them")
    return list(found.values())


def fetch_checked(source, target, sha256, timeout):
    """Put ``source`` (an http(s) or ``file://`` URL, or a path) at ``target``; returns its sha256.

    The bytes go to ``.<name>.part`` beside ``target`` first (wheel_fetch's download: a download cut
    short stays there and the next run resumes it); with ``sha256``, a file that does not match is
    removed and BundleError names it, so ``target`` is only ever a whole file, checked where pinned:
    also without a pin, a download cut short is never taken for the archive.
    """
    directory, name = os.path.split(target)
    partial = os.path.join(directory, f".{name}.part")
    os.makedirs(directory, exist_ok=True)
    try:
        if is_url(source):
            download(source, partial, timeout)
        else:
            copy_local(local_path(source), partial)
    except ShortRead as exc:  # what came stays in the part file, for the next run to resume
        raise BundleError(f"{name}: {source}: {exc}") from exc
    except urllib.error.HTTPError as exc:
        _remove(partial)
        raise BundleError(f"{name}: {source}: HTTP {exc.code}") from exc
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        _remove(partial)
        raise BundleError(f"{name}: {source}: {getattr(exc, 'reason', exc)}") from exc
    got = file_sha256(partial)
    if sha256 and got != sha256:
        _remove(partial)
        raise BundleError(f"{name}: {source} has sha256 {got}, expected {sha256}; nothing was kept")
    os.replace(partial, target)
    return got


def _remove(path):
    if os.path.exists(path):
        os.unlink(path)


def _present(path, sha256):
    """True when ``path`` is there with ``sha256`` (None: any file there, the one the bundle pinned)."""
    return os.path.isfile(path) and (sha256 is None or file_sha256(path) == sha256)


def bundle_kernel_source(dest, url, *, sha256, subdir, github_url, timeout, check_only):
    """Put the kernel source archive ``url`` and its FetchContent tarballs into the bundle ``dest``.

    The archive goes to ``dest/source/<archive_file_name(url)>``, checked against ``sha256`` when given;
    without one, an archive already in the bundle is kept (the bundle pins what it first fetched). Each
    dependency goes to ``dest/github/<path>`` from ``github_url/<path>``, checked against its pin. With
    ``check_only`` nothing is written: what a real run would fetch is listed as missing (the
    dependencies are only known once the archive is in the bundle).

    Returns {archive: {path, url, sha256, state}, package_dir, dependencies: [{name, url, path, sha256,
    state}], fetched, present, missing} (paths relative to ``dest``). Raises BundleError.
    """
    result = {"fetched": [], "present": [], "missing": [], "package_dir": None, "dependencies": []}
    name = archive_file_name(url)
    relative = f"{SOURCE_DIR}/{name}"
    target = os.path.join(dest, relative)
    state = _state(target, sha256 or None, check_only)
    if state == "fetch":
        got = fetch_checked(url, target, sha256, timeout)
    elif state == "missing":
        got = sha256 or None
    else:
        got = file_sha256(target)
    result["archive"] = {"path": relative, "url": url, "sha256": got, "state": _said(state)}
    result[_said(state)].append(relative)
    if state == "missing":
        return result
    result["package_dir"], texts = kernel_cmake_files(target, subdir)
    errors = []
    for dep in bundled_dependencies(texts):
        relative = f"{MIRROR_DIR}/{dep['path']}"
        target = os.path.join(dest, relative)
        state = _state(target, dep["sha256"], check_only)
        if state == "fetch":
            try:
                fetch_checked(f"{github_url.rstrip('/')}/{dep['path']}", target, dep["sha256"], timeout)
            except BundleError as exc:
                errors.append(f"{dep['name']} {exc}")
                continue
        result["dependencies"].append(dict(dep, path=relative, state=_said(state)))
        result[_said(state)].append(relative)
    if errors:
        raise BundleError(
            f"{len(errors)} configure-time dependencies of {name} could not be bundled: "
            + " | ".join(errors))
    return result


def _state(target, sha256, check_only):
    """'present', 'fetch' or (check only) 'missing' for ``target``; a wrong file there is removed first."""
    if _present(target, sha256):
        return "present"
    if check_only:
        return "missing"
    _remove(target)
    return "fetch"


def _said(state):
    return {"present": "present", "fetch": "fetched", "missing": "missing"}[state]
