"""Fetch a lock's files into a directory, each checked against its sha256: no resolver, no pip.

A file's identity is its name and sha256. Sources are tried in order: each mirror (a local directory or
an http(s) base URL holding the files under their own names: a served wheel cache, an offline bundle,
the test fleet's wheelhouse), then the URL the lock recorded (unless the lock's URLs are not to be
used: no index reachable). A file already in the directory with the right sha256 is kept; a partial
download is resumed (HTTP Range) the next time. A server that does not answer (refused, unknown, silent
until the timeout) is not asked again for the other files of the same fetch: one timeout per server, not
one per file. Nothing reads pip's or uv's configuration.

Stdlib only, Python 3.8+ (runs on managed hosts and on the controller).
"""

import hashlib
import http.client
import json
import os
import shutil
import socket
import urllib.error
import urllib.parse
import urllib.request

CHUNK = 1 << 20
# Per directory: {file name: [size, mtime_ns, sha256]} of files already hashed, so that a directory of
# several GB is not hashed again on every run; a file whose size or mtime changed is hashed again.
VERIFIED = ".verified.json"


class FetchError(Exception):
    """Files that could not be had from any source; the message names each one."""


class ShortRead(Exception):
    """The server closed the connection before the whole body came; what came is kept to resume."""


def file_sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def load_verified(dest):
    try:
        with open(os.path.join(dest, VERIFIED), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def save_verified(dest, verified):
    temporary = os.path.join(dest, VERIFIED + ".tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(verified, handle, sort_keys=True)
    os.replace(temporary, os.path.join(dest, VERIFIED))


def known_sha256(path, verified):
    """sha256 of ``path``, from ``verified`` while its size and mtime are unchanged; None when missing."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    name = os.path.basename(path)
    entry = verified.get(name)
    if isinstance(entry, list) and entry[:2] == [stat.st_size, stat.st_mtime_ns]:
        return entry[2]
    digest = file_sha256(path)
    verified[name] = [stat.st_size, stat.st_mtime_ns, digest]
    return digest


def is_url(source):
    """Whether ``source`` is fetched over HTTP(S) (else it is a local path or a ``file://`` URL)."""
    return source.startswith(("http://", "https://"))


def local_path(source):
    """The path of a local ``source``: a ``file://`` URL without its scheme, a plain path as it is."""
    return source[len("file://"):] if source.startswith("file://") else source


def candidates(item, mirrors, use_recorded_url):
    """Where ``item`` (filename, url) may be had, in the order they are tried."""
    found = []
    for mirror in mirrors:
        if is_url(mirror):
            found.append(mirror.rstrip("/") + "/" + urllib.parse.quote(item["filename"]))
        elif mirror:
            found.append(os.path.join(local_path(mirror), item["filename"]))
    recorded = item.get("url") or ""
    if use_recorded_url and recorded:
        found.append(local_path(recorded))
    return found


def copy_local(source, target):
    """Hardlink (same filesystem) or copy a local file to ``target``."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def download(url, partial, timeout):
    """Download ``url`` into ``partial``, resuming what is there (HTTP Range).

    Raises ShortRead when fewer bytes came than the response's Content-Length said (a dropped
    connection: urllib does not notice), leaving what came in ``partial``.
    """
    have = os.path.getsize(partial) if os.path.exists(partial) else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        start = have if have and response.status == 206 else 0
        with open(partial, "ab" if start else "wb") as handle:
            shutil.copyfileobj(response, handle, CHUNK)
        length = response.headers.get("Content-Length", "")
    size = os.path.getsize(partial)
    if length.isdigit() and size - start < int(length):
        raise ShortRead(f"the connection closed after {size - start} of {length} bytes "
                        f"({size} kept to resume from)")


def did_not_answer(exc):
    """Whether a download failed because its server never answered (connection refused, name unknown,
    nothing within the timeout), not because of what it answered or of this host's disk."""
    return isinstance(exc, (urllib.error.URLError, socket.timeout))


def fetch_one(item, dest, mirrors, use_recorded_url, timeout=60, *, verified=None, silent=None):
    """Put ``item`` into ``dest``. Returns (state, source): state 'present' or 'fetched'.

    ``silent`` holds the servers (host:port) that did not answer earlier: their sources are skipped, and
    a server that does not answer now is added to it. Raises FetchError with every source tried and why
    it was refused.
    """
    verified = {} if verified is None else verified
    silent = set() if silent is None else silent
    target = os.path.join(dest, item["filename"])
    if os.path.isfile(target) and known_sha256(target, verified) == item["sha256"]:
        return "present", target
    tried = []
    for source in candidates(item, mirrors, use_recorded_url):
        partial = os.path.join(dest, "." + item["filename"] + ".part")
        server = urllib.parse.urlsplit(source).netloc if is_url(source) else ""
        if server in silent:
            tried.append(f"{source}: not asked, {server} did not answer for an earlier file")
            continue
        try:
            if is_url(source):
                download(source, partial, timeout)
            else:
                if not os.path.isfile(source):
                    tried.append(f"{source}: no such file")
                    continue
                if os.path.exists(partial):
                    os.unlink(partial)
                copy_local(source, partial)
        except urllib.error.HTTPError as exc:
            tried.append(f"{source}: HTTP {exc.code}")
            if exc.code == 416 and os.path.exists(partial):
                os.unlink(partial)  # a stale partial longer than the file: start again next time
            continue
        except ShortRead as exc:
            tried.append(f"{source}: {exc}")
            continue
        except http.client.HTTPException as exc:  # not an HTTP answer, a bad URL: no traceback
            tried.append(f"{source}: {type(exc).__name__}: {str(exc).strip()}")
            continue
        except (urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or exc
            tried.append(f"{source}: {reason}")
            if server and did_not_answer(exc):
                silent.add(server)
            continue
        got = file_sha256(partial)
        if got != item["sha256"]:
            os.unlink(partial)
            tried.append(f"{source}: sha256 {got}, the lock has {item['sha256']}")
            continue
        os.replace(partial, target)
        stat = os.stat(target)
        verified[item["filename"]] = [stat.st_size, stat.st_mtime_ns, got]
        return "fetched", source
    if not tried:
        tried.append("no source: no mirror given and the lock's own URLs are not to be used")
    raise FetchError(f"{item['filename']} ({item['name']}=={item['version']}): " + "; ".join(tried))


def fetch_all(files, dest, mirrors=(), use_recorded_url=True, timeout=60, *, check_only=False,
              missing_ok=False):
    """Fetch every file; returns {'fetched': [...], 'present': [...], 'missing': [...]} of filenames and
    'reasons': {filename: why no source had it}.

    With ``check_only`` nothing is downloaded: files not yet in ``dest`` with their sha256 are listed
    as missing. All files are tried before FetchError names every one that failed; with ``missing_ok``
    those are listed as missing instead (with their reasons), for a caller that has another source.
    """
    result = {"fetched": [], "present": [], "missing": [], "reasons": {}}
    silent = set()
    if not check_only:
        os.makedirs(dest, exist_ok=True)
    verified = load_verified(dest)
    for item in files:
        target = os.path.join(dest, item["filename"])
        if check_only:
            ok = os.path.isfile(target) and known_sha256(target, verified) == item["sha256"]
            result["present" if ok else "missing"].append(item["filename"])
            continue
        try:
            state, _source = fetch_one(
                item, dest, list(mirrors), use_recorded_url, timeout, verified=verified, silent=silent
            )
        except FetchError as exc:
            result["missing"].append(item["filename"])
            result["reasons"][item["filename"]] = str(exc)
            continue
        result[state].append(item["filename"])
    if not check_only:
        save_verified(dest, verified)
    if result["reasons"] and not missing_ok:
        raise FetchError(
            f"{len(result['missing'])} of {len(files)} files could not be fetched into {dest}: "
            + " | ".join(result["reasons"][name] for name in result["missing"])
        )
    return result
