"""module_utils/model_weights: the details the mutation run (bench/mutation_score.py) found untested.

Whole messages and records instead of fragments: the names a draft check and an HTTP failure give, the
progress and manifest files as written, the timeouts a stalled source is given, the headers a download
sends, the state directory a download leaves, and the streaming (bounded memory, one progress call per
block) of hashing and transfer.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import stat
import sys
import threading
import tracemalloc
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import test_model_weights
from ansible.module_utils import model_weights as mw
from locales import c_locale
from test_model_weights import DRAFT, SHA, TARGET, _stage

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stand_ins"))
from hub_server import HubStandIn, Repo, make_repo

COMMIT = "c" * 40
mirror = test_model_weights.mirror  # the fixture: a staged directory the Hub stand-in serves at /mirror/
TOKENIZER = "the draft was trained with another tokenizer"


# --- a plain HTTP server: records each request's headers, serves one body or never answers -------------

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.server.seen.append(self.headers)
        if self.server.stall:
            self.server.release.wait(self.server.stall)  # a source that stops answering
            self.close_connection = True
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)


@pytest.fixture
def plain():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    server.daemon_threads = True
    server.seen, server.body, server.stall, server.release = [], b"", 0, threading.Event()
    server.url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.release.set()
        server.shutdown()
        server.server_close()


_UNSET = object()


class _Recording:
    """An opener that records the timeout each request is given, then opens it for real."""

    def __init__(self):
        self.real, self.timeouts = mw.OPENER, []

    def open(self, request, timeout=_UNSET):
        self.timeouts.append(timeout)
        return self.real.open(request) if timeout is _UNSET else self.real.open(request, timeout=timeout)


def _entry(name, data):
    return mw.file_entry(name, len(data), hashlib.sha256(data).hexdigest())


def _url_source(url="http://unused"):
    return {"kind": "url", "repo": "org/m", "revision": "v1", "url": url}


def _write_staged(root, source, files=(), **changes):
    """A staged directory's manifest (the files themselves are not read: the manifest is the marker)."""
    directory = root / source["repo"] / source["revision"]
    manifest = {**mw.build_manifest(source, COMMIT, list(files)), **changes}
    manifest = {k: v for k, v in manifest.items() if v is not None}
    mw.write_json_atomic(str(directory / mw.MANIFEST), manifest)
    return directory


# --- sources and plans -----------------------------------------------------------------------------------

def test_a_repository_name_with_two_dots_anywhere_is_refused():
    with pytest.raises(mw.WeightsError) as exc:
        mw.parse_source({"repo": "org/a..b", "revision": "v1"}, "w")
    assert str(exc.value) == "w.repo: must be a Hub id such as org/name, got 'org/a..b'"


def test_only_trailing_slashes_are_dropped_from_urls_and_paths():
    assert mw.parse_source({"url": "http://m/MIRRORX/", "repo": "org/m", "revision": "v1"}, "w")["url"] == (
        "http://m/MIRRORX")
    assert mw.parse_source({"repo": "org/m", "revision": "v1", "endpoint": "https://hubX//"}, "w")[
        "endpoint"] == "https://hubX"
    assert mw.parse_source({"path": "/data/X/"}, "w") == {"kind": "path", "path": "/data/X"}


def test_bytes_present_adds_every_whole_file(tmp_path):
    (tmp_path / "a").write_bytes(b"1234")
    (tmp_path / "b").write_bytes(b"123")
    assert mw.bytes_present(str(tmp_path), [{"name": "a", "size": 4}, {"name": "b", "size": 3}]) == 7


def test_free_bytes_asks_the_filesystem_that_would_hold_the_path_not_the_root():
    """/proc stands for a model root on a disk of its own: the climb stops at the first existing parent."""
    proc, root = os.statvfs("/proc"), os.statvfs("/")
    assert proc.f_bavail * proc.f_frsize != root.f_bavail * root.f_frsize
    assert mw.free_bytes("/proc/no-such-dir/model") == proc.f_bavail * proc.f_frsize


