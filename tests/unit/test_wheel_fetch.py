"""module_utils/wheel_fetch: a lock's files fetched by name + sha256 from mirrors, then the lock's URL.

The HTTP side is a real server on loopback (http.server with Range support, as a mirror or an index
host answers), not a mock of urllib.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import socket
import threading
import time
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
from halves import send_in_halves

STALL = 2.0
CONTENT = b"wheel bytes " * 1000
SHA = hashlib.sha256(CONTENT).hexdigest()


class Handler(http.server.BaseHTTPRequestHandler):
    """Serves ``files`` by path, with Range unless ``ignore_range``; a path under ``/cut/`` sends half its
    bytes under the whole Content-Length and closes (a dropped connection); ``/garbage`` is not HTTP; one
    under ``/stall/`` answers after STALL seconds, one under ``/midstall/`` stalls for STALL seconds
    half-way through its body; one under ``/nolength/`` sends no Content-Length (the body ends with the
    connection)."""

    files: typing.ClassVar[dict] = {}
    requests: typing.ClassVar[list] = []
    ignore_range = False

    def do_GET(self):
        type(self).requests.append((self.path, self.headers.get("Range")))
        if self.path == "/garbage":
            self.wfile.write(b"SSH-2.0-OpenSSH_9.2\r\n")
            return
        if self.path.startswith("/stall/"):
            time.sleep(STALL)
        body = type(self).files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        if self.path.startswith("/nolength/"):
            send_in_halves(self, body, content_length=False)
            return
        if self.path.startswith("/midstall/"):
            send_in_halves(self, body, between=lambda: time.sleep(STALL))
            return
        if self.path.startswith("/cut/"):
            send_in_halves(self, body, rest=False)
            return
        start = 0
        if self.headers.get("Range") and not type(self).ignore_range:
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


class Server(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        pass  # a client that gave up (a timeout test) breaks the pipe: nothing to report


@pytest.fixture
def server():
    Handler.files = {}
    Handler.requests = []
    Handler.ignore_range = False
    httpd = Server(("127.0.0.1", 0), Handler)
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


def test_a_download_cut_short_is_named_kept_and_resumed_by_the_next_run(server, tmp_path):
    Handler.files["/cut/six.whl"] = CONTENT
    Handler.files["/six.whl"] = CONTENT
    partial = tmp_path / ".six-1.17.0-py3-none-any.whl.part"
    with pytest.raises(FetchError) as error:
        fetch_one(item(server + "/cut/six.whl"), str(tmp_path), [], True)
    half = len(CONTENT) // 2
    assert str(error.value) == (
        f"six-1.17.0-py3-none-any.whl (six==1.17.0): {server}/cut/six.whl: the connection closed after "
        f"{half} of {len(CONTENT)} bytes ({half} kept to resume from)"
    )
    assert [p.name for p in tmp_path.iterdir()] == [partial.name]
    assert partial.read_bytes() == CONTENT[:half]
    assert fetch_one(item(server + "/six.whl"), str(tmp_path), [], True)[0] == "fetched"
    assert Handler.requests[-1] == ("/six.whl", f"bytes={half}-")
    assert (tmp_path / "six-1.17.0-py3-none-any.whl").read_bytes() == CONTENT


def test_a_resumed_download_cut_short_again_counts_only_what_this_response_sent(server, tmp_path):
    partial = tmp_path / ".six-1.17.0-py3-none-any.whl.part"
    partial.write_bytes(CONTENT[:1000])
    Handler.files["/cut/six.whl"] = CONTENT
    Handler.ignore_range = True  # the whole file again, cut: the partial is replaced, not appended to
    with pytest.raises(FetchError, match=r"closed after 6000 of 12000 bytes \(6000 kept to resume from\)$"):
        fetch_one(item(server + "/cut/six.whl"), str(tmp_path), [], True)
    assert partial.read_bytes() == CONTENT[:6000]


def test_a_server_that_ignores_range_sends_the_whole_file_which_replaces_the_partial(server, tmp_path):
    (tmp_path / ".six-1.17.0-py3-none-any.whl.part").write_bytes(b"stale bytes")
    Handler.files["/six.whl"] = CONTENT
    Handler.ignore_range = True
    assert fetch_one(item(server + "/six.whl"), str(tmp_path), [], True)[0] == "fetched"
    assert Handler.requests == [("/six.whl", "bytes=11-")]
    assert (tmp_path / "six-1.17.0-py3-none-any.whl").read_bytes() == CONTENT


def test_an_answer_that_is_not_http_is_named_not_a_traceback(server, tmp_path):
    with pytest.raises(FetchError) as error:
        fetch_one(item(server + "/garbage"), str(tmp_path), [], True)
    assert str(error.value) == (
        f"six-1.17.0-py3-none-any.whl (six==1.17.0): {server}/garbage: BadStatusLine: SSH-2.0-OpenSSH_9.2"
    )
    with pytest.raises(FetchError, match=r": http://127.0.0.1:x/six.whl: InvalidURL: nonnumeric port: 'x'$"):
        fetch_one(item("http://127.0.0.1:x/six.whl"), str(tmp_path), [], True)


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
        FetchError, match=r"\): no source: no mirror given and the lock's own URLs are not to be used$"
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
        "reasons": {},
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
        "reasons": {},
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


def test_candidates_keep_a_mirror_path_and_drop_an_empty_recorded_url():
    assert candidates(item(""), [], True) == []
    assert candidates(item(None), ["http://m/X/", "http://m/X"], True) == [
        "http://m/X/six-1.17.0-py3-none-any.whl",
        "http://m/X/six-1.17.0-py3-none-any.whl",
    ]


def test_an_https_source_is_downloaded_not_looked_for_on_disk(tmp_path):
    with pytest.raises(FetchError) as error:
        fetch_one(item("https://127.0.0.1:9/six.whl"), str(tmp_path), [], True)
    assert str(error.value) == (
        "six-1.17.0-py3-none-any.whl (six==1.17.0): "
        "https://127.0.0.1:9/six.whl: [Errno 111] Connection refused"
    )


def test_a_body_without_content_length_is_taken_whole(server, tmp_path):
    Handler.files["/nolength/six.whl"] = CONTENT
    assert fetch_one(item(server + "/nolength/six.whl"), str(tmp_path), [], True)[0] == "fetched"
    assert (tmp_path / "six-1.17.0-py3-none-any.whl").read_bytes() == CONTENT


def test_each_failing_source_passes_to_the_next_and_every_reason_is_joined(server, tmp_path):
    Handler.files["/cut/six-1.17.0-py3-none-any.whl"] = CONTENT
    Handler.files["/six.whl"] = CONTENT
    mirrors = [server + "/gone", server + "/cut", "http://127.0.0.1:x/"]
    got = fetch_one(item(server + "/six.whl"), str(tmp_path), mirrors, True)
    assert got == ("fetched", server + "/six.whl")
    assert (tmp_path / "six-1.17.0-py3-none-any.whl").read_bytes() == CONTENT
    (tmp_path / "six-1.17.0-py3-none-any.whl").unlink()
    with pytest.raises(FetchError) as error:
        fetch_one(item(server + "/garbage"), str(tmp_path), [server + "/gone", "http://127.0.0.1:x/"], True)
    assert str(error.value) == (
        f"six-1.17.0-py3-none-any.whl (six==1.17.0): {server}/gone/six-1.17.0-py3-none-any.whl: HTTP 404; "
        "http://127.0.0.1:x/six-1.17.0-py3-none-any.whl: InvalidURL: nonnumeric port: 'x'; "
        f"{server}/garbage: BadStatusLine: SSH-2.0-OpenSSH_9.2"
    )


def test_a_partial_outlives_a_source_that_is_not_found(server, tmp_path):
    partial = tmp_path / ".six-1.17.0-py3-none-any.whl.part"
    partial.write_bytes(CONTENT[:100])
    with pytest.raises(FetchError, match=r"HTTP 404$"):
        fetch_one(item(server + "/gone.whl"), str(tmp_path), [], True)
    assert partial.read_bytes() == CONTENT[:100]


def test_a_local_mirror_replaces_a_stale_partial(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    (mirror / "six-1.17.0-py3-none-any.whl").write_bytes(CONTENT)
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / ".six-1.17.0-py3-none-any.whl.part").write_bytes(b"stale")
    got = fetch_one(item(), str(dest), [str(mirror)], True)
    assert got == ("fetched", str(mirror / "six-1.17.0-py3-none-any.whl"))
    assert [p.name for p in dest.iterdir()] == ["six-1.17.0-py3-none-any.whl"]
    assert (dest / "six-1.17.0-py3-none-any.whl").read_bytes() == CONTENT


def test_a_server_that_stalls_is_given_up_after_the_timeout(server, tmp_path):
    Handler.files["/stall/six.whl"] = CONTENT
    Handler.files["/midstall/six.whl"] = CONTENT
    started = time.monotonic()
    with pytest.raises(FetchError, match=r"/stall/six.whl: timed out$"):
        fetch_one(item(server + "/stall/six.whl"), str(tmp_path), [], True, timeout=0.3)
    with pytest.raises(FetchError, match=r"/midstall/six.whl: timed out$"):
        fetch_one(item(server + "/midstall/six.whl"), str(tmp_path), [], True, timeout=0.3)
    assert time.monotonic() - started < STALL  # neither waited for the server
    with pytest.raises(FetchError, match=r"/stall/six.whl: timed out$"):
        fetch_all([item(server + "/stall/six.whl")], str(tmp_path), timeout=0.3)


def test_an_unwritable_store_is_named_by_its_reason(server, tmp_path):
    Handler.files["/six.whl"] = CONTENT
    with pytest.raises(FetchError) as error:
        fetch_one(item(server + "/six.whl"), str(tmp_path / "absent"), [], True)
    assert str(error.value) == (
        f"six-1.17.0-py3-none-any.whl (six==1.17.0): {server}/six.whl: No such file or directory"
    )


def test_fetch_all_honours_use_lock_urls(server, tmp_path):
    Handler.files["/six.whl"] = CONTENT
    with pytest.raises(FetchError, match=r"no source: no mirror given"):
        fetch_all([item(server + "/six.whl")], str(tmp_path), use_recorded_url=False)
    assert Handler.requests == []


def test_check_only_names_a_wrong_file_and_every_missing_one(tmp_path):
    (tmp_path / "b-1-py3-none-any.whl").write_bytes(b"not the locked bytes")
    (tmp_path / "c-1-py3-none-any.whl").write_bytes(CONTENT)
    files = [item("", f"{name}-1-py3-none-any.whl") for name in "abc"]
    assert fetch_all(files, str(tmp_path), check_only=True) == {
        "fetched": [],
        "present": ["c-1-py3-none-any.whl"],
        "missing": ["a-1-py3-none-any.whl", "b-1-py3-none-any.whl"],
        "reasons": {},
    }


def test_the_record_is_sorted_and_written_beside_the_files_from_any_working_directory(tmp_path, monkeypatch):
    gone = tmp_path / "cwd"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()  # a relative path would fail here
    save_verified(str(tmp_path), {"z.whl": [1, 2, "c"], "a.whl": [3, 4, "d"]})
    text = (tmp_path / VERIFIED).read_text()
    assert list(json.loads(text)) == ["a.whl", "z.whl"]
    assert text.index('"a.whl"') < text.index('"z.whl"')
    assert sorted(p.name for p in tmp_path.iterdir()) == [VERIFIED]


def closed_port() -> int:
    """A local port nothing listens on (connections to it are refused)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_server_that_stays_silent_is_asked_once_and_the_next_source_serves(server, tmp_path):
    """A mirror that answers nothing within the timeout costs one timeout, not one per file: the other
    files go to the next source without asking it."""
    local = tmp_path / "local"
    local.mkdir()
    names = ["a-1-py3-none-any.whl", "b-1-py3-none-any.whl", "c-1-py3-none-any.whl"]
    for name in names:
        (local / name).write_bytes(CONTENT)
    started = time.monotonic()
    result = fetch_all([item("", name) for name in names], str(tmp_path / "dest"),
                       [server + "/stall", str(local)], timeout=0.3)
    assert time.monotonic() - started < STALL
    assert result["fetched"] == names
    assert [path for path, _range in Handler.requests] == ["/stall/a-1-py3-none-any.whl"]


