"""module_utils/stack_facts: what a host runs now, read from a stack directory laid out by hand.

The stack is a directory with the layout the stack role makes (``bin/python``, ``stack.json``,
``sgl_kernel.json``, a site-packages), built in the test without a venv build: ``bin/python`` links
this machine's interpreter and a ``pyvenv.cfg`` makes it use the stack's own (nearly empty)
site-packages, whose ``*.dist-info`` directories are written here. Stand-ins, named as such: torch is
tests/stand_ins/torch-on-a-gpu (no real torch in a unit test), nvcc is tests/stand_ins/nvcc-12.6, and
nvidia-smi replays tests/stand_ins/nvidia-smi-recordings (no GPU here).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

import pytest
from ansible.module_utils.stack_facts import (
    StackFactsError,
    current_stack,
    file_sha256,
    nvcc_version,
    read,
    read_manifest,
    unit_facts,
)

STAND_INS = Path(__file__).resolve().parent.parent / "stand_ins"
NVCC_12_6 = str(STAND_INS / "nvcc-12.6" / "bin" / "nvcc")
MANIFEST = {"fingerprint": "f" * 64, "profile_name": "hopper", "targets": ["9.0"],
            "fingerprint_inputs": {"torch": {"index_url": "https://download.pytorch.org/whl/cu130"}}}


@pytest.fixture(autouse=True)
def _stack_interpreter_sees_only_the_stack(monkeypatch):
    # A PYTHONPATH of the caller (mutmut sets one) would add its packages to the stack's listing.
    monkeypatch.delenv("PYTHONPATH", raising=False)


def _dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,,\n")


def make_stack(root: Path, name: str = "s1", *, dists=(), torch: bool = False, manifest=None,
               kernel_record=None) -> Path:
    directory = root / "stacks" / name
    site = directory / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    site.mkdir(parents=True)
    (directory / "bin").mkdir()
    interpreter = os.path.realpath(sys.executable)
    (directory / "bin" / "python").symlink_to(interpreter)
    (directory / "pyvenv.cfg").write_text(f"home = {os.path.dirname(interpreter)}\n"
                                          "include-system-site-packages = false\n")
    for dist_name, version in dists:
        _dist(site, dist_name, version)
    if torch:
        (site / "stand-in-torch.pth").write_text(str(STAND_INS / "torch-on-a-gpu") + "\n")
    if manifest is not None:
        (directory / "stack.json").write_text(json.dumps(manifest))
    if kernel_record is not None:
        (directory / "sgl_kernel.json").write_text(json.dumps(kernel_record))
    (root / "current").symlink_to(directory)
    return directory


def test_file_sha256_reads_past_the_first_block(tmp_path):
    data = os.urandom((1 << 20) + 17)
    path = tmp_path / "unit"
    path.write_bytes(data)
    assert file_sha256(str(path)) == hashlib.sha256(data).hexdigest()


def test_nvcc_version_of_a_toolkit():
    assert nvcc_version(NVCC_12_6) == {"toolkit_version": "12.6", "nvcc_version": "12.6.85",
                                       "nvcc": NVCC_12_6}


@pytest.mark.parametrize("nvcc", [None, "", "/nonexistent/nvcc"])
def test_nvcc_version_without_nvcc(nvcc):
    assert nvcc_version(nvcc) == {"toolkit_version": None, "nvcc_version": None, "nvcc": nvcc}


def _nvcc(tmp_path, body):
    path = tmp_path / "nvcc"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("body", [
    "echo 'Cuda compilation tools, release 13.0, V13.0.88'\nexit 1\n",  # a failing nvcc is not believed
    "echo 'nvcc: something else'\n",                                   # no release line
])
def test_nvcc_version_that_cannot_be_read(tmp_path, body):
    nvcc = _nvcc(tmp_path, body)
    assert nvcc_version(nvcc) == {"toolkit_version": None, "nvcc_version": None, "nvcc": nvcc}


def test_nvcc_version_of_a_hung_nvcc(tmp_path):
    nvcc = _nvcc(tmp_path, "echo 'Cuda compilation tools, release 13.0, V13.0.88'\nexec sleep 5\n")
    start = time.monotonic()
    assert nvcc_version(nvcc, timeout=0.2)["toolkit_version"] is None
    assert time.monotonic() - start < 2


def test_nvcc_version_survives_bytes_that_are_not_utf8(tmp_path):
    nvcc = _nvcc(tmp_path, "printf 'nvcc \\377\\n'\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    assert nvcc_version(nvcc)["nvcc_version"] == "13.0.88"


def test_nvcc_version_of_an_nvcc_that_cannot_start(tmp_path):
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("no interpreter line\n")
    nvcc.chmod(0o755)
    assert nvcc_version(str(nvcc))["nvcc_version"] is None


def test_read_manifest(tmp_path):
    assert read_manifest(str(tmp_path)) == {}
    (tmp_path / "stack.json").write_text('{"profile_name": "hopper"}')
    (tmp_path / "sgl_kernel.json").write_text('{"fingerprint": "k"}')
    assert read_manifest(str(tmp_path)) == {"profile_name": "hopper"}
    assert read_manifest(str(tmp_path), "sgl_kernel.json") == {"fingerprint": "k"}


def test_a_damaged_manifest_says_to_rebuild(tmp_path):
    (tmp_path / "stack.json").write_text("{not json")
    with pytest.raises(StackFactsError,
                       match=rf"^cannot read {tmp_path}/stack.json: .*; the stack is damaged: rebuild it$"):
        read_manifest(str(tmp_path))


def test_current_stack(tmp_path):
    assert current_stack(str(tmp_path)) == (None, None)
    (tmp_path / "current").mkdir()                      # a directory, not the link the role makes
    assert current_stack(str(tmp_path)) == (None, None)


def test_current_stack_follows_the_link(tmp_path):
    directory = make_stack(tmp_path)
    assert current_stack(str(tmp_path)) == ("s1", str(directory))


def test_a_dangling_current_names_its_target(tmp_path):
    (tmp_path / "current").symlink_to("stacks/gone")
    with pytest.raises(StackFactsError, match=rf"^{tmp_path}/current points to stacks/gone, which does not "
                                              "exist; re-run playbooks/site.yml"):
        current_stack(str(tmp_path))


def test_collect_without_a_stack_or_a_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))           # no nvidia-smi to be found
    unit = tmp_path / "sglang-main.service"
    unit.write_text("[Service]\n")
    facts, probe = read(str(tmp_path), unit_paths=[str(tmp_path / "absent.service"), str(unit)])
    assert probe is None  # no stack: nothing was probed
    assert facts == {
        "stack": {"root": str(tmp_path), "name": None, "path": None, "fingerprint": None, "python": None},
        "profile": None, "target_capabilities": [],
        "cuda": {"toolkit_version": None, "nvcc_version": None, "nvcc": None},
        "driver": {"version": None, "cuda_driver_version": None, "capabilities": []},
        "torch": {"version": None, "git_version": None, "cuda_version": None, "index_url": None},
        "sgl_kernel": {"package": None, "version": None, "build_fingerprint": None},
        "sglang": {"version": None},
        "unit": {"path": str(unit), "sha256": hashlib.sha256(b"[Service]\n").hexdigest()},
        "distributions": [],
    }


def test_collect_the_stack_in_use(tmp_path, monkeypatch):
    monkeypatch.setenv("NVIDIA_SMI_RECORDING", str(STAND_INS / "nvidia-smi-recordings" / "mixed-models"))
    directory = make_stack(tmp_path, dists=[("torch", "2.14.1+cu130"), ("sglang", "0.5.23"),
                                             ("sglang_kernel", "0.4.1"), ("sgl-kernel", "0.3.9")],
                           torch=True, manifest=MANIFEST, kernel_record={"fingerprint": "k" * 64})
    first, second = tmp_path / "a.service", tmp_path / "b.service"
    first.write_text("first\n")
    second.write_text("second\n")
    facts, probe = read(str(tmp_path), nvcc=NVCC_12_6, unit_paths=[str(first), str(second)],
                        nvidia_smi=str(STAND_INS / "nvidia-smi"))
    assert facts["stack"] == {"root": str(tmp_path), "name": "s1", "path": str(directory),
                              "fingerprint": "f" * 64, "python": "{}.{}.{}".format(*sys.version_info[:3])}
    assert facts["profile"] == "hopper"
    assert facts["target_capabilities"] == ["9.0"]
    assert facts["cuda"] == {"toolkit_version": "12.6", "nvcc_version": "12.6.85", "nvcc": NVCC_12_6}
    assert facts["driver"] == {"version": "580.105.08", "cuda_driver_version": "13.0",
                               "capabilities": ["8.0", "8.9", "12.0"]}
    # the stand-in torch says 0.0.0+stand-in: the local tag is dropped, as the lock's version has none
    assert facts["torch"] == {"version": "0.0.0", "git_version": "stand-in", "cuda_version": "13.0",
                              "index_url": "https://download.pytorch.org/whl/cu130"}
    # sglang-kernel is the package's current name, sgl-kernel the old one: the current one wins
    assert facts["sgl_kernel"] == {"package": "sglang-kernel", "version": "0.4.1",
                                   "build_fingerprint": "k" * 64}
    assert facts["sglang"] == {"version": "0.5.23"}
    assert facts["unit"] == {"path": str(first), "sha256": hashlib.sha256(b"first\n").hexdigest()}
    assert [(d["name"], d["version"]) for d in facts["distributions"]] == [
        ("sgl-kernel", "0.3.9"), ("sglang", "0.5.23"), ("sglang-kernel", "0.4.1"), ("torch", "2.14.1+cu130")]
    # the torch probe's whole answer, for rating without a second import
    assert probe["python"] == str(directory / "bin" / "python")
    assert (probe["torch_version"], probe["build"], probe["cuda_version"]) == ("0.0.0+stand-in", "cuda",
                                                                               "13.0")
    assert probe["arch_list"] == ["sm_80", "sm_90", "sm_100", "sm_120"]
    assert [device["capability"] for device in probe["devices"]] == ["9.0"]


def test_unit_facts_one_file_per_model_hashes_them_together(tmp_path):
    units = tmp_path / "units"
    units.mkdir()
    (units / "sglang-main.service").write_text("main\n")
    (units / "sglang-draft.service").write_text("draft\n")
    (units / "sglang-gone.service").mkdir()              # not a file: not a unit
    pattern = str(units / "sglang-*.service")
    files = (("sglang-draft.service", b"draft\n"), ("sglang-main.service", b"main\n"))
    lines = "".join(f"{name} {hashlib.sha256(text).hexdigest()}\n" for name, text in files)
    both = {"path": pattern, "sha256": hashlib.sha256(lines.encode()).hexdigest()}
    # the first pattern that matches wins; one that matches nothing is passed over
    assert unit_facts([str(tmp_path / "none-*.service"), pattern, str(tmp_path)]) == both
    (units / "sglang-main.service").write_text("main, changed\n")
    assert unit_facts([pattern])["sha256"] != both["sha256"]
    (units / "sglang-main.service").unlink()
    assert unit_facts([pattern]) == {"path": str(units / "sglang-draft.service"),
                                     "sha256": hashlib.sha256(b"draft\n").hexdigest()}
    assert unit_facts([]) == unit_facts(None) == {"path": None, "sha256": None}


def test_collect_an_old_kernel_name_and_no_torch(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    make_stack(tmp_path, dists=[("sgl-kernel", "0.3.9")], manifest={"profile_name": "ampere"})
    facts, probe = read(str(tmp_path))
    assert probe is None  # no torch: nothing was probed
    assert facts["sgl_kernel"] == {"package": "sgl-kernel", "version": "0.3.9", "build_fingerprint": None}
    assert facts["torch"] == {"version": None, "git_version": None, "cuda_version": None, "index_url": None}
    assert facts["sglang"] == {"version": None}
    assert facts["target_capabilities"] == []
    assert facts["unit"] == {"path": None, "sha256": None}


def test_a_stack_whose_torch_is_listed_but_does_not_import(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    make_stack(tmp_path, dists=[("torch", "2.14.1")])
    with pytest.raises(StackFactsError, match=r"^stack s1: torch is not installed for "):
        read(str(tmp_path))


def test_a_stack_without_its_interpreter(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    directory = make_stack(tmp_path)
    (directory / "bin" / "python").unlink()
    with pytest.raises(StackFactsError, match=rf"^stack s1: python {directory}/bin/python does not exist"):
        read(str(tmp_path))


def test_the_probe_timeout_reaches_the_listing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    directory = make_stack(tmp_path)
    python = directory / "bin" / "python"
    python.unlink()
    python.write_text("#!/bin/sh\nexec /bin/sleep 5\n")
    python.chmod(0o755)
    with pytest.raises(StackFactsError, match=r"^stack s1: the distribution listing in .* within 0\.2 s"):
        read(str(tmp_path), timeout=0.2)


def test_the_probe_timeout_reaches_the_torch_probe(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    directory = make_stack(tmp_path, dists=[("torch", "2.14.1")])
    hung = tmp_path / "hung-torch"
    (hung / "torch").mkdir(parents=True)
    # STAND-IN: a torch whose import hangs, as a CUDA initialisation can
    (hung / "torch" / "__init__.py").write_text("import time\ntime.sleep(5)\n")
    site = next(directory.glob("lib/python*/site-packages"))
    (site / "hung-torch.pth").write_text(f"{hung}\n")
    with pytest.raises(StackFactsError, match=r"^stack s1: the torch probe in .* within 1 s"):
        read(str(tmp_path), timeout=1)