def test_hashing_streams_in_blocks_not_the_whole_file(tmp_path):
    data = os.urandom(1 << 20) * 16
    path = tmp_path / "shard"
    path.write_bytes(data)
    want = hashlib.sha256(data).hexdigest()
    del data
    tracemalloc.start()
    try:
        got = mw.hash_file(str(path), "sha256")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert got == want
    assert peak < 4 * mw.CHUNK  # a 16 MiB file in 1 MiB blocks


def test_check_draft_fits_lists_every_architecture():
    draft = {**DRAFT, "architectures": ["EagleBase", "LlamaForCausalLMEagle3"], "hidden_size": 32}
    target = {**TARGET, "architectures": ["DeepseekV3ForCausalLM", "DeepseekV3Model"]}
    with pytest.raises(mw.WeightsError) as exc:
        mw.check_draft_fits(target, draft, "EAGLE3", "t", "d")
    assert str(exc.value) == (
        "draft d (EagleBase, LlamaForCausalLMEagle3) reads hidden states of size 32; target t "
        "(DeepseekV3ForCausalLM, DeepseekV3Model, model_type 'deepseek_v3') has hidden_size 64: the draft "
        "was trained for another model")


def test_config_and_manifest_are_read_as_utf8_whatever_the_locale(tmp_path):
    config = {"architectures": ["LlamaForCausalLM"], "_name_or_path": "Müller/модель"}
    (tmp_path / "config.json").write_bytes(json.dumps(config, ensure_ascii=False).encode())
    manifest = {"version": 1, "note": "naïve ✓"}
    (tmp_path / mw.MANIFEST).write_bytes(json.dumps(manifest, ensure_ascii=False).encode())
    with c_locale():
        assert mw.read_config(str(tmp_path)) == config
        assert mw.read_manifest(str(tmp_path)) == manifest


# --- the progress file and the manifest as written --------------------------------------------------------

def test_write_json_atomic_writes_sorted_indented_ascii_json_and_a_newline(tmp_path):
    path = tmp_path / "d" / "x.json"
    mw.write_json_atomic(str(path), {"b": [1, {"d": 2, "c": "ü"}], "a": True})
    assert path.read_bytes() == (b'{\n "a": true,\n "b": [\n  1,\n  {\n   "c": "\\u00fc",\n   "d": 2\n  }\n'
                                 b' ]\n}\n')


def test_write_json_atomic_reuses_a_temporary_file_an_interrupted_write_left(tmp_path):
    (tmp_path / "x.json.tmp").write_text('{"done": 1')  # a crash between the write and the rename
    mw.write_json_atomic(str(tmp_path / "x.json"), {"done": 2})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]
    assert json.loads((tmp_path / "x.json").read_text()) == {"done": 2}


def test_progress_line_rate_within_the_first_second():
    assert mw.progress_line(1 << 20, 2 << 20, 0.5) == "0.00 / 0.00 GiB (50.0%), 2.0 MiB/s"


def test_progress_is_written_at_the_first_add_even_when_the_clock_is_young(tmp_path):
    path = tmp_path / "p.json"
    progress = mw.Progress(str(path), 10, 0, clock=lambda: 2.5)
    progress.add(1)
    assert json.loads(path.read_text())["done"] == 1


def test_progress_elapsed_is_rounded_to_a_tenth(tmp_path):
    now = [100.0]
    path = tmp_path / "p.json"
    progress = mw.Progress(str(path), 10, 0, clock=lambda: now[0])
    now[0] = 101.26
    progress.write()
    assert json.loads(path.read_text()) == {"done": 0, "total": 10, "finished": False, "error": "",
                                            "elapsed": 1.3, "line": "0.00 / 0.00 GiB (0.0%), 0.0 MiB/s"}


# --- transfer ---------------------------------------------------------------------------------------------

