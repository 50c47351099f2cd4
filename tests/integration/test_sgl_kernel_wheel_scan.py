"""The pre-install scan on the released sglang-kernel 0.4.10 wheel (downloaded once by tests/sglkernel.py):
it fits 12.0, 10.0 and 9.0 with torch 2.14.1, and is refused for 12.1 (GB10) and for another torch."""

import time

import pytest
import sglkernel
from ansible.module_utils.sgl_kernel_wheel import WheelError, decide_install, scan_wheel

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def wheel():
    return str(sglkernel.wheel())


@pytest.mark.parametrize(("capability", "variant"), [("12.0", "sm100"), ("10.0", "sm100"), ("9.0", "sm90")])
def test_released_wheel_fits(wheel, capability, variant):
    started = time.monotonic()
    scan = scan_wheel(wheel, [capability], "2.14.1+cu130")
    assert scan["fits"], scan["problems"]
    assert scan["capabilities"][capability] == {
        "variant": variant, "member": f"sgl_kernel/{variant}/common_ops.abi3.so", "runs_on": "sass"}
    assert decide_install("wheel", scan)[0] == "wheel"
    assert time.monotonic() - started < 30


def test_released_wheel_is_refused_for_12_1(wheel):
    scan = scan_wheel(wheel, ["12.0", "12.1"], "2.14.1")
    assert scan["problems"] == [
        f"{scan['wheel']}: capability 12.1: the loader picks sgl_kernel/sm100/common_ops.abi3.so, which has "
        "sm_80, sm_89, sm_90, sm_90a, sm_100f, sm_120a, none of which runs on 12.1 (needs sm_120f, sm_121a, "
        "sm_121 or compute_121 PTX)"]
    with pytest.raises(WheelError, match=r"refusing to install: .*capability 12\.1"):
        decide_install("wheel", scan)
    assert decide_install("auto", scan)[0] == "source"


def test_released_wheel_is_refused_for_another_torch(wheel):
    scan = scan_wheel(wheel, ["9.0"], "2.11.0")
    assert scan["torch_pin"] == "2.14.1"
    assert "built for torch==2.14.1 (Requires-Dist: torch==2.14.1) but the stack has torch 2.11.0" in \
        scan["problems"][0]
    assert decide_install("auto", scan)[0] == "source"
