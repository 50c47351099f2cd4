"""module_utils/sgl_kernel_source.py at its edges: comments with two '#', texts with and without a final
line break, FetchContent values with quotes and '=' inside, mirror prefixes with a trailing slash, the
plan's fingerprint inputs, check mode with cmake/*.cmake files, and UTF-8 files under a C locale."""

import os

import pytest
from ansible.module_utils.sgl_kernel_build import BuildPlanError
from ansible.module_utils.sgl_kernel_source import (
    PRISTINE_SUFFIX,
    cmake_gencodes,
    drop_targets,
    drop_variant_targets,
    fetchcontent_dependencies,
    fetchcontent_source_var,
    gencodes_by_variable,
    narrow_cmake_gencodes,
    offline_cmake_defines,
    prepare_source,
    repin_torch,
    rewrite_fetchcontent_urls,
)
from kernelpkg import make_source
from locales import c_locale

MIRROR = "http://192.168.7.1:8000/gh"
SM90 = "-gencode=arch=compute_90,code=sm_90"
SM120A = "-gencode=arch=compute_120a,code=sm_120a"
NARROWED = "  # sgl_kernel narrowed\n"


# comments: everything after the first '#' of a line is a comment -----------------------------------------

TWO_HASHES = f'set(F "{SM90}") # was "{SM120A}" # until 0.4\n'


def test_a_gencode_between_two_hashes_is_a_comment():
    assert cmake_gencodes(TWO_HASHES) == [SM90]
    assert gencodes_by_variable(TWO_HASHES) == {"F": [SM90]}


def test_narrowing_ignores_a_gencode_between_two_hashes():
    text = f'set(F\n  "{SM90}" # was "{SM120A}" # until 0.4\n)\n'
    assert narrow_cmake_gencodes(text, [SM120A]) == (
        f'set(F\n  # sgl_kernel narrowed: "{SM90}" # was "{SM120A}" # until 0.4\n)\n', [SM90])


# the line appended at the end: one line break before it, never two ---------------------------------------

def test_drop_targets_after_a_final_line_break_and_in_an_empty_text():
    assert drop_targets("install(TARGETS a DESTINATION x)\n", ["a"]) == (
        "# sgl_kernel narrowed: install(TARGETS a DESTINATION x)\n"
        f"set_target_properties(a PROPERTIES EXCLUDE_FROM_ALL ON){NARROWED}")
    assert drop_targets("", ["a"]) == f"set_target_properties(a PROPERTIES EXCLUDE_FROM_ALL ON){NARROWED}"


def test_drop_both_variants_before_a_last_line_without_a_line_break():
    text = ("install(TARGETS common_ops_sm90_build LIBRARY DESTINATION sgl_kernel/sm90)\n"
            "install(TARGETS common_ops_sm100_build LIBRARY DESTINATION sgl_kernel/sm100)\n"
            "endif()")
    lines = text.splitlines(keepends=True)
    assert drop_variant_targets(text, ["sm90", "sm100"]) == (
        f"# sgl_kernel narrowed: {lines[0]}# sgl_kernel narrowed: {lines[1]}endif()\n"
        "set_target_properties(common_ops_sm90_build common_ops_sm100_build PROPERTIES EXCLUDE_FROM_ALL ON)"
        + NARROWED,
        ["common_ops_sm90_build", "common_ops_sm100_build"])


def test_drop_a_variant_after_a_final_line_break():
    text = "install(TARGETS common_ops_sm100_build LIBRARY DESTINATION sgl_kernel/sm100)\n"
    assert drop_variant_targets(text, ["sm100"]) == (
        "# sgl_kernel narrowed: " + text
        + f"set_target_properties(common_ops_sm100_build PROPERTIES EXCLUDE_FROM_ALL ON){NARROWED}",
        ["common_ops_sm100_build"])


# FetchContent_Declare values ------------------------------------------------------------------------------

def test_fetchcontent_comments_before_the_name_and_after_a_value_are_skipped():
    text = ("FetchContent_Declare( # CUDA templates\n"
            "  Repo-X\n"
            '  URL "https://h/dl/FIX" # URL https://elsewhere/old.tgz\n'
            ")\n")
    assert fetchcontent_dependencies(text) == [
        {"name": "Repo-X", "url": "https://h/dl/FIX", "sha256": None, "git_repository": None,
         "git_tag": None}]


def test_fetchcontent_values_lose_their_quotes_only():
    """Quotes come off, nothing else: a value ending in X keeps it, and the pin is all that follows the
    first '=' (lower-cased), so even a malformed one is reported as written, not cut."""
    text = ('FetchContent_Declare(dep\n  URL_HASH SHA256="AB=CDX"\n  GIT_REPOSITORY "https://h/REX"\n'
            '  GIT_TAG "TAG_X"\n)\n')
    assert fetchcontent_dependencies(text) == [
        {"name": "dep", "url": None, "sha256": "ab=cdx", "git_repository": "https://h/REX",
         "git_tag": "TAG_X"}]