def test_fetch_sends_the_callers_headers_asks_for_identity_and_reports_each_block(tmp_path, plain):
    data = os.urandom(mw.CHUNK) * 2 + b"tail"
    plain.body = data
    counted = []
    assert mw.fetch_file(plain.url + "/w.bin", {"X-Token": "k"}, str(tmp_path), _entry("w.bin", data),
                         on_bytes=counted.append) == 0
    sent = plain.seen[-1]
    assert (sent.get("X-Token"), sent.get("Accept-Encoding"), sent.get("Range")) == ("k", "identity", None)
    assert sum(counted) == len(data)
    assert len(counted) >= 3
    assert max(counted) <= mw.CHUNK
    assert (tmp_path / "w.bin").read_bytes() == data


def test_fetch_waits_60_seconds_unless_told(tmp_path, plain):
    plain.body = b"abc"
    opener = _Recording()
    mw.fetch_file(plain.url + "/f", {}, str(tmp_path), _entry("f", b"abc"), opener=opener)
    mw.fetch_file(plain.url + "/f", {}, str(tmp_path), _entry("g", b"abc"), opener=opener, timeout=7)
    assert opener.timeouts == [60, 7]


def test_redirect_that_urllib_refuses_keeps_the_response():
    """A redirect urllib does not follow (a POST answered 307) fails as the HTTPError of that response."""
    handler = mw._StripAuthOnRedirect()
    request = urllib.request.Request("http://hub:1/x", data=b"d", method="POST")
    headers = {"Location": "http://cdn:1/y"}
    with pytest.raises(urllib.error.HTTPError) as exc:
        handler.redirect_request(request, io.BytesIO(b"moved"), 307, "Temporary Redirect", headers,
                                 "http://cdn:1/y")
    assert (exc.value.code, exc.value.msg, exc.value.hdrs) == (307, "Temporary Redirect", headers)
    assert exc.value.read() == b"moved"


# --- mirrors ------------------------------------------------------------------------------------------------

def test_mirror_plan_falls_back_to_the_revision_and_names_a_manifest_without_files(mirror):
    _server, source, entries, src = mirror
    manifest = json.loads((src / mw.MANIFEST).read_text())
    mw.write_json_atomic(str(src / "nocommit" / mw.MANIFEST), {**manifest, "commit": ""})
    assert mw.mirror_plan({**source, "url": source["url"] + "/nocommit"}, 5) == ("v1", entries)
    mw.write_json_atomic(str(src / "nofiles" / mw.MANIFEST), {"source": manifest["source"]})
    with pytest.raises(mw.WeightsError) as exc:
        mw.mirror_plan({**source, "url": source["url"] + "/nofiles"}, 5)
    assert str(exc.value) == (f"{source['url']}/nofiles/.model_weights.json is not a model_weights manifest "
                              f"(no files list)")


def test_mirror_plan_passes_its_timeout_to_the_opener(mirror):
    _server, source, entries, _src = mirror
    opener = _Recording()
    assert mw.mirror_plan(source, 3, opener) == (COMMIT, entries)
    assert opener.timeouts == [3]


@pytest.fixture
def private_hub(tmp_path):
    """A private repository on the Hub stand-in (token "t"), and its plan entries."""
    repo_dir = make_repo(tmp_path / "hub", {"model.safetensors": 5000})
    entries = mw.order([_entry(p.name, p.read_bytes()) for p in repo_dir.iterdir()])
    with HubStandIn(token="t") as server:
        server.add(Repo("org/m", repo_dir, COMMIT, tags={"v1"}, private=True))
        yield server, entries


def _stage_hub(server, entries, root, headers):
    source = {"kind": "hub", "repo": "org/m", "revision": "v1", "endpoint": server.url}
    return mw.stage(source, str(root), plan=lambda: (COMMIT, entries),
                    file_url=lambda commit, name: f"{server.url}/org/m/resolve/{commit}/{name}",
                    headers=headers)


