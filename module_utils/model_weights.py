"""Model weights staged once per host: the source an entry names, where it lives, the space it needs,
the verified manifest, resumable transfer, and whether an EAGLE-3 draft fits its target.

A staged directory holds the repository's files plus ``.model_weights.json``, the manifest written only
after every file matched the size and hash its source publishes. The manifest is the marker: a later
run (a rolling rebuild, a new stack) stats and reads it, and never hashes hundreds of GB again. The
same file makes any staged directory a mirror for other hosts (a ``url`` source reads it).

Stdlib only, Python 3.8+ (runs on managed hosts); the Hub's metadata comes through
``model_weights_hub`` (huggingface_hub), which only the download path imports.
"""

import hashlib
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request

MANIFEST = ".model_weights.json"
STATE_DIR = ".model_weights"  # partial downloads and the progress file, beside the files
PROGRESS = "progress.json"
MANIFEST_VERSION = 1
CHUNK = 1 << 20
SHA1_RE = re.compile(r"^[0-9a-f]{40}$")
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?$")
REVISION_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
SOURCE_KEYS = {"repo", "revision", "url", "path", "endpoint"}
GIB = 1 << 30


class WeightsError(Exception):
    """Bad input or a source that failed; the message says what to do."""


def parse_source(weights, prefix):
    """Check one ``weights`` mapping; {"kind": hub|url|path, ...}. ``prefix`` names the variable."""
    if not isinstance(weights, dict):
        raise WeightsError(f"{prefix}: must be a mapping with repo + revision, url + revision, or path; "
                           f"got {weights!r}")
    unknown = sorted(set(weights) - SOURCE_KEYS)
    if unknown:
        raise WeightsError(f"{prefix}.{unknown[0]}: unknown key (known: {', '.join(sorted(SOURCE_KEYS))})")
    given = [k for k in ("url", "path") if weights.get(k)] or (["repo"] if weights.get("repo") else [])
    if len(given) != 1:
        raise WeightsError(f"{prefix}: name exactly one source: repo (a Hub repository), url (a mirror "
                           f"serving a staged directory) or path (a directory on the host); "
                           f"got {', '.join(given) or 'none'}")
    kind = {"repo": "hub", "url": "url", "path": "path"}[given[0]]
    if kind == "path":
        path = weights["path"]
        if not isinstance(path, str) or not path.startswith("/"):
            raise WeightsError(f"{prefix}.path: must be an absolute path, got {path!r}")
        extra = sorted(set(weights) - {"path"})
        if extra:
            raise WeightsError(f"{prefix}.{extra[0]}: not used with path (the directory is used as it is)")
        return {"kind": "path", "path": path.rstrip("/") or "/"}
    repo = weights.get("repo")
    if kind == "url":
        url = weights["url"]
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise WeightsError(f"{prefix}.url: must be an http:// or https:// URL, got {url!r}")
        if "endpoint" in weights:
            raise WeightsError(f"{prefix}.endpoint: only with repo (a url is the mirror itself)")
        if not repo:
            raise WeightsError(f"{prefix}.repo: required with url (it names the directory under "
                               f"model_weights_root, e.g. the Hub id the mirror copies)")
    if not isinstance(repo, str) or not REPO_RE.match(repo) or ".." in repo:
        raise WeightsError(f"{prefix}.repo: must be a Hub id such as org/name, got {repo!r}")
    revision = weights.get("revision")
    if not isinstance(revision, str) or not REVISION_RE.match(revision):
        raise WeightsError(f"{prefix}.revision: required, a commit sha or a tag (a branch such as main "
                           f"moves, so two hosts could stage different weights), got {revision!r}")
    if revision in ("main", "master"):
        raise WeightsError(f"{prefix}.revision: {revision} is a branch and moves; pin a commit sha or a tag")
    source = {"kind": kind, "repo": repo, "revision": revision}
    if kind == "url":
        source["url"] = weights["url"].rstrip("/")
    else:
        endpoint = weights.get("endpoint") or ""
        if endpoint and not (isinstance(endpoint, str) and endpoint.startswith(("http://", "https://"))):
            raise WeightsError(f"{prefix}.endpoint: must be an http:// or https:// URL, got {endpoint!r}")
        source["endpoint"] = endpoint.rstrip("/")
    return source


def staged_dir(root, source):
    """Where the source's files live on the host: <root>/<repo>/<revision>, or the path itself."""
    if source["kind"] == "path":
        return source["path"]
    return os.path.join(root, source["repo"], source["revision"])


