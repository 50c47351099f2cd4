"""prepare_source on the sglang-kernel-shaped test package (tests/kernel_pkg), in both source layouts:
narrowing, variant dropping, mirror rewrite, torch repin, idempotence. No compiler runs here."""

import pytest
from ansible.module_utils.sgl_kernel_build import BuildPlanError
from ansible.module_utils.sgl_kernel_source import cmake_gencodes, prepare_source
from kernelpkg import make_source

MIRROR = "http://192.168.7.1:8000/gh"


@pytest.mark.parametrize("layout", ["old", "new"])
def test_narrow_to_12_0(tmp_path, layout):
    package = make_source(tmp_path, layout)
    plan = prepare_source(str(package), ["12.0"], "13.0", "2.15.0+cu130", "c0ffee", mirror_url=MIRROR)
    assert plan["changed"] is True
    assert plan["gencodes"] == ["-gencode=arch=compute_120a,code=sm_120a"]
    assert len(plan["gencodes_default"]) == 7  # as written: sm_100f and sm_100a are either-or by CUDA version
    assert plan["variants"] == ["sm100"]
    assert plan["dropped_targets"] == ["common_ops_sm90_build"]
    assert plan["cmake_defines"] == {"SGL_KERNEL_ENABLE_FA3": "OFF", "ENABLE_BELOW_SM90": "OFF"}
    cmake = (package / "CMakeLists.txt").read_text()
    assert "# sgl_kernel narrowed: install(TARGETS common_ops_sm90_build" in cmake
    assert f"URL      {MIRROR}/fleet-test/tinydep/archive/v1.tar.gz" in cmake
    assert '"torch==2.15.0"' in (package / "pyproject.toml").read_text()
    assert "2.14.1" not in (package / "pyproject.toml").read_text()
    again = prepare_source(str(package), ["12.0"], "13.0", "2.15.0+cu130", "c0ffee", mirror_url=MIRROR)
    assert again["changed"] is False
    assert again["fingerprint"] == plan["fingerprint"]
    assert cmake_gencodes((package / "CMakeLists.txt").read_text()) == plan["gencodes"]


def test_hopper_and_gb10(tmp_path):
    package = make_source(tmp_path, "new")
    plan = prepare_source(str(package), ["12.1", "9.0"], "13.0", "2.14.1", "c0ffee", mirror_url=MIRROR)
    assert plan["variants"] == ["sm100", "sm90"]
    assert plan["dropped_targets"] == []
    # 12.1 gets sm_120f added after sm_90 (in the first flag list); sm_90a stays in the FA3 branch
    assert plan["gencodes"] == ["-gencode=arch=compute_90,code=sm_90",
                                "-gencode=arch=compute_120f,code=sm_120f",
                                "-gencode=arch=compute_90a,code=sm_90a"]
    assert plan["cmake_defines"]["SGL_KERNEL_ENABLE_FA3"] == "ON"


def test_check_mode_writes_nothing_and_no_narrowing_keeps_defaults(tmp_path):
    package = make_source(tmp_path, "old")
    before = (package / "CMakeLists.txt").read_text()
    plan = prepare_source(str(package), ["12.0"], "13.0", "2.14.1", "c0ffee", narrow=False, mirror_url=MIRROR,
                          check_mode=True)
    assert plan["changed"] is True
    assert (package / "CMakeLists.txt").read_text() == before
    assert plan["variants"] == ["sm100", "sm90"]
    assert len(plan["gencodes"]) == 7


def test_offline_is_required(tmp_path):
    package = make_source(tmp_path, "new")
    with pytest.raises(BuildPlanError, match="repo-tinydep would be downloaded from the internet"):
        prepare_source(str(package), ["12.0"], "13.0", "2.14.1", "c0ffee")
    plan = prepare_source(str(package), ["12.0"], "13.0", "2.14.1", "c0ffee",
                          prefetched={"repo-tinydep": "/srv/tinydep"})
    assert plan["cmake_defines"]["FETCHCONTENT_SOURCE_DIR_REPO-TINYDEP"] == "/srv/tinydep"


def test_not_a_source_dir(tmp_path):
    with pytest.raises(BuildPlanError, match="is not an sglang-kernel source directory"):
        prepare_source(str(tmp_path), ["12.0"], "13.0", "2.14.1", "c0ffee")


FLASHMLA = """set(FLASHMLA_CUDA_FLAGS
    "--use_fast_math"
)
if(${CUDA_VERSION} VERSION_GREATER 12.4)
    list(APPEND FLASHMLA_CUDA_FLAGS
        "-gencode=arch=compute_90a,code=sm_90a"
    )
endif()
if(${CUDA_VERSION} VERSION_GREATER 12.8)
    list(APPEND FLASHMLA_CUDA_FLAGS
        "-gencode=arch=compute_100f,code=sm_100f"
    )
endif()
add_library(flashmla_ops MODULE a.cu)
target_compile_options(flashmla_ops PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>
    $<$<COMPILE_LANGUAGE:CUDA>:${FLASHMLA_CUDA_FLAGS}>
)
install(TARGETS flashmla_ops LIBRARY DESTINATION "sgl_kernel")
"""


@pytest.mark.parametrize(("capabilities", "dropped", "flashmla_gencodes"), [
    (["12.0"], ["common_ops_sm90_build", "flashmla_ops"], []),  # FlashMLA has no code for 12.0: not built
    (["9.0"], ["common_ops_sm100_build"], ["-gencode=arch=compute_90a,code=sm_90a"]),
])
def test_a_library_left_without_gencodes_is_not_built(tmp_path, capabilities, dropped, flashmla_gencodes):
    package = make_source(tmp_path, "new")
    (package / "cmake").mkdir()
    (package / "cmake" / "flashmla.cmake").write_text(FLASHMLA)
    plan = prepare_source(str(package), capabilities, "13.0", "2.14.1", "c0ffee", mirror_url=MIRROR)
    assert plan["dropped_targets"] == dropped
    text = (package / "cmake" / "flashmla.cmake").read_text()
    assert cmake_gencodes(text) == flashmla_gencodes
    assert ("# sgl_kernel narrowed: install(TARGETS flashmla_ops" in text) is ("flashmla_ops" in dropped)
