"""module_utils/sgl_kernel_source.py in detail: the CMake rewrites on small texts, and prepare_source's
defines, errors, pristine copies and check mode on the test package (test_sgl_kernel_source.py has the
main cases in both source layouts)."""

import os

import pytest
from ansible.module_utils.sgl_kernel_build import BuildPlanError
from ansible.module_utils.sgl_kernel_source import (
    PRISTINE_SUFFIX,
    cmake_gencodes,
    drop_targets,
    drop_variant_targets,
    fetchcontent_dependencies,
    gencodes_by_variable,
    narrow_cmake_gencodes,
    offline_cmake_defines,
    prepare_source,
    repin_torch,
    resolve_url,
    rewrite_fetchcontent_urls,
    targets_using,
)
from kernelpkg import make_source

MIRROR = "http://192.168.7.1:8000/gh"
SM90 = "-gencode=arch=compute_90,code=sm_90"
SM90A = "-gencode=arch=compute_90a,code=sm_90a"
SM120A = "-gencode=arch=compute_120a,code=sm_120a"


def test_cmake_gencodes_skips_comments_and_duplicates():
    text = f'set(F\n  "{SM90}" # "{SM120A}"\n  # "{SM90A}"\n  "{SM90}"\n)\nlist(APPEND F "{SM90A}")\n'
    assert cmake_gencodes(text) == [SM90, SM90A]


def test_narrow_keeps_comments_and_other_lines_and_adds_extras_after_the_first_kept_line():
    text = (f'set(FLAGS\n    "-O3"\n    "{SM90}"\n    "{SM120A}"\n)\n'
            f'# "{SM90}" in a comment\n'
            f'list(APPEND FLAGS "{SM90}" "{SM120A}")\n'
            f'set(OTHER\n  "{SM90A}"\n)\n')
    new, removed = narrow_cmake_gencodes(text, [SM120A], ["-gencode=arch=compute_120f,code=sm_120f"])
    assert removed == [SM90, SM90, SM90A]
    assert new == (f'set(FLAGS\n    "-O3"\n    # sgl_kernel narrowed: "{SM90}"\n'
                   '    "-gencode=arch=compute_120f,code=sm_120f"\n'
                   f'    "{SM120A}"\n)\n'
                   f'# "{SM90}" in a comment\n'
                   f'list(APPEND FLAGS  "{SM120A}")\n'
                   f'set(OTHER\n  # sgl_kernel narrowed: "{SM90A}"\n'
                   '  "-gencode=arch=compute_120f,code=sm_120f"\n)\n')


def test_narrow_does_not_add_an_extra_the_line_already_has():
    text = f'set(F\n  "{SM120A}"\n)\n'
    assert narrow_cmake_gencodes(text, [SM120A], [SM120A]) == (text, [])


def test_gencodes_by_variable_and_targets_using():
    text = (f'set(A_FLAGS "{SM90}")\nlist(APPEND A_FLAGS\n  "{SM90A}" # "{SM120A}"\n)\n'
            f'set(B_FLAGS "-O3")\n# set(C_FLAGS "{SM120A}")\n'
            'target_compile_options(lib-a PRIVATE ${A_FLAGS})\n'
            'target_compile_options(lib_b PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${A_FLAGS}>)\n'
            'target_compile_options(lib_c PRIVATE ${A_FLAGS_X})\n')
    assert gencodes_by_variable(text) == {"A_FLAGS": [SM90, SM90A]}
    assert targets_using(text, "A_FLAGS") == ["lib-a", "lib_b"]
    assert targets_using(text, "B_FLAGS") == []


def test_drop_targets():
    text = ("install(TARGETS a LIBRARY DESTINATION x)\n  install( TARGETS b DESTINATION y)\n"
            "install(TARGETS ab x)")
    assert drop_targets(text, ["a", "b"]) == (
        "# sgl_kernel narrowed: install(TARGETS a LIBRARY DESTINATION x)\n"
        "# sgl_kernel narrowed: install( TARGETS b DESTINATION y)\n"
        "install(TARGETS ab x)\n"
        "set_target_properties(a b PROPERTIES EXCLUDE_FROM_ALL ON)  # sgl_kernel narrowed\n")
    assert drop_targets(text, []) == text


def test_drop_variant_targets():
    text = ("install(TARGETS common_ops_sm90_build LIBRARY DESTINATION sgl_kernel/sm90)\n"
            "install(TARGETS common_ops_sm100_build LIBRARY DESTINATION sgl_kernel/sm100)")
    assert drop_variant_targets(text, ["sm90"]) == (
        "# sgl_kernel narrowed: install(TARGETS common_ops_sm90_build LIBRARY DESTINATION sgl_kernel/sm90)\n"
        "install(TARGETS common_ops_sm100_build LIBRARY DESTINATION sgl_kernel/sm100)\n"
        "set_target_properties(common_ops_sm90_build PROPERTIES EXCLUDE_FROM_ALL ON)"
        "  # sgl_kernel narrowed\n",
        ["common_ops_sm90_build"])
    assert drop_variant_targets(text, []) == (text, [])
    with pytest.raises(BuildPlanError) as caught:
        drop_variant_targets("install(TARGETS common_ops LIBRARY DESTINATION x)\n", ["sm100"])
    assert str(caught.value) == ("the CMakeLists has no 'install(TARGETS common_ops_sm100_build ...)' line, "
                                 "so the sm100 variant cannot be left out; set sgl_kernel_narrow=false")


