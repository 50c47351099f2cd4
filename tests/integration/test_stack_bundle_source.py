"""`make bundle` of a profile whose kernel is built from source (playbooks/bundle.yml, the real role, here).

A local http server plays GitHub: it serves the test kernel package (tests/kernelpkg.py) as the archive of
``fleet-test/sglang`` at a ref, and its FetchContent dependency ``repo-tinydep`` at the path the package's
CMakeLists pins (``https://${GITHUB_ARTIFACTORY}/fleet-test/tinydep/archive/v1.tar.gz``). The profile is a
copy of profiles/stable.yml set to ``install: source`` with that repository; its lock is a tiny one whose
"wheels" are small files served from a directory by name and sha256, so no real wheel is downloaded.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_run import REPO_ROOT, run_playbook
from cache import cache_dir
from kernelpkg import build_env, make_archive, make_source, stack_venv, write_mirror
from prereq import require
from torchenv import torch_python

pytestmark = pytest.mark.integration

BUNDLE = REPO_ROOT / "playbooks" / "bundle.yml"
MODULE_TASK = "Bundle the kernel's source archive and its FetchContent sources (a kernel built from source)"
REF = "v-test"
TINYDEP = "fleet-test/tinydep/archive/v1.tar.gz"
# The lock's pins of profiles/stable.yml (a source-built kernel is not in the lock).
PINS = {"torch": "2.14.1", "sglang": "0.5.23", "flashinfer-python": "0.7.2", "uv": "0.13.8"}


@contextlib.contextmanager
def serve(directory: Path):
    server = subprocess.Popen([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1", "--directory",
                               str(directory)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        port = re.search(r"port (\d+)", server.stdout.readline()).group(1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_archive(github: Path, ref: str, edit=None) -> str:
    """The test package (new layout) as GitHub's archive of fleet-test/sglang at ``ref``; its sha256."""
    checkout = github.parent / f"checkout-{ref}"
    package = make_source(checkout, "new", marker=ref)
    if edit:
        cmake = package / "CMakeLists.txt"
        cmake.write_text(edit(cmake.read_text()))
    return make_archive(checkout, github / f"fleet-test/sglang/archive/{ref}.tar.gz", top=f"sglang-{ref}")


@pytest.fixture
def bundle(tmp_path):
    """Runs playbooks/bundle.yml for a source profile at a ref against the served "GitHub"."""
    github, wheels = tmp_path / "github", tmp_path / "wheelhouse"
    wheels.mkdir()
    _, tinydep_sha = write_mirror(github)
    lock = 'lock-version = "1.0"\ncreated-by = "test"\nrequires-python = ">=3.11"\n\n'
    for name, version in PINS.items():
        filename = f"{name.replace('-', '_')}-{version}-py3-none-manylinux_2_17_x86_64.whl"
        (wheels / filename).write_bytes(name.encode())
        lock += (f'[[packages]]\nname = "{name}"\nversion = "{version}"\nwheels = [{{ url = '
                 f'"https://files.invalid/{filename}", '
                 f'hashes = {{ sha256 = "{sha256(wheels / filename)}" }} }}]\n\n')
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "pylock.srcbuild.toml").write_text(lock)
    profile = yaml.safe_load((REPO_ROOT / "profiles" / "stable.yml").read_text())
    profile["name"] = "srcbuild"
    profile["sgl_kernel"]["install"] = "source"
    profile["sgl_kernel"]["source"] = {"git_url": "https://github.com/fleet-test/sglang.git", "ref": REF,
                                       "archive_url": "", "subdir": ""}

    def run(directory: Path, *, ref=REF, check=False):
        profile["sgl_kernel"]["source"]["ref"] = ref
        (profiles / "srcbuild.yml").write_text(yaml.safe_dump(profile))
        with serve(github) as url:
            return run_playbook(BUNDLE, check=check, extravars={
                "stack_profile": str(profiles / "srcbuild.yml"), "stack_bundle_dir": str(directory),
                "stack_bundle_platforms": "x86_64", "stack_wheel_cache_dir": "",
                "stack_find_links": [str(wheels)], "stack_no_index": True, "stack_bundle_github_url": url})

    run.github, run.tinydep_sha = github, tinydep_sha
    return run