def test_a_refused_server_is_named_once_and_missing_ok_lists_what_no_source_had(tmp_path):
    """Connection refused: the first file names the reason, the others that the server was not asked
    again; with missing_ok nothing raises and every file is listed as missing, with its reason."""
    port = closed_port()
    mirror = f"http://127.0.0.1:{port}/wheels"
    files = [item("", "a-1-py3-none-any.whl"), item("", "b-1-py3-none-any.whl")]
    result = fetch_all(files, str(tmp_path), [mirror], use_recorded_url=False, missing_ok=True)
    assert (result["fetched"], result["present"]) == ([], [])
    assert result["missing"] == ["a-1-py3-none-any.whl", "b-1-py3-none-any.whl"]
    assert "refused" in result["reasons"]["a-1-py3-none-any.whl"]
    assert result["reasons"]["b-1-py3-none-any.whl"].endswith(
        f"{mirror}/b-1-py3-none-any.whl: not asked, 127.0.0.1:{port} "
        "did not answer for an earlier file")
    with pytest.raises(FetchError, match=r"^2 of 2 files could not be fetched"):
        fetch_all(files, str(tmp_path), [mirror], use_recorded_url=False)


def test_missing_ok_keeps_what_was_fetched_and_lists_only_what_no_source_had(server, tmp_path):
    Handler.files["/a-1-py3-none-any.whl"] = CONTENT
    files = [item("", "a-1-py3-none-any.whl"), item("", "b-1-py3-none-any.whl")]
    result = fetch_all(files, str(tmp_path), [server], use_recorded_url=False, missing_ok=True)
    assert (result["fetched"], result["missing"]) == (["a-1-py3-none-any.whl"], ["b-1-py3-none-any.whl"])
    assert list(result["reasons"]) == ["b-1-py3-none-any.whl"]
    assert "HTTP 404" in result["reasons"]["b-1-py3-none-any.whl"]
    assert (tmp_path / "a-1-py3-none-any.whl").read_bytes() == CONTENT


def test_a_source_url_without_a_server_silences_no_local_source(tmp_path):
    """A URL that names no server fails by itself; the local mirror after it still serves every file."""
    local = tmp_path / "local"
    local.mkdir()
    names = ["a-1-py3-none-any.whl", "b-1-py3-none-any.whl"]
    for name in names:
        (local / name).write_bytes(CONTENT)
    result = fetch_all([item("", name) for name in names], str(tmp_path / "dest"),
                       ["http:///wheels", str(local)], use_recorded_url=False)
    assert result["fetched"] == names
