"""The profile's sgl_kernel.build keys in the build plan: enable_fa3, enable_below_sm90 and
extra_cmake_args, each changed on its own, and what changes in the plan (defines, gencodes left in the
CMake files, fingerprint); cmake_args_defines and below_sm90 in detail."""

import pytest
from ansible.module_utils.sgl_kernel_build import (
    PLANNED_DEFINES,
    BuildPlanError,
    below_sm90,
    cmake_args_defines,
)
from ansible.module_utils.sgl_kernel_source import PRISTINE_SUFFIX, prepare_source
from kernelpkg import make_source

MIRROR = "http://192.168.7.1:8000/gh"
KEY = "sgl_kernel.build.extra_cmake_args"
SM80 = "-gencode=arch=compute_80,code=sm_80"
SM89 = "-gencode=arch=compute_89,code=sm_89"
SM90 = "-gencode=arch=compute_90,code=sm_90"
SM100F = "-gencode=arch=compute_100f,code=sm_100f"
SM120A = "-gencode=arch=compute_120a,code=sm_120a"


# below_sm90 -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("flag", "below"), [
    (SM80, True), (SM89, True), ("-gencode=arch=compute_87,code=sm_87", True),
    ("-gencode arch=compute_80,code=compute_80", True),  # PTX of an old arch too
    # the virtual arch decides (__CUDA_ARCH__ of the compile), and a code list is fine
    ("-gencode=arch=compute_80,code=sm_90", True),
    ("-gencode=arch=compute_90,code=[sm_90,compute_90]", False),
    (SM90, False), ("-gencode=arch=compute_90a,code=sm_90a", False), (SM100F, False), (SM120A, False),
    ("-O3", False), ("--threads=4", False),
])
def test_below_sm90(flag, below):
    assert below_sm90(flag) is below


# cmake_args_defines -----------------------------------------------------------------------------------

def test_defines_in_order_with_any_value():
    args = ["-DB=1", "-DA=x=y", "-DEMPTY=", "-Dlower.name+-=ON", "-D_X=a b"]
    assert list(cmake_args_defines(args).items()) == [
        ("B", "1"), ("A", "x=y"), ("EMPTY", ""), ("lower.name+-", "ON"), ("_X", "a b")]
    assert cmake_args_defines([]) == {}
    assert cmake_args_defines(()) == {}


def error(args, key=KEY):
    with pytest.raises(BuildPlanError) as caught:
        cmake_args_defines(args, key)
    return str(caught.value)


@pytest.mark.parametrize("arg", ["-G Ninja", "--log-level=DEBUG", "-UFOO", "FOO=1", "", "-DA=1\nB", 7, None])
def test_what_is_no_cache_setting(arg):
    assert error(["-DOK=1", arg]) == (
        f"{KEY}: {arg!r} is not a CMake cache setting; write each as one string -DNAME=VALUE (other CMake "
        "options cannot be passed: scikit-build-core chooses the generator and the directories)")


@pytest.mark.parametrize("arg", ["-DFOO", "-D FOO=1", "-D=1", "-D1FOO=1", "-DFO O=1", "-DFOO\n=1", "-D"])
def test_what_is_no_name_then_value(arg):
    assert error([arg]) == (f"{KEY}: {arg!r} is not -DNAME=VALUE (one string, no space after -D, a name of "
                            "letters, digits and _ . + -, then =)")


def test_a_type_is_refused_with_the_form_to_write():
    assert error(["-DFOO:BOOL=ON"]) == (f"{KEY}: '-DFOO:BOOL=ON' gives a type; write -DFOO=ON "
                                        "(scikit-build-core sets the type of each setting)")
    assert error(["-DFOO:=x"]) == (f"{KEY}: '-DFOO:=x' gives a type; write -DFOO=x "
                                   "(scikit-build-core sets the type of each setting)")


@pytest.mark.parametrize("name", sorted(PLANNED_DEFINES))
def test_a_name_the_plan_sets_names_its_own_setting(name):
    assert error([f"-D{name}=ON"], "p.yml extra") == (
        f"p.yml extra: '-D{name}=ON' sets {name}, which the build plan sets from {PLANNED_DEFINES[name]}; "
        "set it there")


def test_the_names_the_plan_sets():
    assert PLANNED_DEFINES == {
        "SGL_KERNEL_ENABLE_FA3": "sgl_kernel.build.enable_fa3",
        "ENABLE_BELOW_SM90": "sgl_kernel.build.enable_below_sm90",
        "SGL_KERNEL_COMPILE_THREADS": "the sgl_kernel_compile_threads role variable",
        "CMAKE_C_COMPILER_LAUNCHER": "the sgl_kernel_compiler_cache role variable",
        "CMAKE_CXX_COMPILER_LAUNCHER": "the sgl_kernel_compiler_cache role variable",
        "CMAKE_CUDA_COMPILER_LAUNCHER": "the sgl_kernel_compiler_cache role variable",
    }


