"""module_utils/sgl_kernel_wheel.py on wheels made here (no device code in them); the released
sglang-kernel 0.4.10 wheel is scanned in tests/integration/test_sgl_kernel_wheel_scan.py."""

import os
import zipfile

import pytest
from ansible.module_utils import sgl_kernel_wheel
from ansible.module_utils.sgl_kernel_wheel import (
    WheelError,
    decide_install,
    public_version,
    scan_wheel,
    torch_matches,
    torch_pin,
)
from test_cuda_fatbin_synthetic import A, container, entry


def make_wheel(path, requires=("torch==2.14.1",), files=("sgl_kernel/sm100/common_ops.abi3.so",)):
    metadata = "Metadata-Version: 2.1\nName: sglang-kernel\nVersion: 0.4.10\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires) + "\nDescription body: Requires-Dist: x\n"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sglang_kernel-0.4.10.dist-info/METADATA", metadata)
        for name in files:
            archive.writestr(name, b"\x7fELF" + b"\0" * 60 if name.endswith(".so") else b"")
    return str(path)


@pytest.mark.parametrize(("requires", "pin"), [
    (["numpy", "torch==2.14.1"], "2.14.1"),
    (["torch == 2.14.1+cu130 ; platform_machine == 'x86_64'"], "2.14.1+cu130"),
    (["torch (==2.11.0)"], "2.11.0"),
    (["torch>=2.9"], None),
    (["torch==2.9; extra == 'dev'"], None),
    (["torchvision==0.20"], None),
])
def test_torch_pin(requires, pin):
    assert torch_pin(requires)[0] == pin


@pytest.mark.parametrize(("pin", "stack", "ok"), [
    ("2.14.1", "2.14.1+cu130", True), ("2.14.1", "2.14.1", True), ("2.14.1+cu130", "2.14.1+cu128", False),
    ("2.14.1", "2.11.0", False), (None, "2.14.1", False), ("2.14.1", "", False)])
def test_torch_matches(pin, stack, ok):
    assert torch_matches(pin, stack) is ok


def test_scan_names_file_capability_and_torch_pin(tmp_path):
    # A .so that holds no device code runs nowhere; the wrong torch is the second problem.
    wheel = make_wheel(tmp_path / "k.whl", requires=["torch==2.14.1"],
                       files=["sgl_kernel/sm100/common_ops.abi3.so", "sgl_kernel/sm100/common_ops.py"])
    scan = scan_wheel(wheel, ["12.0", "9.0"], "2.11.0")
    assert not scan["fits"]
    assert scan["capabilities"]["9.0"]["variant"] is None
    text = " | ".join(scan["problems"])
    assert "capability 12.0: the loader picks sgl_kernel/sm100/common_ops.abi3.so, which has no device " \
        "code" in text
    assert "capability 9.0: the wheel has no sm90/common_ops.*" in text
    assert "built for torch==2.14.1 (Requires-Dist: torch==2.14.1) but the stack has torch 2.11.0" in text


def test_scan_refuses_a_wheel_without_an_exact_torch_pin(tmp_path):
    scan = scan_wheel(make_wheel(tmp_path / "k.whl", requires=["torch>=2"], files=[]), [], "2.14.1")
    assert scan["problems"] == ["k.whl: requires torch>=2, not an exact torch==X pin, so nothing says which "
                                "torch its .so files were built against (the stack has torch 2.14.1)"]


def test_scan_of_a_broken_wheel_fails_cleanly(tmp_path):
    (tmp_path / "bad.whl").write_bytes(b"not a zip")
    with pytest.raises(WheelError, match=r"cannot open wheel .*bad\.whl"):
        scan_wheel(str(tmp_path / "bad.whl"), ["12.0"], "2.14.1")


FITS = {"fits": True, "wheel": "k.whl", "torch_pin": "2.14.1", "problems": [],
        "capabilities": {"12.0": {"variant": "sm100"}}}