def identity(source):
    """What a manifest must record to stand for this source (the endpoint or mirror is not part of it:
    the same repository and revision from a mirror are the same files)."""
    return {"repo": source["repo"], "revision": source["revision"]}


def _safe_name(name):
    if not isinstance(name, str):
        return False
    parts = name.split("/")
    return (name and all(p not in ("", ".", "..") for p in parts)  # a leading / leaves an empty part
            and parts[0] != STATE_DIR and name != MANIFEST)


def file_entry(name, size, sha256=None, sha1=None):
    """One file of a plan: its name, size and the hash its source publishes (sha256, else git sha1)."""
    if not _safe_name(name):
        raise WeightsError(f"the source lists a file named {name!r}: refused (not a plain relative path)")
    if not (isinstance(size, int) and not isinstance(size, bool) and size >= 0):
        raise WeightsError(f"{name}: the source gives no size ({size!r}), so it cannot be checked")
    if sha256:
        if not SHA256_RE.match(sha256):
            raise WeightsError(f"{name}: the source's sha256 {sha256!r} is not 64 hex digits")
        return {"name": name, "size": size, "sha256": sha256}
    if not (sha1 and SHA1_RE.match(sha1)):
        raise WeightsError(f"{name}: the source publishes neither a sha256 nor a git blob sha1")
    return {"name": name, "size": size, "sha1": sha1}


def hub_files(siblings):
    """Plan entries from the Hub's siblings (``files_metadata=True``): LFS files carry a sha256, the
    others a git blob sha1 (``blob_id``). Config files first, so a draft is checked before its weights."""
    entries = []
    for s in siblings:
        lfs = s.get("lfs") or {}
        entries.append(file_entry(s.get("rfilename"), lfs.get("size", s.get("size")),
                                  sha256=lfs.get("sha256"), sha1=s.get("blob_id")))
    return order(entries)


def order(entries):
    """Small files first (configs and tokenizers answer the draft check early), then by name."""
    return sorted(entries, key=lambda e: (e["size"], e["name"]))


def manifest_files(manifest, where):
    """Plan entries from a staged directory's manifest served by a mirror."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("files"), list):
        raise WeightsError(f"{where} is not a model_weights manifest (no files list)")
    return order([file_entry(f.get("name"), f.get("size"), f.get("sha256"), f.get("sha1"))
                  for f in manifest["files"] if isinstance(f, dict)])


def partial_path(directory, name):
    return os.path.join(directory, STATE_DIR, "partial", name + ".part")


def _size(path):
    """The file's size, None when there is no file."""
    try:
        return os.stat(path).st_size
    except OSError:
        return None


def bytes_present(directory, entries):
    """Bytes already on disk that count toward the plan: whole files of the right size and partial
    downloads (a resume keeps them)."""
    done = 0
    for e in entries:
        size = _size(os.path.join(directory, e["name"]))
        if size == e["size"]:
            done += size
        else:
            done += min(_size(partial_path(directory, e["name"])) or 0, e["size"])
    return done


def free_bytes(path):
    """Free bytes for an unprivileged writer on the filesystem that holds ``path`` (or would)."""
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe) or "/"
    st = os.statvfs(probe)
    return st.f_bavail * st.f_frsize


def check_space(needed, free, directory, total):
    """Refuse before anything is written when the rest of the download does not fit."""
    if needed > free:
        raise WeightsError(f"not enough space for {directory}: the repository is {total / GIB:.2f} GiB, "
                           f"{needed / GIB:.2f} GiB ({needed} bytes) still to download, "
                           f"{free / GIB:.2f} GiB ({free} bytes) free there; free space or set "
                           f"model_weights_root to a larger disk")


def _feed(digest, path):
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(CHUNK), b""):
            digest.update(block)


def hash_file(path, algorithm):
    """sha256 of the file, or the git blob sha1 (``blob <size>\\0`` + content) for non-LFS files."""
    digest = hashlib.new(algorithm)
    if algorithm == "sha1":
        digest.update(b"blob %d\0" % os.stat(path).st_size)
    _feed(digest, path)
    return digest.hexdigest()


def mismatch(path, entry):
    """Why the file at ``path`` is not the entry's file, or "" when it is."""
    size = _size(path)
    if size is None:
        return "missing"
    if size != entry["size"]:
        return f"size {size}, the source says {entry['size']}"
    algorithm = "sha256" if "sha256" in entry else "sha1"
    got = hash_file(path, algorithm)
    if got != entry[algorithm]:
        return f"{algorithm} {got}, the source says {entry[algorithm]}"
    return ""