def test_a_prefetched_source_dir_is_the_role_variables():
    assert error(["-DFETCHCONTENT_SOURCE_DIR_REPO-CUTLASS=/x"]) == (
        f"{KEY}: '-DFETCHCONTENT_SOURCE_DIR_REPO-CUTLASS=/x' sets FETCHCONTENT_SOURCE_DIR_REPO-CUTLASS, "
        "which the build plan sets from the sgl_kernel_prefetched_sources role variable; set it there")
    # only the prefix: other FETCHCONTENT settings are the user's
    assert cmake_args_defines(["-DFETCHCONTENT_QUIET=OFF", "-DXFETCHCONTENT_SOURCE_DIR_A=1"]) == {
        "FETCHCONTENT_QUIET": "OFF", "XFETCHCONTENT_SOURCE_DIR_A": "1"}


def test_a_name_given_twice():
    assert error(["-DA=1", "-DB=2", "-DA=3"]) == f"{KEY}: A is given twice ('1' and '3'); keep one"
    assert error(["-DA=1", "-DA=1"]) == f"{KEY}: A is given twice ('1' and '1'); keep one"


def test_the_default_key_is_the_profiles():
    with pytest.raises(BuildPlanError, match=r"^sgl_kernel\.build\.extra_cmake_args: 'x' "):
        cmake_args_defines(["x"])


# prepare_source: each key changed ----------------------------------------------------------------------

def prepare(tmp_path, capabilities=("12.0",), name="a", **kwargs):
    package = make_source(tmp_path / name, "new")
    return package, prepare_source(str(package), list(capabilities), "13.0", "2.14.1", "c0ffee",
                                   mirror_url=MIRROR, **kwargs)


def flags(plan):
    return plan["fingerprint_inputs"]["flags"]


@pytest.mark.parametrize(("capabilities", "narrow"), [(["9.0"], True), (["12.0"], False)])
def test_enable_fa3_changes_the_define_and_the_fingerprint(tmp_path, capabilities, narrow):
    _p, on = prepare(tmp_path, capabilities, "on", narrow=narrow, enable_fa3="auto")
    _p, off = prepare(tmp_path, capabilities, "off", narrow=narrow, enable_fa3=False)
    assert on["cmake_defines"]["SGL_KERNEL_ENABLE_FA3"] == "ON"
    assert off["cmake_defines"]["SGL_KERNEL_ENABLE_FA3"] == "OFF"
    assert on["fingerprint"] != off["fingerprint"]
    assert [f for f in flags(on) if f not in flags(off)] == ["SGL_KERNEL_ENABLE_FA3=ON"]


def test_enable_below_sm90_false_without_narrowing_removes_the_old_gencodes(tmp_path):
    package, kept = prepare(tmp_path, narrow=False, enable_below_sm90=True)
    assert kept["cmake_defines"]["ENABLE_BELOW_SM90"] == "ON"
    assert kept["gencodes"] == kept["gencodes_default"] == [
        SM90, SM80, SM89, SM100F, "-gencode=arch=compute_100a,code=sm_100a", SM120A,
        "-gencode=arch=compute_90a,code=sm_90a"]
    assert kept["changed"] is True  # the torch pin only
    assert "# sgl_kernel narrowed" not in (package / "CMakeLists.txt").read_text()
    package, dropped = prepare(tmp_path, name="b", narrow=False, enable_below_sm90=False)
    assert dropped["cmake_defines"]["ENABLE_BELOW_SM90"] == "OFF"
    assert dropped["gencodes"] == [g for g in kept["gencodes"] if g not in (SM80, SM89)]
    assert dropped["gencodes_default"] == kept["gencodes_default"]
    text = (package / "CMakeLists.txt").read_text()
    assert f'# sgl_kernel narrowed: "{SM80}"' in text
    assert f'# sgl_kernel narrowed: "{SM89}"' in text
    assert dropped["variants"] == ["sm100", "sm90"]
    assert dropped["dropped_targets"] == []
    assert dropped["fingerprint"] != kept["fingerprint"]
    assert dropped["fingerprint_inputs"]["gencodes"] == sorted(dropped["gencodes"])
    assert flags(dropped) == ["ENABLE_BELOW_SM90=OFF", "SGL_KERNEL_ENABLE_FA3=ON"]
    assert flags(kept) == ["ENABLE_BELOW_SM90=ON", "SGL_KERNEL_ENABLE_FA3=ON"]


def add_cmake_file(package, text):
    (package / "cmake").mkdir()
    (package / "cmake" / "extra.cmake").write_text(text)
    return package / "cmake" / "extra.cmake"