MISFIT = {"fits": False, "wheel": "k.whl", "problems": ["k.whl: capability 12.1: ..."], "capabilities": {}}


@pytest.mark.parametrize(("mode", "scan", "choice", "reason"), [
    ("auto", FITS, "wheel", "k.whl fits: torch==2.14.1, runs on 12.0 (sm100/)"),
    ("wheel", FITS, "wheel", "fits"),
    ("auto", MISFIT, "source", "does not fit, so it is built from source: k.whl: capability 12.1"),
    ("auto", None, "source", "no released wheel"),
    ("source", FITS, "source", "sgl_kernel_install is source"),
])
def test_decide_install(mode, scan, choice, reason):
    got, why = decide_install(mode, scan)
    assert got == choice
    assert reason in why


@pytest.mark.parametrize(("mode", "scan", "message"), [
    ("wheel", MISFIT, "refusing to install: k.whl: capability 12.1"),
    ("wheel", None, "no wheel was found"),
    ("always", FITS, "use one of auto, wheel, source"),
])
def test_decide_install_failures(mode, scan, message):
    with pytest.raises(WheelError, match=message):
        decide_install(mode, scan)


# Wheels with device code: the common_ops members are hand-built fatbin containers (the scanner reads
# a container by its magic whatever the file is called).
def device_code(*entries):
    return container(*(entry(kind, sm, flags) for kind, sm, flags in entries))


def make_code_wheel(path, members, requires=("torch==2.14.1",), metadata=None):
    metadata = metadata or ("Metadata-Version: 2.1\nName: sglang-kernel\nVersion: 0.4.10\n"
                            + "".join(f"Requires-Dist: {r}\n" for r in requires))
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sglang_kernel-0.4.10.dist-info/METADATA", metadata)
        for name, data in members.items():
            archive.writestr(name, data)
    return str(path)


RELEASE = {
    "sgl_kernel/sm90/common_ops.abi3.so": device_code((2, 90, A)),
    "sgl_kernel/sm100/common_ops.abi3.so": device_code((2, 100, A), (2, 120, A), (1, 120, 0)),
    "sgl_kernel/sm100/common_ops.py": b"",
    "sgl_kernel/common_ops.py": b"",
    "sgl_kernel/__pycache__/common_ops.cpython-312.pyc": b"",
    "sgl_kernel/sm90/deep/common_ops.abi3.so": b"not scanned",
    "other/common_ops.abi3.so": b"not scanned",
    "sgl_kernel/sm90/ops.abi3.so": b"not scanned",
}


def test_a_wheel_that_fits(tmp_path):
    workdir = tmp_path / "work"
    workdir.mkdir()
    scan = scan_wheel(make_code_wheel(tmp_path / "k.whl", RELEASE), ["9.0", "12.0", "12.1"], "2.14.1+cu130",
                      workdir=str(workdir))
    assert scan == {
        "wheel": "k.whl", "name": "sglang-kernel", "version": "0.4.10", "torch_pin": "2.14.1",
        "torch_requirement": "torch==2.14.1", "torch_ok": True,
        "variants": {
            "root": {"member": "sgl_kernel/common_ops.py", "sass": [], "ptx": []},
            "sm100": {"member": "sgl_kernel/sm100/common_ops.abi3.so", "sass": ["sm_100a", "sm_120a"],
                      "ptx": ["compute_120"]},
            "sm90": {"member": "sgl_kernel/sm90/common_ops.abi3.so", "sass": ["sm_90a"], "ptx": []},
        },
        "capabilities": {
            "9.0": {"variant": "sm90", "member": "sgl_kernel/sm90/common_ops.abi3.so", "runs_on": "sass"},
            "12.0": {"variant": "sm100", "member": "sgl_kernel/sm100/common_ops.abi3.so", "runs_on": "sass"},
            "12.1": {"variant": "sm100", "member": "sgl_kernel/sm100/common_ops.abi3.so",
                     "runs_on": "ptx-jit"},
        },
        "problems": [], "fits": True}
    assert list(workdir.iterdir()) == []  # the extracted members are gone


