"""module_utils/cuda_toolkit, talking to an nvcc: whole error messages, the order nvcc is looked for, and
a toolkit root nvcc does not say. nvcc is tests/stand_ins/nvcc-12.6 or a STAND-IN script written by the
test (no nvcc runs in a unit test)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from ansible.module_utils.cuda_toolkit import (
    ToolkitError,
    check_toolkit,
    find_nvcc,
    inspect_toolkit,
    parse_gpu_arch_list,
    parse_nvcc_version,
    parse_toolkit_root,
    toolkit_env,
)

STAND_IN = Path(__file__).resolve().parents[1] / "stand_ins" / "nvcc-12.6"
NVCC_12_6 = str(STAND_IN / "bin" / "nvcc")


def _nvcc(directory: Path, body: str) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "nvcc"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


def test_parse_messages_in_full():
    with pytest.raises(ToolkitError) as caught:
        parse_nvcc_version("  gcc   (Debian)\n 12.2.0 ")
    assert str(caught.value) == 'its --version output has no "release X.Y, VX.Y.Z" line: gcc (Debian) 12.2.0'
    with pytest.raises(ToolkitError) as caught:
        parse_nvcc_version(None)
    assert str(caught.value).endswith(" line: no output")
    with pytest.raises(ToolkitError) as caught:
        parse_nvcc_version("y" * 300)
    assert str(caught.value).endswith(": " + "y" * 200)
    with pytest.raises(ToolkitError) as caught:
        parse_gpu_arch_list("x " * 150)
    assert str(caught.value) == ("its --list-gpu-arch output names no compute_XY architecture: "
                                 + "x " * 100)
    with pytest.raises(ToolkitError) as caught:
        parse_gpu_arch_list(None)
    assert str(caught.value).endswith("architecture: no output")


def test_parse_variants():
    assert parse_nvcc_version("Cuda compilation tools, release  12.4 ,  V12.4.131") == ("12.4", "12.4.131")
    assert parse_gpu_arch_list("compute_90a\ncompute_100f\nsm_90\ncompute_8\ncompute_1000") == [
        "compute_90a", "compute_100f"]
    assert parse_toolkit_root("#$ _HERE_=/x/bin\n#$   TOP=/opt/cuda/bin/../  \n#$ NVVMIR=/y") == "/opt/cuda"
    assert parse_toolkit_root("TOP=/opt/cuda") is None
    assert parse_toolkit_root(None) is None


def test_find_nvcc_prefers_what_is_given(tmp_path):
    given = _nvcc(tmp_path / "given", "")
    home_nvcc = _nvcc(tmp_path / "home" / "bin", "")
    searched = _nvcc(tmp_path / "searched" / "bin", "")
    on_path = _nvcc(tmp_path / "onpath", "")
    everything = {"search": [str(tmp_path / "searched")], "path_env": str(tmp_path / "onpath")}
    assert find_nvcc(given, home=str(tmp_path / "home"), **everything) == given
    assert find_nvcc(None, home=str(tmp_path / "home"), **everything) == home_nvcc
    assert find_nvcc(**everything) == searched
    path_env = os.pathsep.join(["", str(tmp_path / "nothing"), str(tmp_path / "onpath")])
    assert find_nvcc(path_env=path_env) == on_path
    assert find_nvcc(search=None, path_env="") is None


def test_find_nvcc_reads_path_from_the_environment(tmp_path, monkeypatch):
    on_path = _nvcc(tmp_path / "onpath", "")
    monkeypatch.setenv("PATH", str(tmp_path / "onpath"))
    assert find_nvcc() == on_path
    monkeypatch.delenv("PATH")
    assert find_nvcc() is None


def test_find_nvcc_refuses_a_given_path_that_is_no_program(tmp_path):
    plain = tmp_path / "nvcc"
    plain.write_text("")
    with pytest.raises(ToolkitError) as caught:
        find_nvcc(str(plain))
    assert str(caught.value) == f"nvcc {plain} does not exist or is not executable"
    with pytest.raises(ToolkitError) as caught:
        find_nvcc(str(tmp_path))                       # a directory, executable but no program
    assert str(caught.value) == f"nvcc {tmp_path} does not exist or is not executable"
    (tmp_path / "home" / "bin" / "nvcc").mkdir(parents=True)
    with pytest.raises(ToolkitError) as caught:
        find_nvcc(home=str(tmp_path / "home"))
    assert str(caught.value) == f"CUDA home {tmp_path / 'home'} has no executable bin/nvcc"


def test_find_nvcc_skips_searched_homes_whose_nvcc_cannot_run(tmp_path):
    plain = tmp_path / "plain" / "bin" / "nvcc"
    plain.parent.mkdir(parents=True)
    plain.write_text("")
    good = _nvcc(tmp_path / "good" / "bin", "")
    assert find_nvcc(search=[str(tmp_path / "plain"), str(tmp_path / "good")], path_env="") == good
    assert find_nvcc(search=[], path_env=str(tmp_path / "plain" / "bin")) is None


def test_inspect_the_stand_in():
    assert inspect_toolkit(NVCC_12_6) == {
        "nvcc": NVCC_12_6, "home": str(STAND_IN), "version": "12.6", "version_full": "12.6.85",
        "gpu_archs": [f"compute_{a}" for a in (50, 52, 53, 60, 61, 62, 70, 72, 75, 80, 86, 87, 89, 90)]}


def test_inspect_falls_back_to_the_parent_of_bin_when_dryrun_fails(tmp_path):
    real = tmp_path / "cuda-12.6" / "bin"
    nvcc = _nvcc(real, 'case "$1" in\n  --version) echo "Cuda compilation tools, release 12.6, V12.6.85" ;;\n'
                       '  --list-gpu-arch) echo compute_90 ;;\n  *) echo "no dryrun" >&2; exit 2 ;;\nesac\n')
    link = tmp_path / "link" / "nvcc"
    link.parent.mkdir()
    link.symlink_to(nvcc)
    facts = inspect_toolkit(str(link))
    assert facts["home"] == str(tmp_path / "cuda-12.6")           # through the link
    assert facts["nvcc"] == str(link)


def test_inspect_takes_a_dryrun_without_top_as_no_answer(tmp_path):
    nvcc = _nvcc(tmp_path / "c" / "bin", 'case "$1" in\n  --version) echo "release 12.6, V12.6.85" ;;\n'
                                         '  --list-gpu-arch) echo compute_90 ;;\n'
                                         '  *) echo "#$ _HERE_=/x" ;;\nesac\n')
    assert inspect_toolkit(nvcc)["home"] == str(tmp_path / "c")


def test_inspect_believes_the_root_nvcc_resolves(tmp_path):
    # a wrapper outside the toolkit (as some distributions install): the root is where nvcc says it is
    argv = tmp_path / "dryrun.argv"
    nvcc = _nvcc(tmp_path / "wrapper", 'case "$1" in\n  --version) echo "release 12.6, V12.6.85" ;;\n'
                                       '  --list-gpu-arch) echo compute_90 ;;\n'
                                       f'  --dryrun) printf "%s\\n" "$@" > {argv}\n'
                                       f'    echo "#$ TOP={tmp_path}/cuda-12.6/bin/.." ;;\n'
                                       '  *) exit 1 ;;\nesac\n')
    assert inspect_toolkit(nvcc)["home"] == str(tmp_path / "cuda-12.6")
    # a dry run of a compile to nowhere: nvcc prints its settings and reads and writes no file
    assert argv.read_text().splitlines() == ["--dryrun", "-c", "sglang-fleet-probe.cu", "-o", os.devnull]


def test_every_nvcc_call_is_bounded(tmp_path):
    hangs_on_archs = _nvcc(tmp_path / "a", 'case "$1" in\n  --version) echo "release 12.6, V12.6.85" ;;\n'
                                           '  *) exec sleep 5 ;;\nesac\n')
    start = time.monotonic()
    with pytest.raises(ToolkitError, match=r"--list-gpu-arch: .*0\.3"):
        inspect_toolkit(hangs_on_archs, timeout=0.3)
    hangs_on_dryrun = _nvcc(tmp_path / "b" / "bin", 'case "$1" in\n'
                                                   '  --version) echo "release 12.6, V12.6.85" ;;\n'
                                                   '  --list-gpu-arch) echo compute_90 ;;\n'
                                                   '  *) exec sleep 5 ;;\nesac\n')
    assert inspect_toolkit(hangs_on_dryrun, timeout=0.3)["home"] == str(tmp_path / "b")
    assert time.monotonic() - start < 3


def test_output_that_is_not_utf8_is_read(tmp_path):
    nvcc = _nvcc(tmp_path / "bin", 'case "$1" in\n'
                                   "  --version) printf 'nvcc \\377\\nrelease 12.6, V12.6.85\\n' ;;\n"
                                   "  --list-gpu-arch) printf 'compute_90 \\377\\n' ;;\n"
                                   "  *) exit 1 ;;\nesac\n")
    assert inspect_toolkit(nvcc)["version_full"] == "12.6.85"


def test_a_long_failure_keeps_300_characters(tmp_path):
    nvcc = _nvcc(tmp_path, "printf '%0400d' 0\nexit 1\n")
    with pytest.raises(ToolkitError) as caught:
        inspect_toolkit(nvcc)
    assert str(caught.value).endswith("exited with 1: " + "0" * 300)


def test_an_nvcc_that_fails_is_named_with_its_output(tmp_path):
    nvcc = _nvcc(tmp_path, "echo '  nvcc fatal :'\necho 'Unknown   option' >&2\nexit 3\n")
    with pytest.raises(ToolkitError) as caught:
        inspect_toolkit(nvcc)
    assert str(caught.value) == (f"{nvcc} is not a working nvcc: {nvcc} --version exited with 3: "
                                 "nvcc fatal : Unknown option")
    quiet = _nvcc(tmp_path / "q", "exit 1\n")
    with pytest.raises(ToolkitError) as caught:
        inspect_toolkit(quiet)
    assert str(caught.value).endswith("--version exited with 1: no output")


def test_an_nvcc_without_an_arch_list(tmp_path):
    nvcc = _nvcc(tmp_path, 'case "$1" in\n  --version) echo "release 12.6, V12.6.85" ;;\n'
                           "  *) echo \"nvcc fatal   : Unknown option '$1'\"; exit 1 ;;\nesac\n")
    with pytest.raises(ToolkitError) as caught:
        inspect_toolkit(nvcc)
    assert str(caught.value) == (f"{nvcc} is not a working nvcc: {nvcc} --list-gpu-arch exited with 1: "
                                 "nvcc fatal : Unknown option '--list-gpu-arch'")


def test_a_hung_nvcc_is_cut_off(tmp_path):
    nvcc = _nvcc(tmp_path, "exec sleep 5\n")
    with pytest.raises(ToolkitError, match=rf"^{nvcc} is not a working nvcc: {nvcc} --version: .*0\.3"):
        inspect_toolkit(nvcc, timeout=0.3)


def test_an_nvcc_that_cannot_start(tmp_path):
    nvcc = tmp_path / "nvcc"
    nvcc.write_text("no interpreter line\n")
    nvcc.chmod(0o755)
    with pytest.raises(ToolkitError) as caught:
        inspect_toolkit(str(nvcc))
    assert str(caught.value) == f"{nvcc} is not a working nvcc: cannot run {nvcc}: Exec format error"


def test_checks_on_a_release_only():
    problems, needs, missing = check_toolkit({"version": "13.0"}, ["9.0"], version="13.0")
    assert (problems, missing) == ([], [])
    assert needs["compute_archs"] == ["compute_90"]
    assert check_toolkit({"version": "12.8"}, ["12.0"])[0] == []            # exactly the minimum


def test_cuda_13_names_every_capability_it_dropped():
    problems, _, _ = check_toolkit({"version": "13.0"}, ["6.1", "7.0", "7.5", "9.0"])
    assert problems == ["CUDA 13.0 cannot target capability 6.1, 7.0: CUDA 13 dropped Maxwell, Pascal and "
                        "Volta; use CUDA 12.x for them"]
    assert check_toolkit({"version": "12.9"}, ["7.0"])[0] == []


def test_missing_compute_archs_are_named_with_what_nvcc_has():
    facts = {"nvcc": "/c/bin/nvcc", "version": "12.8", "version_full": "12.8.93",
             "gpu_archs": ["compute_80", "compute_90"]}
    problems, _, missing = check_toolkit(facts, ["8.0", "10.0", "12.0"])
    assert missing == ["compute_100", "compute_120"]
    assert problems == ["nvcc 12.8.93 (/c/bin/nvcc) cannot target compute_100, compute_120: its "
                        "--list-gpu-arch has compute_80, compute_90"]


def test_toolkit_env_reads_path_from_the_environment(monkeypatch):
    monkeypatch.setenv("PATH", f"/bin{os.pathsep}{os.pathsep}/opt/c/bin{os.pathsep}/bin")
    assert toolkit_env("/opt/c", "/opt/c/bin/nvcc")["PATH"] == f"/opt/c/bin{os.pathsep}/bin"
    monkeypatch.delenv("PATH")
    assert toolkit_env("/opt/c", "/opt/c/bin/nvcc")["PATH"] == "/opt/c/bin"
    assert toolkit_env("/opt/c", "n", path_env="")["PATH"] == "/opt/c/bin"