def test_rewrite_fetchcontent_urls():
    text = ("  URL https://${GITHUB_ARTIFACTORY}/o/r/archive/a.tar.gz\n"
            "URL http://github.com/o/s/archive/b.zip\n"
            "URL https://example.org/c.tar.gz\n"
            "  GIT_REPOSITORY https://github.com/o/t\n")
    new, changes = rewrite_fetchcontent_urls(text, MIRROR + "/")
    assert new == (f"  URL {MIRROR}/o/r/archive/a.tar.gz\nURL {MIRROR}/o/s/archive/b.zip\n"
                   "URL https://example.org/c.tar.gz\n  GIT_REPOSITORY https://github.com/o/t\n")
    assert changes == [
        ("https://${GITHUB_ARTIFACTORY}/o/r/archive/a.tar.gz", f"{MIRROR}/o/r/archive/a.tar.gz"),
        ("http://github.com/o/s/archive/b.zip", f"{MIRROR}/o/s/archive/b.zip")]


def test_repin_torch():
    text = '["torch==2.14.1", "torch == 2.9.0; x", "torchvision==0.20", "torch>=2"]'
    assert repin_torch(text, "2.15.0+cu130") == (
        '["torch==2.15.0", "torch==2.15.0; x", "torchvision==0.20", "torch>=2"]', 2)


def test_fetchcontent_with_a_comment_an_empty_declare_and_odd_case():
    text = ("FetchContent_Declare()\nfetchcontent_declare(\n  dep # URL https://nowhere\n"
            '  URL "https://h/x.tgz"\n  URL_HASH sha256=ABC\n)\n'
            "FetchContent_Declare(other URL_HASH MD5=00 GIT_REPOSITORY \"g\" GIT_TAG \"v1\")\n")
    assert fetchcontent_dependencies(text) == [
        {"name": "dep", "url": "https://h/x.tgz", "sha256": "abc", "git_repository": None, "git_tag": None},
        {"name": "other", "url": None, "sha256": None, "git_repository": "g", "git_tag": "v1"}]


def test_resolve_url_leaves_unknown_variables():
    assert resolve_url("https://${A}/${B}/x", {"A": "m", "C": 1}) == "https://m/${B}/x"


def test_offline_defines_error_in_full_and_no_artifactory_define_without_its_use():
    deps = [{"name": "a", "url": "https://h/a.tgz"}, {"name": "b", "url": None}]
    with pytest.raises(BuildPlanError) as caught:
        offline_cmake_defines(deps, "m/gh")
    assert str(caught.value) == (
        "configure-time dependencies a, b would be downloaded from the internet: set "
        "sgl_kernel_github_mirror (used as ${GITHUB_ARTIFACTORY}) or sgl_kernel_prefetched_sources (name: "
        "directory) for them")
    assert offline_cmake_defines(deps, "m/gh", {"a": "/s/a", "b": "/s/b"}) == [
        "-DFETCHCONTENT_SOURCE_DIR_A=/s/a", "-DFETCHCONTENT_SOURCE_DIR_B=/s/b"]
    assert offline_cmake_defines([], None) == []


# prepare_source on the test package ------------------------------------------------------------------

def prepare(package, capabilities=("12.0",), **kwargs):
    kwargs = {"mirror_url": MIRROR, **kwargs}
    return prepare_source(str(package), list(capabilities), "13.0", "2.14.1", "c0ffee", **kwargs)


@pytest.mark.parametrize(("capabilities", "fa3", "below"), [
    (["12.0"], "OFF", "OFF"), (["9.0"], "ON", "OFF"), (["8.6"], "ON", "ON"), (["8.9", "12.0"], "ON", "ON"),
    (["10.0"], "OFF", "OFF")])
def test_fa3_and_below_sm90_follow_the_targets(tmp_path, capabilities, fa3, below):
    plan = prepare(make_source(tmp_path, "new"), capabilities)
    assert plan["cmake_defines"] == {"SGL_KERNEL_ENABLE_FA3": fa3, "ENABLE_BELOW_SM90": below}


def test_defines_given_win_and_no_narrowing_builds_everything(tmp_path):
    plan = prepare(make_source(tmp_path, "new"), narrow=False, enable_fa3=False,
                   extra_cmake_defines={"SGL_KERNEL_COMPILE_THREADS": 4, "ENABLE_BELOW_SM90": "ON"})
    assert plan["cmake_defines"] == {"SGL_KERNEL_ENABLE_FA3": "OFF", "SGL_KERNEL_COMPILE_THREADS": "4",
                                     "ENABLE_BELOW_SM90": "ON"}
    assert plan["dropped_targets"] == []
    assert plan["variants"] == ["sm100", "sm90"]
    assert plan["fingerprint_inputs"]["flags"] == ["ENABLE_BELOW_SM90=ON", "SGL_KERNEL_COMPILE_THREADS=4",
                                                   "SGL_KERNEL_ENABLE_FA3=OFF"]
    assert prepare(make_source(tmp_path / "b", "new"), narrow=False)["cmake_defines"] == {
        "SGL_KERNEL_ENABLE_FA3": "ON", "ENABLE_BELOW_SM90": "ON"}