def test_code_that_runs_nowhere_names_what_to_build(tmp_path):
    scan = scan_wheel(make_code_wheel(tmp_path / "k.whl", RELEASE), ["10.3", "8.0"], "2.14.1")
    assert scan["capabilities"]["8.0"] == {
        "variant": "sm100", "member": "sgl_kernel/sm100/common_ops.abi3.so", "runs_on": False}
    assert scan["problems"] == [
        "k.whl: capability 10.3: the loader picks sgl_kernel/sm100/common_ops.abi3.so, which has sm_100a, "
        "sm_120a, compute_120, none of which runs on 10.3 (needs sm_100f, sm_103a, sm_103 or compute_103 "
        "PTX)",
        "k.whl: capability 8.0: the loader picks sgl_kernel/sm100/common_ops.abi3.so, which has sm_100a, "
        "sm_120a, compute_120, none of which runs on 8.0 (needs sm_80 or compute_80 PTX)"]
    assert scan["fits"] is False


def test_the_root_fallback_and_no_variant_at_all(tmp_path):
    wheel = make_code_wheel(tmp_path / "k.whl", {"sgl_kernel/common_ops.abi3.so": device_code((2, 90, 0))})
    scan = scan_wheel(wheel, ["9.0"], "2.14.1")
    assert scan["capabilities"]["9.0"] == {"variant": "root", "member": "sgl_kernel/common_ops.abi3.so",
                                           "runs_on": "sass"}
    assert scan["fits"] is True
    scan = scan_wheel(make_code_wheel(tmp_path / "e.whl", {}), ["12.0"], "2.14.1")
    assert scan["capabilities"]["12.0"] == {"variant": None, "member": None, "runs_on": False}
    assert scan["problems"] == ["e.whl: capability 12.0: the wheel has no sm100/common_ops.* and no "
                                "package-root common_ops.*, so the loader finds nothing to load"]


def test_a_corrupt_member_is_a_wheel_error(tmp_path):
    wheel = make_code_wheel(tmp_path / "k.whl", {"sgl_kernel/sm100/common_ops.abi3.so": b"\x7fEL"})
    with pytest.raises(WheelError) as caught:
        scan_wheel(wheel, ["12.0"], "2.14.1", workdir=str(tmp_path))
    assert str(caught.value).startswith("sgl_kernel/sm100/common_ops.abi3.so in k.whl is not a readable "
                                        "shared object (")
    assert str(caught.value).endswith("truncated ELF header (3 of 64 bytes)); download the wheel again")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k.whl"]


@pytest.mark.parametrize("names", [[], ["a.dist-info/METADATA", "b.dist-info/METADATA"]])
def test_a_wheel_needs_exactly_one_metadata_file(tmp_path, names):
    path = tmp_path / "k.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sub/c.dist-info/METADATA", "Name: nested, not the wheel's\n")
        for name in names:
            archive.writestr(name, "Name: x\n")
    with pytest.raises(WheelError) as caught:
        scan_wheel(str(path), [], "2.14.1")
    assert str(caught.value) == (f"k.whl has {len(names)} .dist-info/METADATA files (expected 1); it is not "
                                 "a wheel, or a broken one: download it again")


def test_metadata_headers_only(tmp_path):
    metadata = ("Metadata-Version: 2.1\nName:  sglang-kernel \nno colon here\nVersion: 0.3.21\n"
                "Summary: Requires-Dist: torch==1.0\nRequires-Dist:  torch==2.9.1 \n\n"
                "Requires-Dist: torch==9.9\nName: body\n")
    scan = scan_wheel(make_code_wheel(tmp_path / "k.whl", {}, metadata=metadata), [], "2.9.1")
    assert (scan["name"], scan["version"], scan["torch_pin"], scan["torch_requirement"]) == (
        "sglang-kernel", "0.3.21", "2.9.1", "torch==2.9.1")
    assert scan["torch_ok"] is True


