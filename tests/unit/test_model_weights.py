"""module_utils/model_weights: sources (cases/model_weights_sources.yml), plans, space, hashes, the
manifest marker, resumable transfer and staging against the Hub stand-in's mirror route (stdlib only:
the Hub's own metadata path is covered by tests/integration/test_model_weights_role.py)."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import urllib.error
import urllib.request
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml
from ansible.module_utils import model_weights as mw

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stand_ins"))
from hub_server import HubStandIn, git_blob_sha1, make_repo

CASES = yaml.safe_load((Path(__file__).parent / "cases" / "model_weights_sources.yml").read_text())
SHA = "a" * 64


@pytest.mark.parametrize("case", CASES["valid"], ids=[c["name"] for c in CASES["valid"]])
def test_valid_sources(case):
    assert mw.parse_source(case["weights"], "w") == case["source"]


@pytest.mark.parametrize("case", CASES["invalid"], ids=[c["name"] for c in CASES["invalid"]])
def test_invalid_sources_name_the_variable(case):
    with pytest.raises(mw.WeightsError) as exc:
        mw.parse_source(case["weights"], "w")
    assert str(exc.value) == case["error"]


def test_staged_dir_and_identity():
    hub = mw.parse_source({"repo": "org/m", "revision": "v1", "endpoint": "http://x"}, "w")
    assert mw.staged_dir("/r", hub) == "/r/org/m/v1"
    assert mw.staged_dir("/r", {"kind": "path", "path": "/p"}) == "/p"
    assert mw.identity(hub) == {"repo": "org/m", "revision": "v1"}


@pytest.mark.parametrize("name", ["/abs", "a/../b", "a//b", "./a", "", ".model_weights/x",
                                  ".model_weights.json",
                                  None])
def test_file_entry_refuses_names_that_are_not_plain_relative_paths(name):
    with pytest.raises(mw.WeightsError, match="refused"):
        mw.file_entry(name, 1, SHA)


@pytest.mark.parametrize("size", [None, -1, True, "3"])
def test_file_entry_needs_a_size(size):
    with pytest.raises(mw.WeightsError) as exc:
        mw.file_entry("a", size, SHA)
    assert str(exc.value) == f"a: the source gives no size ({size!r}), so it cannot be checked"


def test_file_entry_hashes():
    assert mw.file_entry("a/b.json", 0, sha1="b" * 40) == {"name": "a/b.json", "size": 0, "sha1": "b" * 40}
    assert mw.file_entry("a", 5, SHA, "b" * 40) == {"name": "a", "size": 5, "sha256": SHA}
    with pytest.raises(mw.WeightsError) as exc:
        mw.file_entry("a", 5, "A" * 64)
    assert str(exc.value) == f"a: the source's sha256 {'A' * 64!r} is not 64 hex digits"
    for sha1 in ("", "b" * 39, None):
        with pytest.raises(mw.WeightsError) as exc:
            mw.file_entry("a", 5, "", sha1)
        assert str(exc.value) == "a: the source publishes neither a sha256 nor a git blob sha1"


def test_hub_files_take_lfs_sha256_else_the_blob_sha1_small_files_first():
    siblings = [{"rfilename": "w.safetensors", "size": 134, "blob_id": "c" * 40,
                 "lfs": {"size": 900, "sha256": SHA}},
                {"rfilename": "config.json", "size": 20, "blob_id": "d" * 40, "lfs": None},
                {"rfilename": "b.json", "size": 20, "blob_id": "e" * 40}]
    assert mw.hub_files(siblings) == [{"name": "b.json", "size": 20, "sha1": "e" * 40},
                                      {"name": "config.json", "size": 20, "sha1": "d" * 40},
                                      {"name": "w.safetensors", "size": 900, "sha256": SHA}]


def test_manifest_files():
    files = [{"name": "z", "size": 2, "sha256": SHA}, "junk", {"name": "a", "size": 3, "sha1": "f" * 40}]
    assert mw.manifest_files({"files": files}, "M") == [{"name": "z", "size": 2, "sha256": SHA},
                                                         {"name": "a", "size": 3, "sha1": "f" * 40}]
    for bad in ([], {"files": {}}, {}):
        with pytest.raises(mw.WeightsError) as exc:
            mw.manifest_files(bad, "M")
        assert str(exc.value) == "M is not a model_weights manifest (no files list)"


def test_bytes_present_counts_whole_files_and_partial_downloads(tmp_path):
    entries = [{"name": "whole", "size": 4}, {"name": "wrong", "size": 10}, {"name": "none", "size": 7},
               {"name": "big", "size": 3}]
    (tmp_path / "whole").write_bytes(b"1234")
    (tmp_path / "wrong").write_bytes(b"12")  # a file of the wrong size counts only through its .part
    part = Path(mw.partial_path(str(tmp_path), "wrong"))
    part.parent.mkdir(parents=True)
    part.write_bytes(b"123456")
    Path(mw.partial_path(str(tmp_path), "big")).write_bytes(b"12345")  # never more than the file's size
    assert mw.bytes_present(str(tmp_path), entries) == 4 + 6 + 0 + 3


def test_free_bytes_of_a_directory_not_made_yet(tmp_path):
    st = os.statvfs(tmp_path)
    assert abs(mw.free_bytes(str(tmp_path / "a" / "b")) - st.f_bavail * st.f_frsize) < (64 << 20)


def test_check_space_boundary_and_message():
    mw.check_space(100, 100, "/d", 200)
    with pytest.raises(mw.WeightsError) as exc:
        mw.check_space(101, 100, "/d", 3 << 30)
    assert str(exc.value) == ("not enough space for /d: the repository is 3.00 GiB, 0.00 GiB (101 bytes) "
                              "still "
                              "to download, 0.00 GiB (100 bytes) free there; free space or set "
                              "model_weights_root to a larger disk")


def test_hashes_and_mismatch(tmp_path):
    data = b"hello weights\n" * 1000
    path = tmp_path / "f"
    path.write_bytes(data)
    assert mw.hash_file(str(path), "sha1") == git_blob_sha1(data)
    assert mw.hash_file(str(path), "sha256") == hashlib.sha256(data).hexdigest()
    good = {"name": "f", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert mw.mismatch(str(path), good) == ""
    assert mw.mismatch(str(path), {"name": "f", "size": len(data), "sha1": git_blob_sha1(data)}) == ""
    assert mw.mismatch(str(tmp_path / "nope"), good) == "missing"
    assert mw.mismatch(str(path), {**good, "size": 3}) == f"size {len(data)}, the source says 3"
    assert mw.mismatch(str(path), {**good, "sha256": SHA}) == (
        f"sha256 {good['sha256']}, the source says {SHA}")
    assert mw.mismatch(str(path), {"name": "f", "size": len(data), "sha1": "0" * 40}) == (
        f"sha1 {git_blob_sha1(data)}, the source says {'0' * 40}")


def test_manifest_marker(tmp_path):
    source = {"kind": "hub", "repo": "org/m", "revision": "v1", "endpoint": ""}
    assert mw.read_manifest(str(tmp_path)) is None
    (tmp_path / mw.MANIFEST).write_text("{not json")
    assert mw.read_manifest(str(tmp_path)) is None
    (tmp_path / mw.MANIFEST).write_text("[1]")
    assert mw.read_manifest(str(tmp_path)) is None
    entries = [{"name": "a", "size": 2, "sha256": SHA}, {"name": "b", "size": 3, "sha1": "f" * 40}]
    manifest = mw.build_manifest(source, "c" * 40, entries, now=1700000000.7)
    assert manifest == {"version": 1, "verified": True, "source": {"repo": "org/m", "revision": "v1"},
                        "commit": "c" * 40, "total_bytes": 5, "files": entries, "verified_at": 1700000000}
    mw.write_json_atomic(str(tmp_path / "sub" / mw.MANIFEST), manifest)
    assert mw.read_manifest(str(tmp_path / "sub")) == manifest
    assert not (tmp_path / "sub" / (mw.MANIFEST + ".tmp")).exists()
    assert mw.is_staged(manifest, source)
    assert mw.is_staged(manifest, {**source, "kind": "url", "url": "http://m"})  # a mirror's copy is the same
    assert not mw.is_staged(manifest, {**source, "revision": "v2"})
    assert not mw.is_staged({**manifest, "verified": 1}, source)
    assert not mw.is_staged({**manifest, "version": 2}, source)
    assert not mw.is_staged(None, source)
    assert mw.build_manifest(source, "", [])["verified_at"] >= 1700000000


def test_progress_line():
    assert mw.progress_line(1 << 30, 4 << 30, 8, "x.safetensors") == (
        "1.00 / 4.00 GiB (25.0%), 128.0 MiB/s, x.safetensors")
    assert mw.progress_line(0, 0, 0) == "0.00 / 0.00 GiB (100.0%), 0.0 MiB/s"
    assert mw.progress_line(2 << 30, 4 << 30, 8, moved=1 << 30) == "2.00 / 4.00 GiB (50.0%), 128.0 MiB/s"


def test_progress_writes_at_most_every_two_seconds(tmp_path):
    now = [100.0]
    path = tmp_path / "p" / "progress.json"
    progress = mw.Progress(str(path), 10 << 20, 1 << 20, clock=lambda: now[0])
    progress.add(1 << 20)
    first = json.loads(path.read_text())  # the first add writes (last write at 0)
    assert (first["done"], first["total"], first["finished"]) == (2 << 20, 10 << 20, False)
    now[0] = 101.9
    progress.add(1 << 20)
    assert json.loads(path.read_text())["done"] == 2 << 20
    now[0] = 102.0
    progress.current = "f"
    progress.add(1 << 20)
    state = json.loads(path.read_text())
    assert state == {"done": 4 << 20, "total": 10 << 20, "finished": False, "error": "", "elapsed": 2.0,
                     "line": "0.00 / 0.01 GiB (40.0%), 1.5 MiB/s, f"}  # the rate of this run's 3 MiB
    progress.forget(1 << 20)
    assert (progress.done, progress.start_done) == (3 << 20, 0)
    progress.write(finished=True, error="boom")
    assert json.loads(path.read_text())["finished"] is True
    assert json.loads(path.read_text())["error"] == "boom"


def test_http_error_messages():
    assert mw.http_error_message(401, "o/m@v1", "http://h", True) == (
        "http://h refused the token (401 Unauthorized) for o/m@v1: check the HF_TOKEN in "
        "sglang_service_secrets (not shown)")
    assert mw.http_error_message(401, "o/m@v1", "http://h", False) == (
        "http://h refused the token (401 Unauthorized) for o/m@v1: the repository needs a token: set "
        "HF_TOKEN in sglang_service_secrets")
    assert mw.http_error_message(403, "x", "h", True).startswith("h denied access (403) to x: ")
    assert mw.http_error_message(404, "x", "h", True) == (
        "h has no x (404): check the repository name and revision")
    assert mw.http_error_message(500, "x", "h", True) == "h answered HTTP 500 for x"
    assert mw.unreachable_message("http://h", "refused") == (
        "weights source http://h does not answer (refused): check the address, the host's network or proxy, "
        "or "
        "name a reachable mirror (weights.endpoint / model_weights_hub_endpoint)")
    assert mw.url_error_reason(urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))) == (
        "Connection refused")
    assert mw.url_error_reason(urllib.error.URLError("no host")) == "no host"
    assert mw.url_error_reason(TimeoutError("timed out")) == "timed out"


TARGET = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 64,
          "vocab_size": 128}
DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 64,
         "vocab_size": 128}


def test_draft_fits():
    mw.check_draft_fits(TARGET, DRAFT, "EAGLE3", "t", "d")
    mw.check_draft_fits(TARGET, {"architectures": ["Other"]}, "NEXTN", "t", "d")  # only EAGLE-3 is checked
    # a draft of another width that reads the target's hidden states through target_hidden_size
    mw.check_draft_fits(TARGET, {**DRAFT, "hidden_size": 32, "target_hidden_size": 64}, "EAGLE3", "t", "d")
    # a multimodal target keeps its language model's sizes under text_config
    mw.check_draft_fits({"architectures": ["VL"], "text_config": {"hidden_size": 64, "vocab_size": 128}},
                        DRAFT, "EAGLE3", "t", "d")


@pytest.mark.parametrize(("draft", "message"), [
    ({**DRAFT, "architectures": ["LlamaForCausalLM"]},
     "draft d is not an EAGLE-3 draft: its architectures are ['LlamaForCausalLM'] (model_type 'llama'); "
     "sglang "
     "0.5.23 loads EAGLE-3 drafts as *Eagle3 classes (e.g. LlamaForCausalLMEagle3). Name the EAGLE-3 draft "
     "trained for t"),
    ({**DRAFT, "architectures": ["LlamaForCausalLMEagle"]}, "draft d is not an EAGLE-3 draft"),
    ({"model_type": "llama"}, "draft d is not an EAGLE-3 draft: its architectures are not given"),
    ({**DRAFT, "architectures": [3]}, "draft d is not an EAGLE-3 draft"),
    ({**DRAFT, "target_hidden_size": 7168},
     "draft d (LlamaForCausalLMEagle3) reads hidden states of size 7168; target t (DeepseekV3ForCausalLM, "
     "model_type 'deepseek_v3') has hidden_size 64: the draft was trained for another model"),
    ({**DRAFT, "hidden_size": 32}, "draft d (LlamaForCausalLMEagle3) reads hidden states of size 32; "),
    ({**DRAFT, "vocab_size": 129},
     "draft d has vocab_size 129, target t has 128: the draft was trained with another tokenizer"),
])
def test_draft_does_not_fit(draft, message):
    with pytest.raises(mw.WeightsError) as exc:
        mw.check_draft_fits(TARGET, draft, "EAGLE3", "t", "d")
    assert str(exc.value).startswith(message), str(exc.value)


def test_read_config(tmp_path):
    with pytest.raises(mw.WeightsError) as exc:
        mw.read_config(str(tmp_path))
    assert str(exc.value) == (f"{tmp_path}/config.json: cannot read it (No such file or directory); "
                              f"a model directory has a config.json")
    (tmp_path / "config.json").write_text("{x")
    with pytest.raises(mw.WeightsError, match=r"config.json: not JSON \("):
        mw.read_config(str(tmp_path))
    (tmp_path / "config.json").write_text("[]")
    with pytest.raises(mw.WeightsError, match=r"config.json: not a JSON object$"):
        mw.read_config(str(tmp_path))
    (tmp_path / "config.json").write_text('{"a": 1}')
    assert mw.read_config(str(tmp_path)) == {"a": 1}


def test_redirects_keep_the_token_only_on_the_same_host():
    handler = mw._StripAuthOnRedirect()
    request = urllib.request.Request("http://hub:1/org/m/resolve/c/f", headers={"Authorization": "Bearer t"})
    same = handler.redirect_request(request, None, 302, "Found", {}, "http://hub:1/other")
    assert same.get_header("Authorization") == "Bearer t"
    other = handler.redirect_request(request, None, 302, "Found", {}, "http://cdn:1/signed")
    assert other.get_header("Authorization") is None
    assert other.full_url == "http://cdn:1/signed"


# --- transfer and staging against the stand-in's mirror route -------------------------------------------

@pytest.fixture
def mirror(tmp_path):
    """A staged directory served by the Hub stand-in at /mirror/ (and the repository's entries)."""
    src = make_repo(tmp_path / "served", {"model.safetensors": 300_000, "extra.bin": 70_000})
    entries = mw.order([mw.file_entry(p.name, p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest())
                        for p in src.iterdir() if p.is_file()])
    source = {"kind": "url", "repo": "org/m", "revision": "v1", "url": ""}
    mw.write_json_atomic(str(src / mw.MANIFEST), mw.build_manifest(source, "c" * 40, entries))
    with HubStandIn() as server:
        server.mirror_dir = src
        source["url"] = server.url + "/mirror"
        yield server, source, entries, src


def _stage(source, root, **kw):
    return mw.stage(source, str(root), plan=lambda: mw.mirror_plan(source, 5),
                    file_url=lambda commit, name: f"{source['url']}/{name}", headers={}, **kw)


def test_fetch_resumes_a_partial_file_with_a_range_request(tmp_path, mirror):
    server, source, entries, src = mirror
    entry = next(e for e in entries if e["name"] == "model.safetensors")
    part = Path(mw.partial_path(str(tmp_path), entry["name"]))
    part.parent.mkdir(parents=True)
    part.write_bytes((src / entry["name"]).read_bytes()[:1000])
    counted = []
    assert mw.fetch_file(f"{source['url']}/model.safetensors", {"X-T": "1"}, str(tmp_path), entry,
                         on_bytes=counted.append) == 1000
    assert server.requests[-1] == ("GET", "/mirror/model.safetensors", "bytes=1000-")
    assert sum(counted) == entry["size"] - 1000
    assert (tmp_path / entry["name"]).read_bytes() == (src / entry["name"]).read_bytes()
    assert oct((tmp_path / entry["name"]).stat().st_mode & 0o777) == "0o644"
    assert not part.exists()


def test_fetch_restarts_a_part_larger_than_the_file(tmp_path, mirror):
    server, source, entries, _src = mirror
    entry = next(e for e in entries if e["name"] == "extra.bin")
    part = Path(mw.partial_path(str(tmp_path), entry["name"]))
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * (entry["size"] + 1))
    assert mw.fetch_file(f"{source['url']}/extra.bin", {}, str(tmp_path), entry) == 0
    assert server.requests[-1][2] == ""
    assert mw.mismatch(str(tmp_path / "extra.bin"), entry) == ""