def test_a_mirror_that_wants_a_token_is_told_apart_from_a_refused_one(private_hub):
    server, _entries = private_hub
    url = f"{server.url}/org/m/resolve/{COMMIT}"
    with pytest.raises(mw.WeightsError) as exc:
        mw.mirror_plan(_url_source(url), 5)
    assert str(exc.value) == (f"{url} refused the token (401 Unauthorized) for .model_weights.json of "
                              f"org/m@v1: the repository needs a token: set HF_TOKEN in "
                              f"sglang_service_secrets")


def test_stage_fetches_each_file_at_the_plans_commit_with_the_token(tmp_path, private_hub):
    server, entries = private_hub
    result = _stage_hub(server, entries, tmp_path / "root", {"Authorization": "Bearer t"})
    assert (result["status"], result["commit"], result["files"]) == ("downloaded", COMMIT, len(entries))
    fetched = sorted(path for method, path, _range in server.requests if method == "GET")
    assert fetched == sorted(f"/org/m/resolve/{COMMIT}/{e['name']}" for e in entries)


@pytest.mark.parametrize(("headers", "advice"), [
    ({"Authorization": "Bearer wrong"}, "check the HF_TOKEN in sglang_service_secrets (not shown)"),
    ({}, "the repository needs a token: set HF_TOKEN in sglang_service_secrets"),
])
def test_stage_says_whether_a_token_was_sent_when_refused(tmp_path, private_hub, headers, advice):
    server, entries = private_hub
    with pytest.raises(mw.WeightsError) as exc:
        _stage_hub(server, entries, tmp_path / "root", headers)
    host = server.url.split("/")[2]
    assert str(exc.value) == f"{host} refused the token (401 Unauthorized) for {entries[0]['name']}: {advice}"


# --- staging ------------------------------------------------------------------------------------------------

def test_stage_gives_up_on_a_source_that_stops_answering(tmp_path, plain):
    plain.stall = 5
    entry = _entry("config.json", b"{}")
    with pytest.raises(mw.WeightsError) as exc:
        mw.stage(_url_source(plain.url), str(tmp_path / "root"), plan=lambda: ("c", [entry]),
                 file_url=lambda commit, name: f"{plain.url}/{name}", headers={}, timeout=0.5)
    host = plain.url.split("/")[2]
    assert str(exc.value).startswith(f"weights source {host} does not answer (timed out): ")


def test_a_mirror_that_stops_answering_before_its_manifest_is_named(plain):
    plain.stall = 5
    with pytest.raises(mw.WeightsError) as exc:
        mw.mirror_plan(_url_source(plain.url), 0.5)
    assert str(exc.value).startswith(f"weights source {plain.url} does not answer (timed out): ")


def test_stage_gives_the_plan_5_and_each_file_60_seconds_by_default(tmp_path, mirror, monkeypatch):
    _server, source, entries, _src = mirror
    opener = _Recording()
    monkeypatch.setattr(mw, "OPENER", opener)
    assert _stage(source, tmp_path / "root")["status"] == "downloaded"
    assert opener.timeouts == [5] + [60] * len(entries)


def test_stage_names_the_directory_that_lacks_space(tmp_path, mirror):
    _server, source, entries, _src = mirror
    total = sum(e["size"] for e in entries)
    asked = []
    with pytest.raises(mw.WeightsError) as exc:
        _stage(source, tmp_path / "root", free=lambda where: asked.append(where) or total - 1)
    directory = tmp_path / "root/org/m/v1"
    assert asked == [str(directory)]
    assert str(exc.value) == (f"not enough space for {directory}: the repository is 0.00 GiB, 0.00 GiB "
                              f"({total} bytes) still to download, 0.00 GiB ({total - 1} bytes) free there; "
                              f"free space or set model_weights_root to a larger disk")