def test_a_wheel_without_torch_at_all(tmp_path):
    scan = scan_wheel(make_code_wheel(tmp_path / "k.whl", {}, requires=["numpy"]), [], "2.9.1")
    assert scan["problems"] == ["k.whl: requires no torch at all, not an exact torch==X pin, so nothing says "
                                "which torch its .so files were built against (the stack has torch 2.9.1)"]


@pytest.mark.parametrize(("requires", "expected"), [
    (["torch[opt-einsum]===2.9.1"], ("2.9.1", "torch[opt-einsum]===2.9.1")),
    (["TORCH==2.9.1"], ("2.9.1", "TORCH==2.9.1")),
    (["torch==2.9; extra == 'dev'", "torch==2.9.1"], ("2.9.1", "torch==2.9.1")),
    (["torch==2.9.*"], ("2.9.*", "torch==2.9.*")),
    (["torch==2.9.1,<3"], (None, "torch==2.9.1,<3")),
    (["torch"], (None, "torch")),
    (["numpy"], (None, None)),
    ([], (None, None)),
    # other projects whose names start with "torch" (they used to be taken for torch, hiding its pin)
    (["torchvision==0.24.1", "torch==2.9.1"], ("2.9.1", "torch==2.9.1")),
    (["torch-c-dlpack-ext==0.1", "torch_tensorrt", "torch.x==1", "torch==2.9.1"], ("2.9.1", "torch==2.9.1")),
    (["torchao>=0.9"], (None, None)),
    (["torch[cuda]==2.9.1"], ("2.9.1", "torch[cuda]==2.9.1")),
    (["torch(==2.9.1)"], ("2.9.1", "torch(==2.9.1)")),
    (["torch;python_version>'3'"], (None, "torch;python_version>'3'")),
])
def test_torch_pin_and_the_requirement_it_came_from(requires, expected):
    assert torch_pin(requires) == expected


@pytest.mark.parametrize(("version", "public"), [("2.14.1+cu130", "2.14.1"), (" 2.9.1 ", "2.9.1"),
                                                  ("1+a+b", "1")])
def test_public_version(version, public):
    assert public_version(version) == public


def test_decide_install_reasons_in_full():
    assert decide_install("wheel", dict(FITS, capabilities={})) == (
        "wheel", "k.whl fits: torch==2.14.1, runs on no target")
    assert decide_install("auto", dict(FITS, capabilities={"9.0": {"variant": "sm90"},
                                                           "12.0": {"variant": "sm100"}})) == (
        "wheel", "k.whl fits: torch==2.14.1, runs on 9.0 (sm90/), 12.0 (sm100/)")
    assert decide_install("auto", dict(MISFIT, problems=["a", "b"])) == (
        "source", "the wheel does not fit, so it is built from source: a; b")
    assert decide_install("auto", None) == (
        "source", "no released wheel was found, so it is built from source")
    assert decide_install("source", None) == ("source", "sgl_kernel_install is source")


def test_decide_install_errors_in_full():
    with pytest.raises(WheelError) as caught:
        decide_install("wheel", dict(MISFIT, problems=["a", "b"]))
    assert str(caught.value) == ("refusing to install: a; b. Set sgl_kernel_install=auto or source to build "
                                 "it for these targets and this torch")
    with pytest.raises(WheelError) as caught:
        decide_install("wheel", None)
    assert str(caught.value) == ("sgl_kernel_install is wheel but no wheel was found to scan; check the "
                                 "index or wheelhouse, or set sgl_kernel_install=auto or source")
    with pytest.raises(WheelError) as caught:
        decide_install("Auto", FITS)
    assert str(caught.value) == "sgl_kernel_install is 'Auto'; use one of auto, wheel, source"