def test_fetch_of_a_whole_part_only_checks_it(tmp_path, mirror):
    server, source, entries, src = mirror
    entry = next(e for e in entries if e["name"] == "extra.bin")
    part = Path(mw.partial_path(str(tmp_path), entry["name"]))
    part.parent.mkdir(parents=True)
    part.write_bytes((src / "extra.bin").read_bytes())
    asked = len(server.requests)
    assert mw.fetch_file(f"{source['url']}/extra.bin", {}, str(tmp_path), entry) == entry["size"]
    assert len(server.requests) == asked


def test_an_empty_file_is_staged_without_a_request(tmp_path, mirror):
    server, source, _entries, _src = mirror
    entry = mw.file_entry("sub/empty.txt", 0, hashlib.sha256(b"").hexdigest())
    asked = len(server.requests)
    assert mw.fetch_file(f"{source['url']}/sub/empty.txt", {}, str(tmp_path), entry) == 0
    assert (tmp_path / "sub" / "empty.txt").read_bytes() == b""
    assert oct((tmp_path / "sub" / "empty.txt").stat().st_mode & 0o777) == "0o644"
    assert len(server.requests) == asked
    assert not Path(mw.partial_path(str(tmp_path), entry["name"])).exists()


def test_an_empty_file_with_another_hash_is_refused(tmp_path, mirror):
    _server, source, _entries, _src = mirror
    entry = mw.file_entry("empty.txt", 0, "0" * 64)
    with pytest.raises(mw.WeightsError, match=r"empty\.txt from .*: sha256 e3b0c442"):
        mw.fetch_file(f"{source['url']}/empty.txt", {}, str(tmp_path), entry)
    assert not (tmp_path / "empty.txt").exists()