def read_manifest(directory):
    """The manifest of a staged directory, or None (absent or unreadable: not staged)."""
    try:
        with open(os.path.join(directory, MANIFEST), "rb") as handle:
            manifest = json.loads(handle.read().decode())  # UTF-8, whatever the locale
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def is_staged(manifest, source):
    """True when the manifest records this repository and revision, verified (a stat and a read: no
    file is hashed)."""
    return (isinstance(manifest, dict) and manifest.get("version") == MANIFEST_VERSION
            and manifest.get("verified") is True and manifest.get("source") == identity(source))


def build_manifest(source, commit, entries, now=None):
    return {"version": MANIFEST_VERSION, "verified": True, "source": identity(source), "commit": commit,
            "total_bytes": sum(e["size"] for e in entries), "files": entries,
            "verified_at": int(time.time() if now is None else now)}


def write_json_atomic(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as handle:  # json.dumps writes ASCII only (ensure_ascii)
        handle.write(json.dumps(data, indent=1, sort_keys=True).encode() + b"\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def progress_line(done, total, elapsed, current="", moved=None):
    """One progress line: done / total, percentage, the rate of this run (``moved`` bytes in ``elapsed``
    seconds; default ``done``), and the file being fetched."""
    percent = 100.0 * done / total if total else 100.0
    moved = done if moved is None else moved
    rate = moved / elapsed / (1 << 20) if elapsed > 0 else 0.0
    line = f"{done / GIB:.2f} / {total / GIB:.2f} GiB ({percent:.1f}%), {rate:.1f} MiB/s"
    return f"{line}, {current}" if current else line


class _StripAuthOnRedirect(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but never carry the token to another host (the Hub redirects LFS files to a
    CDN with a signed URL)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: PLR0917 (urllib's signature)
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        other_host = urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc
        if new is not None and other_host:
            new.remove_header("Authorization")
        return new


OPENER = urllib.request.build_opener(_StripAuthOnRedirect)


def fetch_file(url, headers, directory, entry, *, timeout=60, on_bytes=None, opener=None):
    """Download one file into ``<dir>/.model_weights/partial/<name>.part``, resuming from what is there
    (HTTP Range), check its size and hash, then move it in place. Returns the bytes that were already
    there (0: a fresh download). Raises WeightsError, or urllib's HTTPError/URLError for the caller to
    name."""
    part = partial_path(directory, entry["name"])
    os.makedirs(os.path.dirname(part), exist_ok=True)
    have = _size(part) or 0
    if have > entry["size"]:
        os.unlink(part)
        have = 0
    resumed = have
    # hashed while it arrives (what is already there first): no second pass over the file
    algorithm = "sha256" if "sha256" in entry else "sha1"
    digest = hashlib.new(algorithm)
    if algorithm == "sha1":
        digest.update(b"blob %d\0" % entry["size"])
    if have < entry["size"]:
        request = urllib.request.Request(url, headers=dict(headers))
        request.add_header("Accept-Encoding", "identity")
        if have:
            request.add_header("Range", f"bytes={have}-")
        with (opener or OPENER).open(request, timeout=timeout) as response:
            if have and response.status != 206:  # the server ignored the range: start over
                have = resumed = 0
            if have:
                _feed(digest, part)
            with open(part, "ab" if have else "wb") as out:
                for block in iter(lambda: response.read(CHUNK), b""):
                    out.write(block)
                    digest.update(block)
                    if on_bytes:
                        on_bytes(len(block))
    else:
        if not have:  # an empty file: nothing to download
            open(part, "wb").close()
        _feed(digest, part)
    size = _size(part)
    wrong = (f"size {size}, the source says {entry['size']}" if size != entry["size"]
             else f"{algorithm} {digest.hexdigest()}, the source says {entry[algorithm]}"
             if digest.hexdigest() != entry[algorithm] else "")
    if wrong:
        os.unlink(part)
        raise WeightsError(f"{entry['name']} from {url}: {wrong}; the partial file was removed, run again "
                           f"to fetch it anew (a mirror serving other bytes than it lists fails again)")
    target = os.path.join(directory, entry["name"])
    os.makedirs(os.path.dirname(target), exist_ok=True)
    os.chmod(part, 0o644)
    os.replace(part, target)
    return resumed


def http_error_message(status, what, where, has_token=False):
    """An HTTP failure of a weights source, said plainly (the token itself never appears)."""
    if status == 401:
        return (f"{where} refused the token (401 Unauthorized) for {what}: "
                + ("check the HF_TOKEN in sglang_service_secrets (not shown)" if has_token
                   else "the repository needs a token: set HF_TOKEN in sglang_service_secrets"))
    if status == 403:
        return (f"{where} denied access (403) to {what}: the token's account has no access (a gated "
                f"repository: accept its terms on the Hub with that account)")
    if status == 404:
        return f"{where} has no {what} (404): check the repository name and revision"
    return f"{where} answered HTTP {status} for {what}"


def unreachable_message(where, reason):
    return (f"weights source {where} does not answer ({reason}): check the address, the host's network "
            f"or proxy, or name a reachable mirror (weights.endpoint / model_weights_hub_endpoint)")


def _text_config(config):
    """The language model's part of a config (multimodal targets keep it under text_config)."""
    text = config.get("text_config")
    return text if isinstance(text, dict) else config


def check_draft_fits(target, draft, algorithm, target_name, draft_name):
    """Fail when an EAGLE-3 draft cannot serve the target (sglang 0.5.23's llama_eagle3: the draft's
    fc reads 3 x ``target_hidden_size`` (else its ``hidden_size``) of the target's hidden states, and
    its embedding indexes the target's token ids)."""
    if algorithm != "EAGLE3":
        return
    arches = draft.get("architectures") or []
    if not any(isinstance(a, str) and a.endswith("Eagle3") for a in arches):
        raise WeightsError(
            f"draft {draft_name} is not an EAGLE-3 draft: its architectures are {arches or 'not given'} "
            f"(model_type {draft.get('model_type')!r}); sglang 0.5.23 loads EAGLE-3 drafts as *Eagle3 "
            f"classes (e.g. LlamaForCausalLMEagle3). Name the EAGLE-3 draft trained for {target_name}")
    text = _text_config(target)
    want = text.get("hidden_size")
    reads = draft.get("target_hidden_size", draft.get("hidden_size"))
    if want != reads:
        raise WeightsError(
            f"draft {draft_name} ({', '.join(arches)}) reads hidden states of size {reads}; target "
            f"{target_name} ({', '.join(target.get('architectures') or [])}, model_type "
            f"{target.get('model_type')!r}) has hidden_size {want}: the draft was trained for another model")
    if draft.get("vocab_size") != text.get("vocab_size"):
        raise WeightsError(
            f"draft {draft_name} has vocab_size {draft.get('vocab_size')}, target {target_name} has "
            f"{text.get('vocab_size')}: the draft was trained with another tokenizer")


def read_config(directory):
    """config.json of a staged (or partly staged) directory."""
    path = os.path.join(directory, "config.json")
    try:
        with open(path, "rb") as handle:
            config = json.loads(handle.read().decode())  # UTF-8, whatever the locale
    except OSError as exc:
        raise WeightsError(f"{path}: cannot read it ({exc.strerror}); "
                           f"a model directory has a config.json") from None
    except ValueError as exc:
        raise WeightsError(f"{path}: not JSON ({exc})") from None
    if not isinstance(config, dict):
        raise WeightsError(f"{path}: not a JSON object")
    return config


def url_error_reason(exc):
    """The reason inside a urllib URLError (a refused connection, a name that does not resolve)."""
    reason = getattr(exc, "reason", exc)
    return getattr(reason, "strerror", None) or str(reason)


def mirror_plan(source, timeout, opener=None):
    """(commit, entries) from a mirror: the manifest of a staged directory it serves."""
    where = source["url"] + "/" + MANIFEST
    try:
        with (opener or OPENER).open(where, timeout=timeout) as response:
            manifest = json.loads(response.read().decode())
    except urllib.error.HTTPError as exc:
        raise WeightsError(http_error_message(exc.code, f"{MANIFEST} of {source['repo']}@"
                                              f"{source['revision']}", source["url"])) from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        raise WeightsError(unreachable_message(source["url"], url_error_reason(exc))) from None
    except ValueError as exc:
        raise WeightsError(f"{where} is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("source") != identity(source):
        got = manifest.get("source") if isinstance(manifest, dict) else None
        raise WeightsError(f"{where} holds {got}, not {identity(source)}: the mirror serves other weights")
    return manifest.get("commit") or source["revision"], manifest_files(manifest, where)


class Progress:
    """Writes the progress file the role's progress lines read (default: in the staged directory)."""

    current = ""  # the file being fetched, named in the progress line

    def __init__(self, path, total, done, clock=time.monotonic):
        self.path = path
        self.total, self.done, self.start_done = total, done, done
        self.clock, self.started, self.last = clock, clock(), 0.0

    def forget(self, count):
        """Bytes counted as present that are not (a file fetched again)."""
        self.done -= count
        self.start_done -= count

    def add(self, count):
        self.done += count
        if self.clock() - self.last >= 2:
            self.write()

    def write(self, finished=False, error=""):
        self.last = self.clock()
        elapsed = self.last - self.started
        line = progress_line(self.done, self.total, elapsed, self.current, self.done - self.start_done)
        write_json_atomic(self.path, {"done": self.done, "total": self.total, "finished": finished,
                                      "error": error, "line": line, "elapsed": round(elapsed, 1)})


def stage(source, root, *, plan, file_url, headers, draft_of=None, algorithm=None, check_mode=False,
          timeout=60, free=free_bytes, progress_file=""):
    """Stage one source under ``root``. ``plan()`` -> (commit, entries) asks the source (only when the
    directory is not staged); ``file_url(commit, name)`` is where a file is fetched. Returns the result
    the module reports."""
    directory = staged_dir(root, source)
    result = {"dir": directory, "changed": False, "downloaded_bytes": 0, "resumed": [], "refetched": []}
    if source["kind"] == "path":
        read_config(directory)  # a path must be a model directory already
        result.update(status="path", files=0, total_bytes=0)
        return _done(progress_file, _checked_draft(result, draft_of, algorithm, source), check_mode)
    manifest = read_manifest(directory)
    if is_staged(manifest, source):
        result.update(status="staged", commit=manifest.get("commit"), files=len(manifest.get("files", [])),
                      total_bytes=manifest.get("total_bytes", 0))
        return _done(progress_file, _checked_draft(result, draft_of, algorithm, source), check_mode)
    commit, entries = plan()
    total = sum(e["size"] for e in entries)
    done = bytes_present(directory, entries)
    needed = total - done
    result.update(commit=commit, files=len(entries), total_bytes=total, status="downloaded",
                  to_download_bytes=needed, changed=True)
    check_space(needed, free(directory), directory, total)
    if check_mode:
        result["status"] = "would download"
        return result
    os.makedirs(os.path.join(directory, STATE_DIR, "partial"), mode=0o755, exist_ok=True)
    progress = Progress(progress_file or os.path.join(directory, STATE_DIR, PROGRESS), total, done)
    try:
        for entry in entries:
            _stage_file(directory, entry, file_url(commit, entry["name"]), headers, timeout=timeout,
                        progress=progress, result=result)
            if entry["name"] == "config.json":
                _checked_draft(result, draft_of, algorithm, source)
        _checked_draft(result, draft_of, algorithm, source)
        write_json_atomic(os.path.join(directory, MANIFEST), build_manifest(source, commit, entries))
    except Exception as exc:
        progress.write(finished=True, error=str(exc))
        raise
    progress.write(finished=True)
    result["downloaded_bytes"] = progress.done - progress.start_done
    return result


def _done(progress_file, result, check_mode):
    """Mark a staging that needed no download as ended, so the role's progress step returns at once."""
    if progress_file and not check_mode:
        write_json_atomic(progress_file, {"finished": True, "error": "", "line": result["status"],
                                          "done": 0, "total": result["total_bytes"], "elapsed": 0})
    return result


def _stage_file(directory, entry, url, headers, *, timeout, progress, result):
    target = os.path.join(directory, entry["name"])
    if _size(target) == entry["size"]:
        wrong = mismatch(target, entry)
        if not wrong:
            return
        result["refetched"].append(f"{entry['name']}: {wrong}")
        progress.forget(entry["size"])
        os.unlink(target)
    progress.current = entry["name"]
    progress.write()
    try:
        if fetch_file(url, headers, directory, entry, timeout=timeout, on_bytes=progress.add):
            result["resumed"].append(entry["name"])
    except urllib.error.HTTPError as exc:
        raise WeightsError(http_error_message(exc.code, entry["name"], url.split("/")[2],
                                              "Authorization" in headers)) from None
    except (urllib.error.URLError, ConnectionError, TimeoutError) as exc:
        raise WeightsError(unreachable_message(url.split("/")[2], url_error_reason(exc))) from None
    except OSError as exc:  # the disk: full, read-only, permissions
        raise WeightsError(f"writing {entry['name']} under {directory}: {exc.strerror or exc}") from None


def _checked_draft(result, draft_of, algorithm, source):
    """Compare the draft's config.json (just staged) with its target's staged one."""
    if draft_of and not result.get("draft_checked") and os.path.exists(os.path.join(result["dir"],
                                                                                    "config.json")):
        check_draft_fits(read_config(draft_of), read_config(result["dir"]), algorithm, draft_of,
                         source.get("repo") or result["dir"])
        result["draft_checked"] = True
    return result
