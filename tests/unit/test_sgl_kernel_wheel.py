"""module_utils/sgl_kernel_wheel.py on wheels made here (no device code in them); the released
sglang-kernel 0.4.10 wheel is scanned in tests/integration/test_sgl_kernel_wheel_scan.py."""

import zipfile

import pytest
from ansible.module_utils.sgl_kernel_wheel import (
    WheelError,
    decide_install,
    scan_wheel,
    torch_matches,
    torch_pin,
)


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