def test_capabilities_are_sorted_and_unique_in_the_plan(tmp_path):
    plan = prepare(make_source(tmp_path, "new"), ["12.0", "9.0", "12.0"])
    assert plan["capabilities"] == ["9.0", "12.0"]
    assert plan["fingerprint_inputs"]["variants"] == ["sm100", "sm90"]


def test_prefetched_sources_are_defines_not_flags(tmp_path):
    plan = prepare(make_source(tmp_path, "new"), mirror_url="", prefetched={"repo-tinydep": "/srv/t"})
    assert plan["cmake_defines"]["FETCHCONTENT_SOURCE_DIR_REPO-TINYDEP"] == "/srv/t"
    assert not any(f.startswith("FETCHCONTENT") for f in plan["fingerprint_inputs"]["flags"])
    assert plan["dependencies"][0]["name"] == "repo-tinydep"


def test_offline_error_in_full(tmp_path):
    with pytest.raises(BuildPlanError) as caught:
        prepare(make_source(tmp_path, "new"), mirror_url="")
    assert str(caught.value) == (
        "configure-time dependencies repo-tinydep would be downloaded from the internet: set "
        "sgl_kernel_source_mirror_url (a prefix that replaces https://${GITHUB_ARTIFACTORY} and "
        "https://github.com) or sgl_kernel_prefetched_sources (name: directory) for them")


@pytest.mark.parametrize("missing", ["CMakeLists.txt", "pyproject.toml"])
def test_a_missing_file_in_full(tmp_path, missing):
    package = make_source(tmp_path, "new")
    (package / missing).unlink()
    with pytest.raises(BuildPlanError) as caught:
        prepare(package)
    assert str(caught.value) == (f"{package / missing} is missing: {package} is not an sglang-kernel source "
                                 "directory (set sgl_kernel_source_subdir to sgl-kernel or "
                                 "python/sglang/kernels/aot)")


def test_a_cmakelists_without_gencodes(tmp_path):
    package = make_source(tmp_path, "new")
    (package / "CMakeLists.txt").write_text("project(x)\n")
    with pytest.raises(BuildPlanError) as caught:
        prepare(package)
    assert str(caught.value) == (f"{package / 'CMakeLists.txt'} names no -gencode flag; upstream changed how "
                                 "it picks arches, so narrowing cannot work: set sgl_kernel_narrow=false")


def test_pristine_copies_are_kept_and_a_new_plan_starts_from_them(tmp_path):
    package = make_source(tmp_path, "new")
    original = (package / "CMakeLists.txt").read_text()
    (package / "cmake").mkdir()
    (package / "cmake" / "extra.cmake").write_text(f'set(X_FLAGS "{SM90}" "{SM120A}")\n')
    (package / "cmake" / "notes.txt").write_text(f'"{SM90}"\n')
    prepare(package, ["12.0"])
    assert (package / ("CMakeLists.txt" + PRISTINE_SUFFIX)).read_text() == original
    assert (package / "cmake" / "extra.cmake").read_text() == f'set(X_FLAGS  "{SM120A}")\n'
    assert (package / "cmake" / "notes.txt").read_text() == f'"{SM90}"\n'
    assert not (package / "cmake" / ("notes.txt" + PRISTINE_SUFFIX)).exists()
    plan = prepare(package, ["9.0"])  # from the pristine text, not the 12.0 one
    assert plan["changed"] is True
    assert SM90 in plan["gencodes"]
    assert (package / "cmake" / "extra.cmake").read_text() == f'set(X_FLAGS "{SM90}" )\n'


def test_check_mode_keeps_no_pristine_copy_and_reports_the_change(tmp_path):
    package = make_source(tmp_path, "new")
    before = {name: (package / name).read_text() for name in ("CMakeLists.txt", "pyproject.toml")}
    plan = prepare_source(str(package), ["12.0"], "13.0", "2.15.0", "c0ffee", mirror_url=MIRROR,
                          check_mode=True)
    assert plan["changed"] is True
    assert {name: (package / name).read_text() for name in before} == before
    assert sorted(os.listdir(package)) == sorted(p for p in os.listdir(package) if PRISTINE_SUFFIX not in p)


def test_only_the_torch_pin_changed(tmp_path):
    package = make_source(tmp_path, "new")
    prepare(package, ["12.0"])
    plan = prepare_source(str(package), ["12.0"], "13.0", "2.15.0", "c0ffee", mirror_url=MIRROR)
    assert plan["changed"] is True
    assert '"torch==2.15.0"' in (package / "pyproject.toml").read_text()