def test_fetchcontent_source_var_only_upper_cases_the_name_as_cmake_does():
    # FetchContent reads FETCHCONTENT_SOURCE_DIR_<name upper-cased>; '-' and '.' stay
    assert fetchcontent_source_var("Repo-Cutlass_2.x") == "FETCHCONTENT_SOURCE_DIR_REPO-CUTLASS_2.X"


# mirror prefixes: one trailing slash comes off, the rest of the prefix stays ------------------------------

def test_a_mirror_prefix_keeps_its_last_character():
    deps = [{"name": "a", "url": "https://${GITHUB_ARTIFACTORY}/o/a.tgz"}]
    assert offline_cmake_defines(deps, "mirror.lan/BOX/") == ["-DGITHUB_ARTIFACTORY=mirror.lan/BOX"]
    assert rewrite_fetchcontent_urls("URL https://github.com/o/a.tgz\n", "http://h/BOX/") == (
        "URL http://h/BOX/o/a.tgz\n", [("https://github.com/o/a.tgz", "http://h/BOX/o/a.tgz")])


def test_repin_torch_keeps_what_comes_before_the_first_plus():
    assert repin_torch('["torch==2.14.1"]', "2.15.0+cu130+local") == ('["torch==2.15.0"]', 1)


# prepare_source -------------------------------------------------------------------------------------------

def prepare(package, capabilities=("12.0",), **kwargs):
    kwargs = {"mirror_url": MIRROR, **kwargs}
    return prepare_source(str(package), list(capabilities), "13.0", "2.14.1+cu130", "c0ffee", **kwargs)


def test_every_online_dependency_is_named(tmp_path):
    package = make_source(tmp_path, "new")
    (package / "cmake").mkdir()
    (package / "cmake" / "deps.cmake").write_text(
        "FetchContent_Declare(\n  repo-other\n  URL https://example.org/other.tgz\n)\n")
    with pytest.raises(BuildPlanError) as caught:
        prepare(package, mirror_url="")
    assert str(caught.value).startswith(
        "configure-time dependencies repo-tinydep, repo-other would be downloaded from the internet: ")


def test_the_fingerprint_holds_cuda_and_torch(tmp_path):
    plan = prepare(make_source(tmp_path, "new"))
    assert plan["fingerprint_inputs"]["cuda"] == "13.0"
    assert plan["fingerprint_inputs"]["torch"] == "2.14.1+cu130"
    other = prepare_source(str(make_source(tmp_path / "b", "new")), ["12.0"], "12.9", "2.14.1+cu130",
                           "c0ffee", mirror_url=MIRROR)
    assert other["fingerprint"] != plan["fingerprint"]


def test_check_mode_keeps_no_pristine_copy_of_cmake_files(tmp_path):
    package = make_source(tmp_path, "new")
    (package / "cmake").mkdir()
    (package / "cmake" / "extra.cmake").write_text(f'set(X_FLAGS "{SM90}" "{SM120A}")\n')
    plan = prepare(package, check_mode=True)
    assert plan["changed"] is True
    assert os.listdir(package / "cmake") == ["extra.cmake"]
    assert (package / "cmake" / "extra.cmake").read_text() == f'set(X_FLAGS "{SM90}" "{SM120A}")\n'


def test_files_are_read_and_written_as_utf8_whatever_the_locale(tmp_path):
    with c_locale():
        package = make_source(tmp_path, "new")
        note = "# Größe → sm_120a\n"
        for name in ("CMakeLists.txt", "pyproject.toml"):
            with open(package / name, "a", encoding="utf-8") as handle:
                handle.write(note)
        extra = package / "cmake" / "extra.cmake"
        extra.parent.mkdir()
        extra.write_text(f'{note}set(X_FLAGS "{SM90}" "{SM120A}")\n', encoding="utf-8")
        first = prepare(package)
        assert first["changed"] is True
        again = prepare(package)  # from the pristine copies, compared with the files written
        assert again["changed"] is False
        assert (package / "pyproject.toml").read_text(encoding="utf-8").endswith(note)
        assert (package / "CMakeLists.txt").read_text(encoding="utf-8").count(note) == 1
        assert extra.read_text(encoding="utf-8") == f'{note}set(X_FLAGS  "{SM120A}")\n'
        assert (package / ("CMakeLists.txt" + PRISTINE_SUFFIX)).read_text(encoding="utf-8").endswith(note)
