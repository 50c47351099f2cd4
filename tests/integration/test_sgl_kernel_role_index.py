"""Role sgl_kernel with an index the user runs as the artifact store: a real pypiserver (pinned, from PyPI,
in a venv under the test cache) on this machine, with upload authentication.

Two hosts of one play, both this machine (connection local, each with its own stack and work dir): the
build host builds tests/kernel_pkg once with nvcc 13.0 and uploads the wheel with the pinned twine; both
hosts download that file from the index and install it, checked by sha256; a re-run changes nothing; a
file swapped in the index is refused by sha256.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from ansible_run import run_playbook
from cache import cache_dir
from kernelpkg import build_env, served_source, stack_venv
from prereq import require
from processes import free_port
from torchenv import torch_python

pytestmark = pytest.mark.integration
TORCH = "2.14.1"
PYPISERVER = ["pypiserver==2.4.2", "passlib==1.7.4"]
USER, PASSWORD = "fleet-uploader", "s3cret-upl0ad-pw"
UPLOAD = "Upload the wheel to the index"
DOWNLOAD = "Download the wheel from the index"
INSTALL = "Install the wheel into the stack, without dependencies so that torch stays as pinned"
BUILD = "Start the build under its memory limit"


def pypiserver_python() -> Path:
    venv = cache_dir("pypiserver-venv", "2.4.2")
    if not (venv / ".ready").exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        *PYPISERVER], check=True, timeout=600)
        (venv / ".ready").write_text("\n".join(PYPISERVER))
    return venv / "bin/python"


@contextlib.contextmanager
def pypiserver(root: Path):
    """A pypiserver on 127.0.0.1 whose uploads need USER/PASSWORD; yields (base url, packages dir)."""
    python = pypiserver_python()
    packages = root / "packages"
    packages.mkdir(parents=True)
    subprocess.run([str(python), "-c", "import sys; from passlib.apache import HtpasswdFile; "
                    "f = HtpasswdFile(sys.argv[1], new=True); f.set_password(sys.argv[2], sys.argv[3]); "
                    "f.save()", str(root / "htpasswd"), USER, PASSWORD], check=True)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with open(root / "server.log", "w") as log:
        argv = [str(python.parent / "pypi-server"), "run", "-i", "127.0.0.1", "-p", str(port),
                "-P", str(root / "htpasswd"), "-a", "update", str(packages)]
        server = subprocess.Popen(argv,
                                  stdout=subprocess.DEVNULL, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{base}/simple/", timeout=2).read()
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError((root / "server.log").read_text()) from None
                time.sleep(0.3)
        yield base, packages
    finally:
        server.terminate()
        server.wait()


def test_built_wheel_goes_through_a_pypiserver_index_checked_by_sha256(tmp_path):
    require(shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").exists(), "nvcc is needed")
    torch = torch_python(TORCH)
    build_python = build_env(cache_dir("sgl-kernel-test-buildenv", f"torch-{TORCH}"), torch)
    hosts = {"builder": tmp_path / "builder", "other": tmp_path / "other"}
    for root in hosts.values():
        stack_venv(root / "stack", torch)
    store = tmp_path / "store"
    with served_source(tmp_path / "source") as source, pypiserver(tmp_path / "index") as (index, packages):
        play = [{"hosts": "all", "gather_facts": True,
                 "pre_tasks": [{"name": "stack facts", "ansible.builtin.set_fact": {
                     "stack_python": "{{ stack_root }}/bin/python", "stack_path": "{{ stack_root }}",
                     "stack_target_capabilities": ["12.0"]}}],
                 "roles": [{"role": "sgl_kernel", "vars": {
                     "sgl_kernel_install": "source",
                     "sgl_kernel_source_archive_url": source["url"],
                     "sgl_kernel_source_archive_sha256": source["sha256"],
                     "sgl_kernel_source_mirror_url": source["mirror"],
                     "sgl_kernel_build_python": str(build_python),
                     # the uploader (twine, pinned by the role) from the machine's pip configuration
                     "sgl_kernel_build_pip_args": [],
                     "sgl_kernel_index_upload_url": f"{index}/",
                     "sgl_kernel_index_url": f"{index}/simple/",
                     "sgl_kernel_index_username": USER,
                     "sgl_kernel_index_password": PASSWORD,
                     "sgl_kernel_artifact_dir": str(store), "sgl_kernel_progress_interval": 10}}]}]
        inventory = tmp_path / "inventory.json"
        inventory.write_text(json.dumps({"all": {"hosts": {name: {
            "ansible_connection": "local", "ansible_python_interpreter": sys.executable,
            "stack_root": str(root / "stack"), "sgl_kernel_work_dir": str(root / "work"),
            "sgl_kernel_log_dir": str(root / "log"), "sgl_kernel_cache_dir": str(tmp_path / "compiler-cache"),
        } for name, root in hosts.items()}}}))
        env = {"ANSIBLE_CACHE_PLUGIN": "memory"}

        result = run_playbook(play, inventory, envvars=env, timeout=1500)
        assert result.rc == 0, result.stdout[-4000:]
        assert PASSWORD not in result.stdout
        assert list(result.task_runs(BUILD)) == ["builder"]
        assert list(result.task_runs(UPLOAD)) == ["builder"]
        # the index holds the wheel under a build tag of its fingerprint; the controller store only its record
        plan = result.task("builder", "Prepare the source and plan the build")
        tagged = f"sglang_kernel-0.4.10-0fp{plan['fingerprint'][:16]}-cp310-abi3-linux_x86_64.whl"
        assert sorted(p.name for p in packages.iterdir()) == [tagged]
        record = json.loads((store / plan["fingerprint"] / "artifact.json").read_text())
        assert record["index_url"] == f"{index}/simple/"
        assert record["index_file"] == tagged
        assert record["sha256"] == hashlib.sha256((packages / tagged).read_bytes()).hexdigest()
        assert sorted(p.name for p in (store / plan["fingerprint"]).iterdir()) == ["artifact.json"]
        # both hosts downloaded that file from the index and installed it
        downloads = result.task_runs(DOWNLOAD)
        assert sorted(downloads) == ["builder", "other"]
        for name, root in hosts.items():
            assert json.loads(downloads[name]["stdout"])["url"] == f"{index}/packages/{tagged}"
            installed = json.loads((root / "stack/sgl_kernel.json").read_text())
            assert installed["sha256"] == record["sha256"]
            assert result.task(name, "Publish the selected variant")["ansible_facts"][
                "sgl_kernel_selected_variant"] == "sm100"

        again = run_playbook(play, inventory, envvars=env, timeout=600)
        assert again.rc == 0, again.stdout[-3000:]
        assert again.stats["changed"] == {}, again.stats

        # another file under the same name in the index: refused by sha256, nothing installed
        swapped = bytearray((packages / tagged).read_bytes())
        swapped[-100] ^= 0xFF
        (packages / tagged).write_bytes(bytes(swapped))
        (hosts["other"] / "stack/sgl_kernel.json").unlink()
        refused = run_playbook(play, inventory, envvars=env, timeout=600)
        assert refused.rc != 0
        failure = refused.task("other", "Fail with the reason the index download failed")
        assert f"{index}/packages/{tagged} has sha256 {hashlib.sha256(swapped).hexdigest()}, the artifact " \
            f"store recorded {record['sha256']}" in failure["msg"]
        installs = refused.task_runs(INSTALL)
        assert "other" not in installs  # stopped before the install
        assert installs["builder"]["event"] == "runner_on_skipped"  # its record is this fingerprint's
        assert not (hosts["other"] / "work/install" / record["wheel"]).with_suffix(".whl.part").exists()