def test_stage_keeps_its_state_beside_the_files_and_not_world_writable(tmp_path, mirror, monkeypatch):
    _server, source, entries, _src = mirror
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    umask = os.umask(0)
    try:
        _stage(source, tmp_path / "root")
    finally:
        os.umask(umask)
    directory = tmp_path / "root/org/m/v1"
    assert sorted(p.name for p in directory.iterdir()) == sorted(
        [e["name"] for e in entries] + [mw.MANIFEST, mw.STATE_DIR])
    assert sorted(p.name for p in (directory / mw.STATE_DIR).iterdir()) == ["partial", mw.PROGRESS]
    assert stat.S_IMODE((directory / mw.STATE_DIR / "partial").stat().st_mode) == 0o755
    assert not list((tmp_path / "cwd").iterdir())


def test_the_progress_line_names_the_file_being_fetched(tmp_path, mirror):
    _server, source, entries, _src = mirror
    progress = tmp_path / "p.json"
    lines = {}

    def file_url(commit, name):  # asked just before a file is fetched: the line then names the one before
        lines[name] = json.loads(progress.read_text())["line"] if progress.exists() else None
        return f"{source['url']}/{name}"

    mw.stage(source, str(tmp_path / "root"), plan=lambda: mw.mirror_plan(source, 5), file_url=file_url,
             headers={}, progress_file=str(progress))
    names = [e["name"] for e in entries]
    assert lines[names[0]] is None
    for before, name in zip(names, names[1:]):
        assert lines[name].endswith(f" MiB/s, {before}"), lines
    assert json.loads(progress.read_text())["line"].endswith(f" MiB/s, {names[-1]}")


def test_a_staged_manifest_without_a_total_counts_zero(tmp_path):
    source = _url_source()
    _write_staged(tmp_path / "root", source, [mw.file_entry("w.bin", 3, SHA)], total_bytes=None)
    progress = tmp_path / "p.json"
    result = mw.stage(source, str(tmp_path / "root"), plan=None, file_url=None, headers={},
                      progress_file=str(progress))
    assert (result["status"], result["files"], result["total_bytes"]) == ("staged", 1, 0)
    assert json.loads(progress.read_text())["total"] == 0


def test_a_path_source_marks_its_progress_file_finished_outside_check_mode_only(tmp_path, monkeypatch):
    model = make_repo(tmp_path / "model")
    source = mw.parse_source({"path": str(model)}, "w")
    progress = tmp_path / "p.json"
    mw.stage(source, "/unused", plan=None, file_url=None, headers={}, check_mode=True,
             progress_file=str(progress))
    assert not progress.exists()
    mw.stage(source, "/unused", plan=None, file_url=None, headers={}, progress_file=str(progress))
    assert json.loads(progress.read_text()) == {"finished": True, "error": "", "line": "path", "done": 0,
                                                "total": 0, "elapsed": 0}
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    assert mw.stage(source, "/unused", plan=None, file_url=None, headers={})["status"] == "path"
    assert not list((tmp_path / "cwd").iterdir())  # no progress file asked for: none written


def test_a_staged_source_in_check_mode_writes_no_progress_file(tmp_path):
    source = _url_source()
    _write_staged(tmp_path / "root", source, [mw.file_entry("w.bin", 3, SHA)])
    progress = tmp_path / "p.json"
    result = mw.stage(source, str(tmp_path / "root"), plan=None, file_url=None, headers={}, check_mode=True,
                      progress_file=str(progress))
    assert result["status"] == "staged"
    assert not progress.exists()


# --- drafts ------------------------------------------------------------------------------------------------

def test_a_staged_draft_is_checked_and_named_by_its_repository(tmp_path):
    target = make_repo(tmp_path / "target", config=TARGET)
    source = _url_source()
    directory = _write_staged(tmp_path / "root", source, [mw.file_entry("config.json", 3, SHA)])
    (directory / "config.json").write_text(json.dumps(DRAFT))
    result = mw.stage(source, str(tmp_path / "root"), plan=None, file_url=None, headers={},
                      draft_of=str(target), algorithm="EAGLE3")
    assert (result["status"], result["draft_checked"]) == ("staged", True)
    (directory / "config.json").write_text(json.dumps({**DRAFT, "vocab_size": 7}))
    with pytest.raises(mw.WeightsError) as exc:
        mw.stage(source, str(tmp_path / "root"), plan=None, file_url=None, headers={}, draft_of=str(target),
                 algorithm="EAGLE3")
    assert str(exc.value) == f"draft org/m has vocab_size 7, target {target} has 128: {TOKENIZER}"