@pytest.mark.parametrize("member", ["sgl_kernel/sm100/common_ops.pyd", "sgl_kernel/sm100/common_ops.dll",
                                    "sgl_kernel/sm100/common_ops.so.1"])
def test_every_kind_of_compiled_member_is_scanned(tmp_path, member):
    wheel = make_code_wheel(tmp_path / "k.whl", {member: device_code((2, 120, A))})
    assert scan_wheel(wheel, [], "2.14.1")["variants"]["sm100"]["sass"] == ["sm_120a"]


def test_a_python_member_is_not_scanned(tmp_path):
    wheel = make_code_wheel(tmp_path / "k.whl", {"sgl_kernel/common_ops.py": device_code((2, 120, A))})
    assert scan_wheel(wheel, [], "2.14.1")["variants"]["root"] == {
        "member": "sgl_kernel/common_ops.py", "sass": [], "ptx": []}


def test_members_are_extracted_into_a_scratch_dir_of_the_workdir(tmp_path, monkeypatch):
    scanned = []
    real_scan_file = sgl_kernel_wheel.scan_file
    monkeypatch.setattr(sgl_kernel_wheel, "scan_file",
                        lambda path: scanned.append(path) or real_scan_file(path))
    workdir = tmp_path / "work"
    workdir.mkdir()
    scan_wheel(make_code_wheel(tmp_path / "k.whl", RELEASE), [], "2.14.1", workdir=str(workdir))
    assert [os.path.basename(p) for p in scanned] == ["sgl_kernel_sm100_common_ops.abi3.so",
                                                      "sgl_kernel_sm90_common_ops.abi3.so"]
    scratch = {os.path.dirname(p) for p in scanned}
    assert len(scratch) == 1
    assert os.path.dirname(scratch.pop()) == str(workdir)
    assert os.path.basename(os.path.dirname(scanned[0])).startswith("sgl-kernel-scan-")


def test_a_torch_mismatch_in_full(tmp_path):
    scan = scan_wheel(make_code_wheel(tmp_path / "k.whl", {}), [], "2.11.0")
    assert scan["problems"] == [
        "k.whl: built for torch==2.14.1 (Requires-Dist: torch==2.14.1) but the stack has torch 2.11.0; its "
        ".so files are ABI-tied to the exact torch and would fail to import with 'undefined symbol'"]


def test_an_exact_local_pin_matches_only_itself():
    assert torch_matches("2.14.1+cu130", "2.14.1+cu130") is True
    assert torch_pin(["torch==2.9.1+XX"]) == ("2.9.1+XX", "torch==2.9.1+XX")


def test_metadata_body_paragraphs_and_colons(tmp_path):
    metadata = ("Metadata-Version: 2.1\nName: sglang-kernel\nVersion: 0.3.21\nSummary: caf\xe9\n"
                "Requires-Dist: torch==2.9.1; platform_release != '5:x'\n\n"
                "Body.\n\nRequires-Dist: torch==9.9\n")
    path = tmp_path / "k.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("sglang_kernel-0.3.21.dist-info/METADATA", metadata.encode("latin-1"))
    scan = scan_wheel(str(path), [], "2.9.1")
    assert (scan["name"], scan["version"], scan["torch_pin"]) == ("sglang-kernel", "0.3.21", "2.9.1")
    assert scan["torch_requirement"] == "torch==2.9.1; platform_release != '5:x'"


def test_metadata_headers_end_at_the_first_blank_line(tmp_path):
    # The body may hold several paragraphs; header-like lines in any of them are description text.
    metadata = ("Metadata-Version: 2.1\nName: sglang-kernel\nVersion: 0.4.10\nRequires-Dist: numpy\n\n"
                "Name: body\nRequires-Dist: torch==9.9\n\nThe end.\n")
    scan = scan_wheel(make_code_wheel(tmp_path / "k.whl", {}, metadata=metadata), [], "9.9")
    assert (scan["name"], scan["version"], scan["torch_pin"], scan["torch_requirement"]) == (
        "sglang-kernel", "0.4.10", None, None)
    assert scan["fits"] is False