def test_fetch_starts_over_when_the_server_ignores_the_range(tmp_path):
    data = os.urandom(50_000)
    (tmp_path / "srv").mkdir()
    (tmp_path / "srv" / "f").write_bytes(data)
    handler = partial(SimpleHTTPRequestHandler, directory=str(tmp_path / "srv"))
    handler.log_message = lambda *a: None
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)  # http.server answers 200 to a Range request
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        entry = {"name": "f", "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        part = Path(mw.partial_path(str(tmp_path / "d"), "f"))
        part.parent.mkdir(parents=True)
        part.write_bytes(data[:100])
        url = f"http://127.0.0.1:{server.server_address[1]}/f"
        assert mw.fetch_file(url, {}, str(tmp_path / "d"), entry) == 0
        assert (tmp_path / "d" / "f").read_bytes() == data
    finally:
        server.shutdown()
        server.server_close()


def test_fetch_refuses_bytes_that_do_not_match(tmp_path, mirror):
    _server, source, entries, _src = mirror
    entry = {**next(e for e in entries if e["name"] == "extra.bin"), "sha256": SHA}
    with pytest.raises(mw.WeightsError) as exc:
        mw.fetch_file(f"{source['url']}/extra.bin", {}, str(tmp_path), entry)
    assert str(exc.value).startswith(f"extra.bin from {source['url']}/extra.bin: sha256 ")
    assert str(exc.value).endswith("; the partial file was removed, run again to fetch it anew "
                                   "(a mirror serving "
                                   "other bytes than it lists fails again)")
    assert not Path(mw.partial_path(str(tmp_path), "extra.bin")).exists()
    assert not (tmp_path / "extra.bin").exists()


def test_mirror_plan(mirror):
    server, source, entries, src = mirror
    assert mw.mirror_plan(source, 5) == ("c" * 40, entries)
    with pytest.raises(mw.WeightsError) as exc:
        mw.mirror_plan({**source, "revision": "v2"}, 5)
    assert str(exc.value) == (f"{source['url']}/.model_weights.json holds "
                              f"{{'repo': 'org/m', 'revision': 'v1'}}, "
                              f"not {{'repo': 'org/m', 'revision': 'v2'}}: the mirror serves other weights")
    with pytest.raises(mw.WeightsError) as exc:
        mw.mirror_plan({**source, "url": server.url + "/nothing"}, 5)
    assert str(exc.value) == (f"{server.url}/nothing has no .model_weights.json of org/m@v1 (404): check the "
                              f"repository name and revision")
    (src / "sub").mkdir()
    (src / "sub" / mw.MANIFEST).write_text("not json")
    with pytest.raises(mw.WeightsError, match=r"/sub/.model_weights.json is not JSON \("):
        mw.mirror_plan({**source, "url": source["url"] + "/sub"}, 5)
    (src / "sub" / mw.MANIFEST).write_text("[]")
    with pytest.raises(mw.WeightsError, match=r"holds None, not"):
        mw.mirror_plan({**source, "url": source["url"] + "/sub"}, 5)
    with pytest.raises(mw.WeightsError) as exc:
        mw.mirror_plan({**source, "url": "http://127.0.0.1:9"}, 5)
    assert str(exc.value).startswith("weights source http://127.0.0.1:9 does not answer (Connection refused)")


def test_stage_downloads_once_then_reads_the_manifest(tmp_path, mirror):
    server, source, entries, _src = mirror
    progress = tmp_path / "progress.json"
    result = _stage(source, tmp_path / "root", progress_file=str(progress))
    directory = tmp_path / "root/org/m/v1"
    total = sum(e["size"] for e in entries)
    assert result == {"dir": str(directory), "changed": True, "downloaded_bytes": total, "resumed": [],
                      "refetched": [], "commit": "c" * 40, "files": 4, "total_bytes": total,
                      "status": "downloaded", "to_download_bytes": total}
    assert mw.is_staged(mw.read_manifest(str(directory)), source)
    assert json.loads(progress.read_text())["finished"] is True
    asked = len(server.requests)
    again = _stage(source, tmp_path / "root", progress_file=str(progress))
    assert again == {"dir": str(directory), "changed": False, "downloaded_bytes": 0, "resumed": [],
                     "refetched": [],
                     "status": "staged", "commit": "c" * 40, "files": 4, "total_bytes": total}
    assert len(server.requests) == asked
    assert json.loads(progress.read_text()) == {"finished": True, "error": "", "line": "staged", "done": 0,
                                                "total": total, "elapsed": 0}


def test_stage_check_mode_writes_nothing(tmp_path, mirror):
    _server, source, entries, _src = mirror
    result = _stage(source, tmp_path / "root", check_mode=True, progress_file=str(tmp_path / "p.json"))
    assert (result["status"], result["changed"], result["to_download_bytes"]) == (
        "would download", True, sum(e["size"] for e in entries))
    assert not (tmp_path / "root").exists()
    assert not (tmp_path / "p.json").exists()


def test_stage_refuses_before_writing_when_space_is_short(tmp_path, mirror):
    _server, source, entries, _src = mirror
    total = sum(e["size"] for e in entries)
    with pytest.raises(mw.WeightsError, match="not enough space"):
        _stage(source, tmp_path / "root", free=lambda _: total - 1)
    assert not (tmp_path / "root").exists()
    assert _stage(source, tmp_path / "root", free=lambda _: total)["status"] == "downloaded"


def test_stage_refetches_a_corrupted_file_and_resumes_a_partial_one(tmp_path, mirror):
    _server, source, entries, src = mirror
    directory = tmp_path / "root/org/m/v1"
    directory.mkdir(parents=True)
    (directory / "extra.bin").write_bytes(b"\0" * 70_000)  # right size, wrong bytes
    part = Path(mw.partial_path(str(directory), "model.safetensors"))
    part.parent.mkdir(parents=True)
    part.write_bytes((src / "model.safetensors").read_bytes()[:5000])
    result = _stage(source, tmp_path / "root")
    zeros = hashlib.sha256(bytes(70_000)).hexdigest()
    listed = next(e["sha256"] for e in entries if e["name"] == "extra.bin")
    assert result["refetched"] == [f"extra.bin: sha256 {zeros}, the source says {listed}"]
    assert result["resumed"] == ["model.safetensors"]
    total = sum(e["size"] for e in entries)
    assert result["to_download_bytes"] == total - 70_000 - 5000
    assert result["downloaded_bytes"] == total - 5000
    for entry in entries:
        assert mw.mismatch(str(directory / entry["name"]), entry) == ""
    assert json.loads((directory / mw.STATE_DIR / mw.PROGRESS).read_text())["finished"] is True


def test_stage_names_a_file_the_mirror_lacks_and_records_the_error(tmp_path, mirror):
    _server, source, _entries, src = mirror
    (src / "extra.bin").unlink()
    with pytest.raises(mw.WeightsError) as exc:
        _stage(source, tmp_path / "root", progress_file=str(tmp_path / "p.json"))
    where = source["url"].split("/")[2]
    assert str(exc.value) == f"{where} has no extra.bin (404): check the repository name and revision"
    state = json.loads((tmp_path / "p.json").read_text())
    assert (state["finished"], state["error"]) == (True, str(exc.value))
    assert mw.read_manifest(str(tmp_path / "root/org/m/v1")) is None


def test_stage_names_a_source_that_stops_answering(tmp_path, mirror):
    _server, source, entries, _src = mirror
    with pytest.raises(mw.WeightsError) as exc:
        mw.stage(source, str(tmp_path / "root"), plan=lambda: ("c", entries),
                 file_url=lambda commit, name: f"http://127.0.0.1:9/{name}", headers={})
    assert str(exc.value).startswith("weights source 127.0.0.1:9 does not answer (Connection refused)")


def test_stage_names_a_disk_that_cannot_be_written(tmp_path, mirror):
    _server, source, _entries, _src = mirror
    directory = tmp_path / "root/org/m/v1"
    Path(mw.partial_path(str(directory), "config.json")).mkdir(parents=True)  # a directory where a file goes
    with pytest.raises(mw.WeightsError) as exc:
        _stage(source, tmp_path / "root")
    assert str(exc.value) == f"writing config.json under {directory}: Is a directory"


def test_stage_a_path_source_and_a_draft(tmp_path):
    target = make_repo(tmp_path / "target", config=TARGET)
    draft = make_repo(tmp_path / "draft", config=DRAFT)
    source = mw.parse_source({"path": str(draft)}, "w")
    result = mw.stage(source, "/unused", plan=None, file_url=None, headers={}, draft_of=str(target),
                      algorithm="EAGLE3", progress_file=str(tmp_path / "p.json"))
    assert result == {"dir": str(draft), "changed": False, "downloaded_bytes": 0, "resumed": [],
                      "refetched": [],
                      "status": "path", "files": 0, "total_bytes": 0, "draft_checked": True}
    assert not (draft / mw.STATE_DIR).exists()  # nothing written into a path source
    make_repo(tmp_path / "wrong", config={**DRAFT, "vocab_size": 7})
    with pytest.raises(mw.WeightsError, match="has vocab_size 7"):
        mw.stage(mw.parse_source({"path": str(tmp_path / "wrong")}, "w"), "/unused", plan=None, file_url=None,
                 headers={}, draft_of=str(target), algorithm="EAGLE3")
    with pytest.raises(mw.WeightsError, match="cannot read it"):
        mw.stage(mw.parse_source({"path": str(tmp_path / "none")}, "w"), "/unused", plan=None, file_url=None,
                 headers={})


def test_stage_checks_a_draft_before_its_weights(tmp_path, mirror):
    server, source, entries, src = mirror
    (src / "config.json").write_text(json.dumps({**DRAFT, "architectures": ["LlamaForCausalLM"]}))
    data = (src / "config.json").read_bytes()
    entries = mw.order([e for e in entries if e["name"] != "config.json"]
                       + [mw.file_entry("config.json", len(data), hashlib.sha256(data).hexdigest())])
    target = make_repo(tmp_path / "target", config=TARGET)
    with pytest.raises(mw.WeightsError, match="is not an EAGLE-3 draft"):
        mw.stage(source, str(tmp_path / "root"), plan=lambda: ("c", entries),
                 file_url=lambda commit, name: f"{source['url']}/{name}", headers={}, draft_of=str(target),
                 algorithm="EAGLE3")
    assert not [p for m, p, r in server.requests if p.endswith("model.safetensors")]


def test_fetch_checks_a_git_blob_sha1_and_the_size_while_streaming(tmp_path, mirror):
    _server, source, _entries, src = mirror
    data = (src / "tokenizer.json").read_bytes()
    entry = {"name": "tokenizer.json", "size": len(data), "sha1": git_blob_sha1(data)}
    assert mw.fetch_file(f"{source['url']}/tokenizer.json", {}, str(tmp_path), entry) == 0
    assert (tmp_path / "tokenizer.json").read_bytes() == data
    longer = {**entry, "name": "again.json", "size": len(data) + 1}
    with pytest.raises(mw.WeightsError) as exc:
        mw.fetch_file(f"{source['url']}/tokenizer.json", {}, str(tmp_path), longer)
    assert str(exc.value).startswith(f"again.json from {source['url']}/tokenizer.json: size {len(data)}, "
                                     f"the source says {len(data) + 1}; the partial file was removed")
    wrong = {**entry, "name": "third.json", "sha1": "0" * 40}
    with pytest.raises(mw.WeightsError) as exc:
        mw.fetch_file(f"{source['url']}/tokenizer.json", {}, str(tmp_path), wrong)
    assert f": sha1 {git_blob_sha1(data)}, the source says {'0' * 40};" in str(exc.value)


def test_partial_downloads_live_under_the_state_directory():
    """Where a resume finds a partial file: beside the files, in the role's state directory (which the
    staged-file listing and the manifest leave out)."""
    assert mw.partial_path("/w/org/m/v1", "sub/model.safetensors") == (
        "/w/org/m/v1/.model_weights/partial/sub/model.safetensors.part")


def test_an_empty_file_is_present_not_missing(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    entry = {"name": "empty", "size": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    assert mw.mismatch(str(tmp_path / "empty"), entry) == ""
    assert mw.mismatch(str(tmp_path / "gone"), entry) == "missing"


def test_free_bytes_of_a_relative_path_not_made_yet_ends_at_the_root(tmp_path, monkeypatch):
    """A relative path climbs to its first component, then to / (never loops on the empty name)."""
    monkeypatch.chdir(tmp_path)
    st = os.statvfs("/")
    assert abs(mw.free_bytes("not/made") - st.f_bavail * st.f_frsize) < (64 << 20)