def test_a_staged_directory_without_a_config_is_not_draft_checked(tmp_path):
    target = make_repo(tmp_path / "target", config=TARGET)
    source = _url_source()
    _write_staged(tmp_path / "root", source, [mw.file_entry("w.bin", 3, SHA)])
    result = mw.stage(source, str(tmp_path / "root"), plan=None, file_url=None, headers={},
                      draft_of=str(target), algorithm="EAGLE3")
    assert result["status"] == "staged"
    assert "draft_checked" not in result


def test_a_path_draft_is_named_by_its_directory(tmp_path):
    target = make_repo(tmp_path / "target", config=TARGET)
    draft = make_repo(tmp_path / "draft", config={**DRAFT, "vocab_size": 7})
    with pytest.raises(mw.WeightsError) as exc:
        mw.stage(mw.parse_source({"path": str(draft)}, "w"), "/unused", plan=None, file_url=None, headers={},
                 draft_of=str(target), algorithm="EAGLE3")
    assert str(exc.value) == f"draft {draft} has vocab_size 7, target {target} has 128: {TOKENIZER}"


def test_a_downloaded_draft_is_checked_once(tmp_path, mirror, monkeypatch):
    _server, source, _entries, src = mirror
    target = make_repo(tmp_path / "target", config=TARGET)
    calls = []
    monkeypatch.setattr(mw, "check_draft_fits", lambda *args: calls.append(args))
    result = _stage(source, tmp_path / "root", draft_of=str(target), algorithm="EAGLE3")
    draft = json.loads((src / "config.json").read_text())
    assert calls == [(TARGET, draft, "EAGLE3", str(target), "org/m")]
    assert result["draft_checked"] is True


def test_a_draft_that_does_not_fit_stops_right_after_its_config(tmp_path, mirror):
    server, source, entries, src = mirror
    (src / "config.json").write_text(json.dumps({**DRAFT, "vocab_size": 7}))
    entries = mw.order([e for e in entries if e["name"] != "config.json"]
                       + [_entry("config.json", (src / "config.json").read_bytes())])
    assert entries[0]["name"] == "config.json"
    target = make_repo(tmp_path / "target", config=TARGET)
    with pytest.raises(mw.WeightsError) as exc:
        mw.stage(source, str(tmp_path / "root"), plan=lambda: ("c", entries),
                 file_url=lambda commit, name: f"{source['url']}/{name}", headers={}, draft_of=str(target),
                 algorithm="EAGLE3")
    assert str(exc.value) == f"draft org/m has vocab_size 7, target {target} has 128: {TOKENIZER}"
    assert [path for _method, path, _range in server.requests] == ["/mirror/config.json"]


def test_a_draft_config_already_in_the_directory_is_checked_after_the_download(tmp_path, mirror):
    """The plan need not list config.json: one the directory already holds is checked at the end."""
    _server, source, entries, _src = mirror
    target = make_repo(tmp_path / "target", config=TARGET)
    directory = tmp_path / "root/org/m/v1"
    directory.mkdir(parents=True)
    (directory / "config.json").write_text(json.dumps({**DRAFT, "vocab_size": 7}))
    rest = [e for e in entries if e["name"] != "config.json"]
    with pytest.raises(mw.WeightsError) as exc:
        mw.stage(source, str(tmp_path / "root"), plan=lambda: ("c", rest),
                 file_url=lambda commit, name: f"{source['url']}/{name}", headers={}, draft_of=str(target),
                 algorithm="EAGLE3")
    assert str(exc.value) == f"draft org/m has vocab_size 7, target {target} has 128: {TOKENIZER}"
    assert [mw.mismatch(str(directory / e["name"]), e) for e in rest] == [""] * len(rest)
    assert mw.read_manifest(str(directory)) is None
