"""A stand-in for the Hugging Face Hub's file API (the real Hub cannot be reached from the test hosts),
serving repositories that a test generates, with only what huggingface_hub and model_weights call:

- ``GET /api/models/<repo>/revision/<rev>[?blobs=true]``: the model info, siblings with ``size``,
  ``blobId`` (git blob sha1) and, for LFS files, ``lfs: {sha256, size, pointerSize}``;
- ``HEAD``/``GET /<repo>/resolve/<rev>/<file>``: ``ETag`` (the sha256 for LFS files, else the blob
  sha1), ``X-Repo-Commit``, ``X-Linked-Size`` and ``X-Linked-Etag`` (LFS), ``Accept-Ranges``, and
  ``Range: bytes=N-`` answered 206 with ``Content-Range``.

Errors as the Hub sends them (huggingface_hub's ``hf_raise_for_status`` reads the same headers): an
unknown revision is 404 ``X-Error-Code: RevisionNotFound``; an unknown repository, or a private one
without a token, 401 ``X-Error-Code: RepoNotFound``; a refused token 401 ``X-Error-Message: Invalid
credentials in Authorization header``.

``throttle`` (bytes per second) slows file bodies so a test can kill a download midway; ``requests``
records (method, path, Range) for assertions. Also serves a staged directory as a plain mirror
(``mirror_dir``). ``python hub_server.py DIR [PORT]`` serves a repository written by ``make_repo``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

LFS_MIN = 1024  # files at least this large are LFS files (as .gitattributes would say for *.safetensors)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


class Repo:
    """One repository at one commit: {name: bytes}, read from a directory."""

    def __init__(self, repo_id: str, directory: Path, commit: str, *, tags=(), private=False,
                 reported_sizes: dict[str, int] | None = None):
        self.repo_id, self.directory, self.commit = repo_id, Path(directory), commit
        self.tags, self.private = set(tags), private
        self.files = {}
        for path in sorted(self.directory.rglob("*")):
            if path.is_file() and not path.name.startswith("."):
                name = path.relative_to(self.directory).as_posix()
                self.files[name] = self._meta(path)
        # what the API reports instead of the real size (a repository larger than the disk)
        for name, size in (reported_sizes or {}).items():
            self.files[name]["size"] = size

    @staticmethod
    def _meta(path: Path) -> dict:
        sha256, sha1 = hashlib.sha256(), hashlib.sha1()
        size = path.stat().st_size
        sha1.update(b"blob %d\0" % size)
        with path.open("rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                sha256.update(block)
                sha1.update(block)
        return {"size": size, "sha256": sha256.hexdigest(), "sha1": sha1.hexdigest(), "lfs": size >= LFS_MIN}

    def sibling(self, name: str) -> dict:
        meta = self.files[name]
        entry = {"rfilename": name, "size": meta["size"], "blobId": meta["sha1"]}
        if meta["lfs"]:
            entry["lfs"] = {"sha256": meta["sha256"], "size": meta["size"], "pointerSize": 134}
        return entry


class HubStandIn(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, port: int = 0, token: str = "", throttle: int = 0, bind: str = "127.0.0.1"):
        super().__init__((bind, port), _Handler)
        self.repos: dict[str, Repo] = {}
        self.token, self.throttle = token, throttle
        self.requests: list[tuple[str, str, str]] = []
        self.mirror_dir: Path | None = None
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.server_address[0]}:{self.server_address[1]}"

    def add(self, repo: Repo) -> Repo:
        self.repos[repo.repo_id] = repo
        return repo

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.shutdown()
        self.server_close()


class _Handler(BaseHTTPRequestHandler):
    server: HubStandIn
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _send(self, status, body=b"", headers=None):
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if "Content-Length" not in (headers or {}):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)

    def _error(self, status, code="", message=""):
        headers = {"Content-Type": "application/json"}
        if code:
            headers["X-Error-Code"] = code
        if message:
            headers["X-Error-Message"] = message
        self._send(status, json.dumps({"error": message or code}).encode(), headers)

    def _authorized(self, repo: Repo | None) -> bool:
        auth = self.headers.get("Authorization", "")
        if auth and self.server.token and auth != f"Bearer {self.server.token}":
            self._error(401, message="Invalid credentials in Authorization header")
            return False
        if repo is None or (repo.private and not auth):
            self._error(401, "RepoNotFound", "Repository not found")
            return False
        return True

    def _revision(self, repo: Repo, revision: str) -> bool:
        if revision in (repo.commit, *repo.tags):
            return True
        self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return False

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
        self.server.requests.append((self.command, path, self.headers.get("Range", "")))
        if self.server.mirror_dir is not None and path.startswith("/mirror/"):
            return self._file(self.server.mirror_dir / path[len("/mirror/"):], {}, None)
        api = re.match(r"^/api/models/(.+?)(?:/revision/([^/]+))?$", path)
        if api:
            repo = self.server.repos.get(api.group(1))
            if not self._authorized(repo) or not self._revision(repo, api.group(2) or repo.commit):
                return None
            info = {"id": repo.repo_id, "modelId": repo.repo_id, "sha": repo.commit, "private": repo.private,
                    "siblings": [repo.sibling(n) for n in repo.files]}
            return self._send(200, json.dumps(info).encode(), {"Content-Type": "application/json"})
        resolve = re.match(r"^/(.+?)/resolve/([^/]+)/(.+)$", path)
        if resolve:
            repo = self.server.repos.get(resolve.group(1))
            if not self._authorized(repo) or not self._revision(repo, resolve.group(2)):
                return None
            name = resolve.group(3)
            if name not in repo.files:
                return self._error(404, "EntryNotFound", f"{name} does not exist")
            meta = repo.files[name]
            etag = meta["sha256"] if meta["lfs"] else meta["sha1"]
            headers = {"ETag": f'"{etag}"', "X-Repo-Commit": repo.commit}
            if meta["lfs"]:
                headers.update({"X-Linked-Size": str(meta["size"]), "X-Linked-Etag": f'"{meta["sha256"]}"'})
            return self._file(repo.directory / name, headers, meta)
        return self._error(404, message=f"no route {path}")

    def _file(self, path: Path, headers: dict, meta: dict | None):
        if not path.is_file():
            return self._error(404, "EntryNotFound", "no such file")
        size = path.stat().st_size
        start = 0
        wanted = re.match(r"^bytes=(\d+)-$", self.headers.get("Range", ""))
        status = 200
        if wanted and int(wanted.group(1)) < size:
            start, status = int(wanted.group(1)), 206
            headers["Content-Range"] = f"bytes {start}-{size - 1}/{size}"
        headers.update({"Accept-Ranges": "bytes", "Content-Length": str(size - start),
                        "Content-Type": "application/octet-stream"})
        self._send(status, b"", headers)
        if self.command == "HEAD":
            return None
        with path.open("rb") as handle:
            handle.seek(start)
            step = max(self.server.throttle // 10, 1 << 14) if self.server.throttle else 1 << 20
            for block in iter(lambda: handle.read(step), b""):
                try:
                    self.wfile.write(block)
                except (BrokenPipeError, ConnectionResetError):
                    return None
                if self.server.throttle:
                    time.sleep(len(block) / self.server.throttle)
        return None


def make_repo(directory: Path, weights: dict[str, int] | None = None, config: dict | None = None,
              seed: int = 0) -> Path:
    """A tiny model repository: config.json, a tokenizer file and weight shards of the given sizes
    (pseudo-random bytes: a flipped byte changes the hash)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = config or {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
                        "vocab_size": 128}
    (directory / "config.json").write_text(json.dumps(config, indent=1))
    vocab = {str(i): i for i in range(16)}
    (directory / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))
    for index, (name, size) in enumerate(sorted((weights or {"model.safetensors": 256 * 1024}).items())):
        with (directory / name).open("wb") as handle:
            block = hashlib.sha256(f"{seed}-{index}".encode()).digest() * 2048  # 64 KiB
            left = size
            while left > 0:
                handle.write(block[:left])
                left -= len(block)
    return directory


if __name__ == "__main__":
    root = Path(sys.argv[1])
    server = HubStandIn(port=int(sys.argv[2]) if len(sys.argv) > 2 else 8088,
                        bind=os.environ.get("HUB_STAND_IN_BIND", "127.0.0.1"))
    server.add(Repo(os.environ.get("HUB_STAND_IN_REPO", "stand-in/model"), root,
                    os.environ.get("HUB_STAND_IN_COMMIT", "0" * 40), tags={"v1"}))
    print(server.url, flush=True)
    server.serve_forever()
