"""Role model_weights on this machine (connection local, root), against the Hub stand-in
(tests/stand_ins/hub_server.py) serving tiny repositories generated here: a first download, a second
run that changes nothing and asks nothing, a killed download that resumes, a corrupted file that is
fetched again, a repository larger than the free space refused before anything is written, a refused
token (never printed), an unknown revision, an unreachable source, a mirror of a staged directory, and
EAGLE-3 drafts that fit or do not fit their target. The role's venv gets the pinned huggingface_hub
from this machine's package index, once per module; with a lock (the stable lock's own entries) it gets
exactly the lock's files from a mirror, whatever pip configuration the host has, and a lock without one
of them is refused before anything changes."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import ansible
import pytest
from ansible_run import REPO_ROOT, run_playbook
from cache import pip_download
from lockwheels import downloader_files

sys.path.insert(0, str(REPO_ROOT / "tests" / "stand_ins"))
from hub_server import HubStandIn, Repo, make_repo

pytestmark = pytest.mark.integration
COMMIT = "c0ffee" + "0" * 34
TOKEN = "hf_stand_in_secret_token_4711"
STAGED = "Publish the staged directory of main (model)"
ENDED = "Read whether the staging ended, main (model)"
LOOK = "Look for the staged weights of main (model)"
SHARDS = {"model-00001-of-00002.safetensors": 3 << 20, "model-00002-of-00002.safetensors": 1 << 20}


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    return tmp_path_factory.mktemp("weights-venv") / "hf"


@pytest.fixture
def hub(tmp_path):
    repo = make_repo(tmp_path / "src", SHARDS)
    with HubStandIn(token=TOKEN) as server:
        server.add(Repo("org/model", repo, COMMIT, tags={"v1"}, private=True))
        yield server


def play(venv, root, models, **extra):
    return [{"hosts": "localhost", "gather_facts": False,
             "vars": {"sglang_service_models": models, "model_weights_root": str(root),
                      "model_weights_venv": str(venv), "model_weights_progress_step": 1,
                      "model_weights_timeout": 10, "sglang_service_secrets": {"HF_TOKEN": TOKEN}, **extra},
             "roles": [{"role": "model_weights"}]}]


def model(hub, revision="v1", **more):
    weights = {"repo": "org/model", "revision": revision, "endpoint": hub.url}
    return {"name": "main", "weights": weights, **more}


def staged_files(directory: Path) -> dict[str, int]:
    return {p.relative_to(directory).as_posix(): p.stat().st_size for p in directory.rglob("*")
            if p.is_file() and not p.relative_to(directory).as_posix().startswith(".model_weights/")}


def failure(result, name=ENDED):
    res = result.task("localhost", name)
    assert res["event"] == "runner_on_failed", res
    assert result.rc != 0
    return res["msg"]


def assert_job_file_erased(result):
    """The staging job's result file is removed (ansible-core leaves a poll-0 job's in ~/.ansible_async)."""
    erased = result.task("localhost", "Remove the staging job's result file, main (model)")["erased"]
    assert Path(erased).name == result.task("localhost", "Stage main (model)")["ansible_job_id"]
    assert not Path(erased).exists()


def test_first_download_then_a_run_that_changes_and_asks_nothing(tmp_path, hub, venv):
    root = tmp_path / "models"
    hub.throttle = 1 << 20  # 4 MiB in about 4 s: progress lines at 1 s steps
    first = run_playbook(play(venv, root, [model(hub)]), timeout=600)
    assert first.rc == 0, first.stdout[-3000:]
    look = first.task("localhost", LOOK)
    assert (look["staged"], look["status"], look["dir"]) == (False, "not staged", str(root / "org/model/v1"))
    done = first.task("localhost", ENDED)
    directory = root / "org/model/v1"
    assert (done["dir"], done["status"], done["changed"]) == (str(directory), "downloaded", True)
    assert (done["commit"], done["files"]) == (COMMIT, 4)
    assert done["downloaded_bytes"] == done["total_bytes"] == sum(SHARDS.values()) + sum(
        (hub.repos["org/model"].directory / n).stat().st_size for n in ("config.json", "tokenizer.json"))
    source = hub.repos["org/model"].directory
    small = {n: (source / n).stat().st_size for n in ("config.json", "tokenizer.json")}
    assert staged_files(directory) == {
        ".model_weights.json": (directory / ".model_weights.json").stat().st_size, **small, **SHARDS}
    manifest = json.loads((directory / ".model_weights.json").read_text())
    assert (manifest["verified"], manifest["commit"]) == (True, COMMIT)
    assert {f["name"]: ("sha256" in f) for f in manifest["files"]}["model-00001-of-00002.safetensors"]
    facts = first.task("localhost", STAGED)["ansible_facts"]["model_weights_staged"]
    assert facts == {"main": {"model_path": str(directory)}}
    lines = [r["msg"] for r in first.results["localhost"] if r["task"] == "Show the progress of main (model)"]
    assert any(re.fullmatch(r"main \(model\): 0\.00 / 0\.00 GiB \(\d+\.\d%\), \d+\.\d MiB/s, "
                            r"model-0000[12]-of-00002\.safetensors", line) for line in lines), lines
    assert lines[-1] == f"main (model): {directory}: downloaded (4 files, {done['total_bytes']} bytes)"
    assert TOKEN not in first.stdout
    assert_job_file_erased(first)

    asked = len(hub.requests)
    second = run_playbook(play(venv, root, [model(hub)]), timeout=600)
    assert second.rc == 0, second.stdout[-3000:]
    # staged already: one module run reads the manifest, and no background job is started
    again = second.task("localhost", LOOK)
    assert (again["staged"], again["status"], again["changed"], again["downloaded_bytes"]) == (
        True, "staged", False, 0)
    assert (again["dir"], again["commit"], again["files"]) == (str(directory), COMMIT, 4)
    assert second.task("localhost", "Stage main (model)")["event"] == "runner_on_skipped"
    assert second.task("localhost", STAGED)["ansible_facts"]["model_weights_staged"] == facts
    assert len(hub.requests) == asked, hub.requests[asked:]  # the manifest was read; the source not asked
    assert second.stats["changed"].get("localhost", 0) == 0, second.stats


def test_a_killed_download_resumes(tmp_path, hub, venv):
    root = tmp_path / "models"
    # install the venv (and stage nothing) with a first run on a path source
    make_repo(tmp_path / "local")
    assert run_playbook(play(venv, root, [{"name": "x", "weights": {"path": str(tmp_path / "local")}}]),
                        timeout=600).rc == 0
    hub.throttle = 1 << 20  # 1 MiB/s: the 3 MiB shard takes 3 s
    args = {"source": model(hub)["weights"], "root": str(root), "token": TOKEN, "timeout": 10}
    module = subprocess.Popen([str(venv / "bin/python"), "-c", RUN_MODULE, json.dumps(args)],
                              env={**os.environ, "PYTHONPATH": str(Path(ansible.__file__).parent.parent)},
                              stdout=subprocess.DEVNULL)
    part = root / "org/model/v1/.model_weights/partial/model-00001-of-00002.safetensors.part"
    deadline = time.monotonic() + 60
    while (not part.exists() or part.stat().st_size < (1 << 20)) and time.monotonic() < deadline:
        time.sleep(0.1)
    module.send_signal(signal.SIGKILL)
    module.wait()
    had = part.stat().st_size
    assert (1 << 20) <= had < (3 << 20)
    hub.throttle = 0
    result = run_playbook(play(venv, root, [model(hub)]), timeout=600)
    assert result.rc == 0, result.stdout[-3000:]
    done = result.task("localhost", ENDED)
    assert done["resumed"] == ["model-00001-of-00002.safetensors"]
    # small files first: the config, the tokenizer and the 1 MiB shard were whole before the kill
    assert done["downloaded_bytes"] == (3 << 20) - had
    ranges = [r for m, p, r in hub.requests if p.endswith("model-00001-of-00002.safetensors") and r]
    assert ranges[-1] == f"bytes={had}-"
    assert not part.exists()


RUN_MODULE = f"""
import json, sys, runpy
import ansible.module_utils
ansible.module_utils.__path__.append({str(REPO_ROOT / 'module_utils')!r})
sys.argv = ["model_weights", json.dumps({{"ANSIBLE_MODULE_ARGS": json.loads(sys.argv[1])}})]
runpy.run_path({str(REPO_ROOT / 'library' / 'model_weights.py')!r}, run_name="__main__")
"""


def test_a_corrupted_file_is_fetched_again(tmp_path, hub, venv):
    root = tmp_path / "models"
    assert run_playbook(play(venv, root, [model(hub)]), timeout=600).rc == 0
    directory = root / "org/model/v1"
    shard = directory / "model-00002-of-00002.safetensors"
    with shard.open("r+b") as handle:
        handle.seek(12345)
        byte = handle.read(1)
        handle.seek(12345)
        handle.write(bytes([byte[0] ^ 0xFF]))
    (directory / ".model_weights.json").unlink()  # the manifest is the marker: without it, all is checked
    result = run_playbook(play(venv, root, [model(hub)]), timeout=600)
    assert result.rc == 0, result.stdout[-3000:]
    done = result.task("localhost", ENDED)
    assert len(done["refetched"]) == 1
    assert done["refetched"][0].startswith("model-00002-of-00002.safetensors: sha256 ")
    assert done["downloaded_bytes"] == 1 << 20
    assert shard.read_bytes() == (hub.repos["org/model"].directory / shard.name).read_bytes()


def test_a_repository_larger_than_the_free_space_is_refused_before_anything_is_written(tmp_path, venv):
    src = make_repo(tmp_path / "src", SHARDS)
    with HubStandIn() as server:
        server.add(Repo("org/huge", src, COMMIT, tags={"v1"},
                        reported_sizes={"model-00001-of-00002.safetensors": 1 << 50}))
        root = tmp_path / "models"
        result = run_playbook(play(venv, root, [{"name": "main", "weights": {
            "repo": "org/huge", "revision": "v1", "endpoint": server.url}}]), timeout=600)
    message = failure(result)
    assert message.startswith(f"main.weights: not enough space for {root}/org/huge/v1: the repository is ")
    assert "free there; free space or set model_weights_root to a larger disk" in message
    assert not (root / "org/huge").exists()
    assert not [p for m, p, r in server.requests if "/resolve/" in p]


@pytest.mark.parametrize(("weights", "expected"), [
    ({"repo": "org/model", "revision": "v1"},
     "refused the token (401 Unauthorized) for org/model@v1: check the HF_TOKEN in sglang_service_secrets "
     "(not shown)"),
    ({"repo": "org/model", "revision": "v9"},
     "has repository org/model but no revision 'v9': check weights.revision (a commit sha or a tag)"),
    ({"repo": "org/other", "revision": "v1"},
     "has no repository org/other (or it is private and the token has no access to it)"),
], ids=["refused-token", "unknown-revision", "unknown-repository"])
def test_the_hub_says_no(tmp_path, hub, venv, weights, expected):
    token = "hf_wrong_token_0815" if weights["revision"] == "v1" and weights["repo"] == "org/model" else TOKEN
    result = run_playbook(play(venv, tmp_path / "models", [{"name": "main", "weights": {
        **weights, "endpoint": hub.url}}], sglang_service_secrets={"HF_TOKEN": token}), timeout=600)
    message = failure(result)
    assert message == f"main.weights: {hub.url} " + expected, message
    assert token not in result.stdout


def test_an_unreachable_source_is_named(tmp_path, venv):
    result = run_playbook(play(venv, tmp_path / "models", [{"name": "main", "weights": {
        "repo": "org/model", "revision": "v1", "endpoint": "http://127.0.0.1:9"}}]), timeout=600)
    message = failure(result)
    assert message.startswith("main.weights: weights source http://127.0.0.1:9 does not answer (ConnectError")
    assert message.endswith("or name a reachable mirror (weights.endpoint / model_weights_hub_endpoint)")
    assert_job_file_erased(result)  # a failed staging's too


def test_bad_input_is_refused_before_anything_changes(tmp_path, venv):
    result = run_playbook(play(venv, tmp_path / "models", [
        {"name": "a", "weights": {"path": "/nonexistent"}},
        {"name": "b", "weights": {"repo": "org/model", "revision": "main"}}]), timeout=600)
    res = result.task("localhost", "Check each weights source (a mapping with one of repo, url or path; "
                                   "a pinned revision)")
    assert res["event"] == "runner_on_failed", res
    bad = [r for r in res["results"] if r.get("failed")]
    assert [r["msg"] for r in bad] == [
        "sglang_service_models[1].weights.revision: main is a branch and moves; pin a commit sha or a tag"]
    assert not (tmp_path / "models").exists()


def test_a_mirror_of_a_staged_directory(tmp_path, hub, venv):
    first_root = tmp_path / "first"
    assert run_playbook(play(venv, first_root, [model(hub)]), timeout=600).rc == 0
    hub.mirror_dir = first_root / "org/model/v1"
    root = tmp_path / "second"
    mirror = hub.url + "/mirror"
    mirrored = {"name": "main", "weights": {"url": mirror, "repo": "org/model", "revision": "v1"}}
    result = run_playbook(play(venv, root, [mirrored]), timeout=600)
    assert result.rc == 0, result.stdout[-3000:]
    assert result.task("localhost", ENDED)["status"] == "downloaded"
    assert staged_files(root / "org/model/v1") == staged_files(first_root / "org/model/v1")
    wrong = {"name": "main", "weights": {"url": hub.url + "/mirror", "repo": "org/model", "revision": "v2"}}
    message = failure(run_playbook(play(venv, tmp_path / "third", [wrong]), timeout=600))
    assert message == (f"main.weights: {hub.url}/mirror/.model_weights.json holds {{'repo': 'org/model', "
                       f"'revision': 'v1'}}, not {{'repo': 'org/model', 'revision': 'v2'}}: the mirror "
                       f"serves other weights")


TARGET = {"architectures": ["KimiK25ForConditionalGeneration"], "model_type": "kimi_k25",
          "text_config": {"hidden_size": 64, "vocab_size": 128}}
DRAFT = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": 32,
         "target_hidden_size": 64, "vocab_size": 128, "draft_vocab_size": 32}


@pytest.mark.parametrize(("draft", "error"), [
    (DRAFT, ""),
    ({**DRAFT, "architectures": ["LlamaForCausalLM"]}, "is not an EAGLE-3 draft"),
    ({**DRAFT, "target_hidden_size": 4096}, "reads hidden states of size 4096"),
], ids=["fits", "not-eagle3", "other-hidden-size"])
def test_an_eagle3_draft_is_checked_against_its_target(tmp_path, venv, draft, error):
    with HubStandIn() as server:
        server.add(Repo("org/target", make_repo(tmp_path / "t", config=TARGET), COMMIT, tags={"v1"}))
        server.add(Repo("org/draft", make_repo(tmp_path / "d", {"model.safetensors": 2 << 20}, config=draft,
                                               seed=1), COMMIT, tags={"v1"}))
        entry = {"name": "main", "weights": {"repo": "org/target", "revision": "v1", "endpoint": server.url},
                 "draft_weights": {"repo": "org/draft", "revision": "v1", "endpoint": server.url},
                 "speculative": {"algorithm": "EAGLE3"}}
        root = tmp_path / "models"
        result = run_playbook(play(venv, root, [entry]), timeout=600)
    if not error:
        assert result.rc == 0, result.stdout[-3000:]
        assert result.task("localhost", "Publish the staged directory of main (draft)")["ansible_facts"][
            "model_weights_staged"] == {"main": {"model_path": str(root / "org/target/v1"),
                                                 "draft_model_path": str(root / "org/draft/v1")}}
        assert result.task("localhost", "Read whether the staging ended, main (draft)")["draft_checked"]
        return
    message = failure(result, "Read whether the staging ended, main (draft)")
    assert message.startswith("main.draft_weights: draft org/draft ")
    assert error in message
    # refused before the draft's weights: only its small files were fetched
    assert not (root / "org/draft/v1/model.safetensors").exists()
    shard = f"/org/draft/resolve/{COMMIT}/model.safetensors"
    assert not [p for m, p, r in server.requests if p == shard]


def test_a_host_serving_no_weights_gets_nothing(tmp_path, venv):
    plain = {"name": "m", "model_path": "/models/m"}
    result = run_playbook(play(venv, tmp_path / "models", [plain]), timeout=600)
    assert result.rc == 0, result.stdout[-3000:]
    assert result.stats["changed"].get("localhost", 0) == 0
    assert not (tmp_path / "models").exists()
    published = result.task("localhost", "Start with no staged weights")["ansible_facts"]
    assert published == {"model_weights_staged": {}}


# With a locked stack: the downloader comes from the lock's files (the committed stable lock's own entries,
# the same files users get), fetched from a mirror into a wheel store and installed with no index.
@pytest.fixture(scope="module")
def locked(tmp_path_factory):
    """The downloader's lock entries, and a mirror directory with their wheels (from this machine's index)."""
    files = downloader_files()
    mirror = tmp_path_factory.mktemp("downloader-mirror")
    pip_download([f"{f['name']}=={f['version']}" for f in files], mirror)
    return files, mirror


def locked_vars(tmp_path, locked, files=None):
    files_, mirror = locked
    return {"model_weights_lock_files": files_ if files is None else files,
            "model_weights_wheel_store": str(tmp_path / "store"),
            "model_weights_wheel_mirrors": [str(mirror)], "model_weights_wheel_use_lock_urls": False}


def test_a_locked_downloader_is_the_locks_files_whatever_pip_configuration_says(tmp_path, hub, locked):
    # a host pip configuration that would break or change any pip call reading it: an index that does not
    # exist, a constraint that excludes the lock's huggingface_hub, and the same through PIP_* variables
    (tmp_path / "constraints.txt").write_text("huggingface-hub<1\nanyio<4\n")
    (tmp_path / "pip.conf").write_text(
        f"[global]\nindex-url = http://127.0.0.1:9/simple\nconstraint = {tmp_path / 'constraints.txt'}\n")
    hostile = {"PIP_CONFIG_FILE": str(tmp_path / "pip.conf"), "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
               "PIP_CONSTRAINT": str(tmp_path / "constraints.txt")}
    venv, root = tmp_path / "hf", tmp_path / "models"
    check = run_playbook(play(venv, root, [model(hub)], **locked_vars(tmp_path, locked)), envvars=hostile,
                         check=True, timeout=600)
    assert check.rc == 0, check.stdout[-3000:]
    assert check.task("localhost", "Create the downloader's venv")["changed"]
    assert not venv.exists()
    assert not (tmp_path / "store").exists()
    first = run_playbook(play(venv, root, [model(hub)], **locked_vars(tmp_path, locked)), envvars=hostile,
                         timeout=600)
    assert first.rc == 0, first.stdout[-3000:]
    assert first.task("localhost", ENDED)["status"] == "downloaded"
    files, _mirror = locked
    listed = subprocess.run([str(venv / "bin/python"), "-c", "import importlib.metadata as m, json; print("
                             "json.dumps({d.metadata['Name']: d.version for d in m.distributions()}))"],
                            capture_output=True, text=True, check=True).stdout
    installed = {re.sub(r"[-_.]+", "-", name).lower(): version
                 for name, version in json.loads(listed).items()}
    for seed in ("pip", "setuptools"):  # what `python3 -m venv` puts in every venv
        installed.pop(seed, None)
    assert installed == {f["name"]: f["version"] for f in files}
    assert sorted(p.name for p in (tmp_path / "store").glob("*.whl")) == sorted(f["filename"] for f in files)
    requirements = (venv / "pylock.requirements.txt").read_text()
    assert requirements.splitlines() == [f"{f['name']}=={f['version']} --hash=sha256:{f['sha256']}"
                                         for f in sorted(files, key=lambda f: f["name"])]
    assert (venv / ".lock-installed").read_text().strip() == hashlib.sha256(requirements.encode()).hexdigest()

    second = run_playbook(play(venv, root, [model(hub)], **locked_vars(tmp_path, locked)), envvars=hostile,
                          timeout=600)
    assert second.rc == 0, second.stdout[-3000:]
    assert second.stats["changed"].get("localhost", 0) == 0, second.stats
    assert second.task("localhost", "Install the downloader's files")["event"] == "runner_on_skipped"


def test_a_lock_without_a_package_the_downloader_needs_is_refused_before_anything_changes(tmp_path, locked):
    files, _mirror = locked
    short = [f for f in files if f["name"] != "hf-xet"]
    root = tmp_path / "models"
    weights = {"repo": "org/model", "revision": COMMIT, "endpoint": "http://127.0.0.1:9"}
    result = run_playbook(play(tmp_path / "hf", root, [{"name": "main", "weights": weights}],
                               **locked_vars(tmp_path, locked, short)), timeout=600)
    message = failure(result, "Require the downloader's packages in the stack's lock")
    assert "the stack's lock has no file for this host of hf-xet" in message
    assert "make lock PROFILE=" in message
    assert not root.exists()
    assert not (tmp_path / "hf").exists()
    assert not (tmp_path / "store").exists()