def test_enable_below_sm90_false_reaches_the_other_cmake_files_and_drops_a_library_left_without_code(
        tmp_path):
    text = (f'set(MIXED_FLAGS\n  "{SM80}"\n  "-gencode=arch=compute_103a,code=sm_103a"\n)\n'
            f'set(OLD_FLAGS\n  "{SM80}"\n)\n'
            "target_compile_options(old_ops PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${OLD_FLAGS}>)\n"
            "install(TARGETS old_ops LIBRARY DESTINATION sgl_kernel)\n")
    package = make_source(tmp_path / "a", "new")
    extra = add_cmake_file(package, text)
    plan = prepare_source(str(package), ["12.0"], "13.0", "2.14.1", "c0ffee", mirror_url=MIRROR,
                          narrow=False, enable_below_sm90=False)
    assert extra.read_text() == (
        f'set(MIXED_FLAGS\n  # sgl_kernel narrowed: "{SM80}"\n'
        '  "-gencode=arch=compute_103a,code=sm_103a"\n)\n'
        f'set(OLD_FLAGS\n  # sgl_kernel narrowed: "{SM80}"\n)\n'
        "target_compile_options(old_ops PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${OLD_FLAGS}>)\n"
        "# sgl_kernel narrowed: install(TARGETS old_ops LIBRARY DESTINATION sgl_kernel)\n"
        "set_target_properties(old_ops PROPERTIES EXCLUDE_FROM_ALL ON)  # sgl_kernel narrowed\n")
    assert plan["dropped_targets"] == ["old_ops"]
    # true leaves that file as it is
    package = make_source(tmp_path / "b", "new")
    extra = add_cmake_file(package, text)
    plan = prepare_source(str(package), ["12.0"], "13.0", "2.14.1", "c0ffee", mirror_url=MIRROR,
                          narrow=False, enable_below_sm90=True)
    assert extra.read_text() == text
    assert plan["dropped_targets"] == []


def test_enable_below_sm90_when_narrowing_follows_the_targets(tmp_path):
    _p, old = prepare(tmp_path, ["8.9", "12.0"], "old")
    assert old["cmake_defines"]["ENABLE_BELOW_SM90"] == "ON"
    assert SM89 in old["gencodes"]
    # new targets only: the old gencodes are left out either way, the plan is the same
    _p, new_true = prepare(tmp_path, ["9.0", "12.0"], "t", enable_below_sm90=True)
    _p, new_false = prepare(tmp_path, ["9.0", "12.0"], "f", enable_below_sm90=False)
    assert new_true["cmake_defines"]["ENABLE_BELOW_SM90"] == "OFF"
    assert new_true["fingerprint"] == new_false["fingerprint"]
    assert not any(below_sm90(g) for g in new_false["gencodes"])


@pytest.mark.parametrize("narrow", [True, False])
def test_enable_below_sm90_false_refuses_older_targets_before_touching_the_source(tmp_path, narrow):
    package = make_source(tmp_path, "new")
    with pytest.raises(BuildPlanError) as caught:
        prepare_source(str(package), ["12.0", "8.0", "8.9", "9.0"], "13.0", "2.14.1", "c0ffee",
                       mirror_url=MIRROR, narrow=narrow, enable_below_sm90=False)
    assert str(caught.value) == (
        "target capabilities 8.0, 8.9 are older than 9.0, but the profile's "
        "sgl_kernel.build.enable_below_sm90 is false, so the kernel would hold no code for them: set it to "
        "true, or leave those hosts out of the play")
    assert not (package / ("CMakeLists.txt" + PRISTINE_SUFFIX)).exists()


def test_extra_cmake_args_become_defines_and_change_the_fingerprint(tmp_path):
    _p, none = prepare(tmp_path, name="none")
    _p, some = prepare(tmp_path, name="some", extra_cmake_args=["-DSGL_KERNEL_ENABLE_FP4=ON", "-DZ=a=b"])
    assert some["cmake_defines"] == {**none["cmake_defines"], "SGL_KERNEL_ENABLE_FP4": "ON", "Z": "a=b"}
    assert [f for f in flags(some) if f not in flags(none)] == ["SGL_KERNEL_ENABLE_FP4=ON", "Z=a=b"]
    assert some["fingerprint"] != none["fingerprint"]
    assert some["gencodes"] == none["gencodes"]


def test_the_roles_defines_come_after_the_profiles_args(tmp_path):
    _p, plan = prepare(tmp_path, extra_cmake_args=["-DA=profile", "-DB=profile"],
                       extra_cmake_defines={"A": "role"})
    assert plan["cmake_defines"]["A"] == "role"
    assert plan["cmake_defines"]["B"] == "profile"


def test_bad_extra_cmake_args_fail_before_touching_the_source(tmp_path):
    package = make_source(tmp_path, "new")
    with pytest.raises(BuildPlanError, match=r"^sgl_kernel\.build\.extra_cmake_args: '-G Ninja' is not"):
        prepare_source(str(package), ["12.0"], "13.0", "2.14.1", "c0ffee", mirror_url=MIRROR,
                       extra_cmake_args=["-G Ninja"])
    assert not (package / ("CMakeLists.txt" + PRISTINE_SUFFIX)).exists()
