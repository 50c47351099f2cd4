"""module_utils/wheel_fetch: a lock's files fetched by name + sha256 from mirrors, then the lock's URL.

The HTTP side is a real server on loopback (http.server with Range support, as a mirror or an index
host answers), not a mock of urllib.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import threading
import typing

import pytest
from ansible.module_utils.wheel_fetch import (
    VERIFIED,
    FetchError,
    candidates,
    fetch_all,
    fetch_one,
    file_sha256,
    known_sha256,
    load_verified,
    save_verified,
)

CONTENT = b"wheel bytes " * 1000
SHA = hashlib.sha256(CONTENT).hexdigest()


class Handler(http.server.BaseHTTPRequestHandler):
    files: typing.ClassVar[dict] = {}
    requests: typing.ClassVar[list] = []

    def do_GET(self):
        type(self).requests.append((self.path, self.headers.get("Range")))
        body = type(self).files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        start = 0
        if self.headers.get("Range"):
            start = int(self.headers["Range"].split("=")[1].rstrip("-"))
            if start >= len(body):
                self.send_error(416)
                return
            self.send_response(206)
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        self.wfile.write(body[start:])

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Handler.files = {}
    Handler.requests = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def item(url="", filename="six-1.17.0-py3-none-any.whl", sha=SHA):
    return {"name": "six", "version": "1.17.0", "filename": filename, "url": url, "sha256": sha}


def test_candidates_order_mirrors_first_then_the_lock_url():
    got = candidates(
        item("https://files.example/a/six.whl", filename="six 1.whl"),
        ["http://m/", "/srv/wheels", "file:///opt/bundle", ""],
        True,
    )
    assert got == [
        "http://m/six%201.whl",
        "/srv/wheels/six 1.whl",
        "/opt/bundle/six 1.whl",
        "https://files.example/a/six.whl",
    ]
    assert candidates(item("https://files.example/six.whl"), [], False) == []
    assert candidates(item("file:///w/six.whl"), [], True) == ["/w/six.whl"]
    assert candidates(item("https://h/six.whl"), ["https://m"], True) == [
        "https://m/six-1.17.0-py3-none-any.whl",
        "https://h/six.whl",
    ]


def test_fetch_from_the_lock_url(server, tmp_path):
    Handler.files["/six.whl"] = CONTENT
    state, source = fetch_one(item(server + "/six.whl"), str(tmp_path), [], True)
    assert (state, source) == ("fetched", server + "/six.whl")
    assert (tmp_path / "six-1.17.0-py3-none-any.whl").read_bytes() == CONTENT
    assert not list(tmp_path.glob(".*part"))


def test_a_present_file_with_the_right_hash_is_kept(server, tmp_path):
    (tmp_path / "six-1.17.0-py3-none-any.whl").write_bytes(CONTENT)
    state, source = fetch_one(item(server + "/six.whl"), str(tmp_path), [], True)
    assert (state, source) == ("present", str(tmp_path / "six-1.17.0-py3-none-any.whl"))
    assert Handler.requests == []


def test_a_present_file_with_another_hash_is_fetched_again(server, tmp_path):
    (tmp_path / "six-1.17.0-py3-none-any.whl").write_bytes(b"tampered")
    Handler.files["/six.whl"] = CONTENT
    assert fetch_one(item(server + "/six.whl"), str(tmp_path), [], True)[0] == "fetched"
    assert file_sha256(str(tmp_path / "six-1.17.0-py3-none-any.whl")) == SHA


def test_a_mirror_directory_is_used_before_the_index(server, tmp_path):
    mirror = tmp_path / "bundle"
    mirror.mkdir()
    (mirror / "six-1.17.0-py3-none-any.whl").write_bytes(CONTENT)
    dest = tmp_path / "store"
    dest.mkdir()
    state, source = fetch_one(item(server + "/down.whl"), str(dest), [str(mirror)], True)
    assert (state, source) == ("fetched", str(mirror / "six-1.17.0-py3-none-any.whl"))
    assert Handler.requests == []  # the index was never asked
    assert (
        os.stat(dest / "six-1.17.0-py3-none-any.whl").st_ino
        == os.stat(mirror / "six-1.17.0-py3-none-any.whl").st_ino
    )


def test_a_mirror_with_a_wrong_file_falls_through_to_the_next_source(server, tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "six-1.17.0-py3-none-any.whl").write_bytes(b"other build")
    Handler.files["/six.whl"] = CONTENT
    dest = tmp_path / "store"
    state, source = fetch_one(item(server + "/six.whl"), str(dest.mkdir() or dest), [str(mirror)], True)
    assert (state, source) == ("fetched", server + "/six.whl")


def test_an_http_mirror_is_asked_by_file_name(server, tmp_path):
    Handler.files["/wheels/six-1.17.0-py3-none-any.whl"] = CONTENT
    state, _ = fetch_one(
        item("https://unreachable.invalid/six.whl"), str(tmp_path), [server + "/wheels/"], False
    )
    assert state == "fetched"
    assert Handler.requests == [("/wheels/six-1.17.0-py3-none-any.whl", None)]


def test_a_partial_download_is_resumed(server, tmp_path):
    (tmp_path / ".six-1.17.0-py3-none-any.whl.part").write_bytes(CONTENT[:5000])
    Handler.files["/six.whl"] = CONTENT
    assert fetch_one(item(server + "/six.whl"), str(tmp_path), [], True)[0] == "fetched"
    assert Handler.requests == [("/six.whl", "bytes=5000-")]
    assert (tmp_path / "six-1.17.0-py3-none-any.whl").read_bytes() == CONTENT


def test_a_partial_longer_than_the_file_is_dropped(server, tmp_path):
    partial = tmp_path / ".six-1.17.0-py3-none-any.whl.part"
    partial.write_bytes(CONTENT + b"more")
    Handler.files["/six.whl"] = CONTENT
    with pytest.raises(FetchError, match=r"six.whl: HTTP 416"):
        fetch_one(item(server + "/six.whl"), str(tmp_path), [], True)
    assert not partial.exists()
    assert fetch_one(item(server + "/six.whl"), str(tmp_path), [], True)[0] == "fetched"


def test_a_file_that_no_longer_matches_its_hash_is_named_and_not_kept(server, tmp_path):
    Handler.files["/six.whl"] = b"changed upstream"
    with pytest.raises(FetchError) as error:
        fetch_one(item(server + "/six.whl"), str(tmp_path), [], True)
    got = hashlib.sha256(b"changed upstream").hexdigest()
    assert str(error.value) == (
        f"six-1.17.0-py3-none-any.whl (six==1.17.0): {server}/six.whl: sha256 {got}, the lock has {SHA}"
    )
    assert list(tmp_path.iterdir()) == []


def test_every_source_and_its_reason_is_named(server, tmp_path):
    with pytest.raises(FetchError) as error:
        fetch_one(
            item(server + "/gone.whl"), str(tmp_path), [str(tmp_path / "none"), "http://127.0.0.1:9/"], True
        )
    message = str(error.value)
    assert message.startswith("six-1.17.0-py3-none-any.whl (six==1.17.0): ")
    assert f"{tmp_path}/none/six-1.17.0-py3-none-any.whl: no such file" in message
    assert "http://127.0.0.1:9/six-1.17.0-py3-none-any.whl: [Errno 111] Connection refused" in message
    assert f"{server}/gone.whl: HTTP 404" in message


def test_no_source_at_all():
    with pytest.raises(
        FetchError, match=r"no source: no mirror given and the lock's own URLs are not to be used"
    ):
        fetch_one(item("https://h/six.whl"), "/nonexistent", [], False)


def test_fetch_all_reports_fetched_present_and_tries_every_file(server, tmp_path):
    Handler.files["/a.whl"] = CONTENT
    (tmp_path / "b-1-py3-none-any.whl").write_bytes(CONTENT)
    files = [item(server + "/a.whl", "a-1-py3-none-any.whl"), item(server + "/x.whl", "b-1-py3-none-any.whl")]
    assert fetch_all(files, str(tmp_path)) == {
        "fetched": ["a-1-py3-none-any.whl"],
        "present": ["b-1-py3-none-any.whl"],
        "missing": [],
    }
    broken = [
        item(server + "/c.whl", "c-1-py3-none-any.whl"),
        item(server + "/a.whl", "d-1-py3-none-any.whl"),
        item(server + "/e.whl", "e-1-py3-none-any.whl"),
    ]
    with pytest.raises(FetchError) as error:
        fetch_all(broken, str(tmp_path))
    assert str(error.value).startswith(
        f"2 of 3 files could not be fetched into {tmp_path}: c-1-py3-none-any.whl"
    )
    assert " | e-1-py3-none-any.whl (six==1.17.0): " in str(error.value)
    assert (tmp_path / "d-1-py3-none-any.whl").exists()


def test_fetch_all_creates_the_directory_and_check_only_changes_nothing(server, tmp_path):
    Handler.files["/a.whl"] = CONTENT
    dest = tmp_path / "new" / "store"
    files = [item(server + "/a.whl", "a-1-py3-none-any.whl")]
    assert fetch_all(files, str(dest), check_only=True) == {
        "fetched": [],
        "present": [],
        "missing": ["a-1-py3-none-any.whl"],
    }
    assert not dest.exists()
    assert Handler.requests == []
    assert fetch_all(files, str(dest), ["", str(tmp_path)], use_recorded_url=True)["fetched"] == [
        "a-1-py3-none-any.whl"
    ]
    assert fetch_all(files, str(dest), check_only=True)["present"] == ["a-1-py3-none-any.whl"]


def test_hashes_are_remembered_while_size_and_mtime_hold(server, tmp_path):
    Handler.files["/a.whl"] = CONTENT
    files = [item(server + "/a.whl", "a-1-py3-none-any.whl")]
    fetch_all(files, str(tmp_path))
    target = tmp_path / "a-1-py3-none-any.whl"
    verified = load_verified(str(tmp_path))
    stat = target.stat()
    assert verified == {"a-1-py3-none-any.whl": [stat.st_size, stat.st_mtime_ns, SHA]}
    # same size and mtime: the remembered hash is trusted (the file is not read again)
    target.write_bytes(b"X" * len(CONTENT))
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert fetch_all(files, str(tmp_path))["present"] == ["a-1-py3-none-any.whl"]
    # another mtime: hashed again, found wrong, fetched again
    os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    assert fetch_all(files, str(tmp_path))["fetched"] == ["a-1-py3-none-any.whl"]
    assert target.read_bytes() == CONTENT


def test_known_sha256_of_a_missing_file_and_a_damaged_record(tmp_path):
    assert known_sha256(str(tmp_path / "none.whl"), {}) is None
    (tmp_path / VERIFIED).write_text("not json")
    assert load_verified(str(tmp_path)) == {}
    (tmp_path / VERIFIED).write_text("[1, 2]")
    assert load_verified(str(tmp_path)) == {}
    path = tmp_path / "f.whl"
    path.write_bytes(CONTENT)
    record = {"f.whl": "garbage"}
    assert known_sha256(str(path), record) == SHA
    assert record["f.whl"][2] == SHA
    save_verified(str(tmp_path), record)
    assert load_verified(str(tmp_path)) == record
    assert not (tmp_path / (VERIFIED + ".tmp")).exists()