def failure(result) -> str:
    assert result.rc != 0, result.stdout[-3000:]
    (failed,) = [res for res in result.results["localhost"] if res["event"] == "runner_on_failed"]
    return failed["msg"]


def files_under(path: Path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*") if p.is_file()) if path.exists() else []


def test_a_source_profile_bundles_its_archive_and_fetchcontent_sources(bundle, tmp_path):
    archive_sha = source_archive(bundle.github, REF)
    out = tmp_path / "bundle"
    dry = bundle(out, check=True)  # check mode: says what it would fetch, writes nothing
    assert dry.rc == 0, dry.stdout[-3000:]
    assert dry.task("localhost", MODULE_TASK)["missing"] == [f"source/sglang-{REF}.tar.gz"]
    assert not out.exists()
    result = bundle(out)
    assert result.rc == 0, result.stdout[-4000:]
    archive = out / "source" / f"sglang-{REF}.tar.gz"
    tinydep = out / "github" / TINYDEP
    assert sha256(archive) == archive_sha
    assert sha256(tinydep) == bundle.tinydep_sha
    assert files_under(out / "source") == [archive.name]
    assert files_under(out / "github") == [TINYDEP]
    task = result.task("localhost", MODULE_TASK)
    assert task["changed"] is True
    assert task["package_dir"] == "python/sglang/kernels/aot"
    assert task["fetched"] == [f"source/{archive.name}", f"github/{TINYDEP}"]
    assert task["dependencies"] == [{"name": "repo-tinydep", "sha256": bundle.tinydep_sha, "state": "fetched",
                                     "url": f"https://${{GITHUB_ARTIFACTORY}}/{TINYDEP}",
                                     "path": f"github/{TINYDEP}"}]
    assert yaml.safe_load((out / "kernel-source.yml").read_text()) == {
        "sgl_kernel_source_archive_sha256": archive_sha,
        "stack_bundle_kernel_source_archive": f"source/{archive.name}",
        "stack_bundle_kernel_source_mirror": "github"}
    readme = (out / "README.txt").read_text()
    assert f"python3 -m http.server --directory {out} 8080" in readme
    assert f"-e sgl_kernel_source_archive_url=http://HOST:8080/source/{archive.name}" in readme
    assert f"-e sgl_kernel_source_archive_sha256={archive_sha}" in readme
    assert "-e sgl_kernel_source_mirror_url=http://HOST:8080/github" in readme
    assert sorted(p.name for p in (out / "wheels").glob("*.whl")) == sorted(
        f"{name.replace('-', '_')}-{version}-py3-none-manylinux_2_17_x86_64.whl"
        for name, version in PINS.items())

    # a second run fetches nothing and changes nothing; check mode neither
    again = bundle(out)
    assert again.rc == 0, again.stdout[-3000:]
    assert again.stats["changed"] == {}, again.stats
    assert again.task("localhost", MODULE_TASK)["present"] == [f"source/{archive.name}", f"github/{TINYDEP}"]
    checked = bundle(out, check=True)
    assert checked.rc == 0, checked.stdout[-3000:]
    assert checked.stats["changed"] == {}, checked.stats

    # a dependency damaged in the bundle is replaced by the checked file
    tinydep.write_bytes(b"damaged")
    repaired = bundle(out)
    assert repaired.rc == 0, repaired.stdout[-3000:]
    assert repaired.task("localhost", MODULE_TASK)["fetched"] == [f"github/{TINYDEP}"]
    assert sha256(tinydep) == bundle.tinydep_sha


def test_a_dependency_whose_served_file_does_not_match_its_pin_is_named_and_not_kept(bundle, tmp_path):
    source_archive(bundle.github, REF)
    served = bundle.github / TINYDEP
    served.write_bytes(served.read_bytes() + b"tampered")
    out = tmp_path / "bundle"
    message = failure(bundle(out))
    assert message.startswith("1 configure-time dependencies of sglang-v-test.tar.gz could not be bundled: "
                              "repo-tinydep v1.tar.gz: http://127.0.0.1:")
    assert f"/{TINYDEP} has sha256 {sha256(served)}, expected {bundle.tinydep_sha}; nothing was kept" \
        in message
    assert files_under(out / "github") == []  # no file of it, no partial download
    assert not (out / "kernel-source.yml").exists()
    assert not (out / "wheels").exists()  # it fails before any wheel is fetched


def test_a_dependency_without_a_sha256_pin_is_named_before_anything_is_fetched(bundle, tmp_path):
    source_archive(bundle.github, "v-nohash", edit=lambda text: re.sub(r"\n\s*URL_HASH [^\n]*", "", text))
    out = tmp_path / "bundle"
    message = failure(bundle(out, ref="v-nohash"))
    assert "repo-tinydep (python/sglang/kernels/aot/CMakeLists.txt) has no URL_HASH SHA256 pin for " \
           f"https://${{GITHUB_ARTIFACTORY}}/{TINYDEP}" in message
    assert files_under(out / "github") == []
    assert not (out / "kernel-source.yml").exists()


def test_the_served_bundle_alone_builds_the_kernel_with_the_sgl_kernel_role(bundle, tmp_path):
    """The bundle is sufficient: the role fetches the archive and CMake its FetchContent tarball from the
    served bundle only (the "GitHub" server is stopped), and the built kernel is installed."""
    require(shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists(), "nvcc is needed")
    torch = torch_python("2.13.0")
    build_python = build_env(cache_dir("sgl-kernel-test-buildenv", "torch-2.13.0"), torch)
    source_archive(bundle.github, REF)
    out = tmp_path / "bundle"
    assert bundle(out).rc == 0
    shutil.rmtree(bundle.github)  # nothing but the bundle is left to fetch from
    kernel_source = yaml.safe_load((out / "kernel-source.yml").read_text())
    stack = tmp_path / "stack"
    stack_venv(stack, torch)
    inventory = tmp_path / "inventory.json"
    inventory.write_text(json.dumps({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    archive, mirror = (kernel_source[f"stack_bundle_kernel_source_{key}"] for key in ("archive", "mirror"))
    with serve(out) as url:
        play = [{"hosts": "localhost", "gather_facts": True,
                 "pre_tasks": [{"name": "stack facts", "ansible.builtin.set_fact": {
                     "stack_python": f"{stack}/bin/python", "stack_path": str(stack),
                     "stack_target_capabilities": ["12.0"]}}],
                 "roles": [{"role": "sgl_kernel", "vars": {
                     "sgl_kernel_install": "source",
                     "sgl_kernel_source_archive_url": f"{url}/{archive}",
                     "sgl_kernel_source_archive_sha256": kernel_source["sgl_kernel_source_archive_sha256"],
                     "sgl_kernel_source_mirror_url": f"{url}/{mirror}",
                     "sgl_kernel_build_python": str(build_python),
                     "sgl_kernel_limit_mechanisms": ["watchdog"],
                     "sgl_kernel_work_dir": str(tmp_path / "work"),
                     "sgl_kernel_log_dir": str(tmp_path / "log"),
                     "sgl_kernel_cache_dir": str(tmp_path / "compiler-cache"),
                     "sgl_kernel_artifact_dir": str(tmp_path / "store")}}]}]
        result = run_playbook(play, inventory, envvars={"ANSIBLE_CACHE_PLUGIN": "memory"}, timeout=900)
    assert result.rc == 0, result.stdout[-4000:]
    plan = result.task("localhost", "Prepare the source and plan the build")
    assert plan["fingerprint_inputs"]["source_commit"] == \
        f"archive-{kernel_source['sgl_kernel_source_archive_sha256']}"
    assert plan["source_dir"].endswith("/python/sglang/kernels/aot")
    log = (tmp_path / "log" / f"sgl-kernel-build-{plan['fingerprint'][:12]}.log").read_text()
    staged = tmp_path / "work" / "src" / plan["fingerprint_inputs"]["source_commit"]
    assert f"{url}/github/{TINYDEP}" in (staged / "python/sglang/kernels/aot/CMakeLists.txt").read_text()
    assert "_deps/repo-tinydep-src/include" in log  # CMake fetched, checked and unpacked it from the bundle
    record = json.loads((stack / "sgl_kernel.json").read_text())
    assert record["fingerprint"] == plan["fingerprint"]