def damage(path, member, how):
    """Spoil ``member`` inside the wheel at ``path`` the way a bad download or disk does."""
    with open(path, "rb") as handle:
        data = bytearray(handle.read())
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo(member)
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    if how == "flip-last":  # the stored CRC no longer matches
        data[start + info.compress_size - 3] ^= 0x55
    elif how == "flip-first":  # an invalid deflate stream
        data[start + 10] ^= 0x55
    else:  # "size": the central directory says the member runs on past the end of the file
        record = data.rindex(info.filename.encode()) - 46  # its central directory record
        assert data[record:record + 4] == b"PK\x01\x02"
        for field in (record + 20, record + 24):  # compressed and uncompressed size
            data[field:field + 4] = (info.file_size + (1 << 20)).to_bytes(4, "little")
    with open(path, "wb") as handle:
        handle.write(data)


@pytest.mark.parametrize(("member", "compression", "how", "detail"), [
    ("sglang_kernel-0.4.10.dist-info/METADATA", zipfile.ZIP_STORED, "flip-last",
     "Bad CRC-32 for file 'sglang_kernel-0.4.10.dist-info/METADATA'"),
    ("sgl_kernel/sm100/common_ops.abi3.so", zipfile.ZIP_STORED, "flip-last",
     "Bad CRC-32 for file 'sgl_kernel/sm100/common_ops.abi3.so'"),
    ("sgl_kernel/sm100/common_ops.abi3.so", zipfile.ZIP_DEFLATED, "flip-first",
     "Error -3 while decompressing data: "),
    ("sgl_kernel/sm100/common_ops.abi3.so", zipfile.ZIP_STORED, "size", "EOFError;"),
], ids=["metadata-crc", "so-crc", "so-deflate", "so-size"])
def test_a_damaged_member_is_a_wheel_error(tmp_path, member, compression, how, detail):
    path = tmp_path / "k.whl"
    metadata = "Metadata-Version: 2.1\nName: sglang-kernel\nVersion: 0.4.10\nRequires-Dist: torch==2.14.1\n"
    with zipfile.ZipFile(path, "w", compression) as archive:
        archive.writestr("sglang_kernel-0.4.10.dist-info/METADATA", metadata * 40)
        archive.writestr("sgl_kernel/sm100/common_ops.abi3.so", device_code((2, 120, A)) + bytes(4096))
    damage(path, member, how)
    work = tmp_path / "work"
    work.mkdir()
    with pytest.raises(WheelError) as caught:
        scan_wheel(str(path), ["12.0"], "2.14.1", workdir=str(work))
    message = str(caught.value)
    assert message.startswith(f"cannot read wheel {path}: {detail}")
    assert message.endswith("; it is corrupt: download it again")
    assert list(work.iterdir()) == []  # the partly extracted member is gone with the scratch dir


def test_a_scratch_dir_removed_under_the_scan_does_not_fail_it(tmp_path, monkeypatch):
    # e.g. a tmp cleaner: the scan has its answer, losing the scratch dir early does not take it away
    work = tmp_path / "work"
    work.mkdir()
    real_wheel_metadata = sgl_kernel_wheel.wheel_metadata

    def wheel_metadata_then_clean(archive, name):
        for scratch in work.iterdir():
            scratch.rmdir()
        return real_wheel_metadata(archive, name)

    monkeypatch.setattr(sgl_kernel_wheel, "wheel_metadata", wheel_metadata_then_clean)
    wheel = make_code_wheel(tmp_path / "k.whl", {"sgl_kernel/common_ops.py": b""})
    scan = scan_wheel(wheel, ["12.0"], "2.14.1", workdir=str(work))
    assert scan["capabilities"]["12.0"] == {"variant": "root", "member": "sgl_kernel/common_ops.py",
                                            "runs_on": False}
    assert list(work.iterdir()) == []
