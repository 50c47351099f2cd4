"""module_utils/pylock: reading a PEP 751 lock, its pins against the profile, one host's files."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from ansible.module_utils.pylock import (
    LockError,
    check_python_version,
    coverage,
    coverage_header,
    host_tags,
    lock_file_name,
    lock_requirements,
    lock_versions,
    marker_environment,
    pin_problems,
    read_lock,
    render_lock,
    requirements_text,
    select,
    split_tools,
    wheel_urls,
)

REPO = Path(__file__).resolve().parents[2]
STABLE = yaml.safe_load((REPO / "profiles" / "stable.yml").read_text())
LINUX = "sys_platform == 'linux' and (platform_machine == 'x86_64' or platform_machine == 'aarch64')"


def wheel(filename, sha="a" * 64, size=10):
    return {"url": f"https://files.example/{filename}", "size": size, "hashes": {"sha256": sha}}


def package(name, version, wheels, marker=LINUX):
    entry = {"name": name, "version": version, "wheels": wheels}
    if marker is not None:
        entry["marker"] = marker
    return entry


def lock_of(*packages, requires=">=3.11"):
    return {
        "lock-version": "1.0",
        "created-by": "uv",
        "requires-python": requires,
        "packages": list(packages),
    }


TORCH = package(
    "torch",
    "2.14.1",
    [
        wheel("torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", "1" * 64),
        wheel("torch-2.14.1-cp311-cp311-manylinux_2_28_aarch64.whl", "2" * 64),
        wheel("torch-2.14.1-cp312-cp312-manylinux_2_28_x86_64.whl", "3" * 64),
        wheel("torch-2.14.1-cp311-none-macosx_11_0_arm64.whl", "4" * 64),
    ],
)
SIX = package("six", "1.17.0", [wheel("six-1.17.0-py2.py3-none-any.whl", "5" * 64)], marker=None)
ZSTD = package(
    "zstandard",
    "0.25.0",
    [
        wheel("zstandard-0.25.0-cp311-cp311-manylinux2014_x86_64.manylinux_2_17_x86_64.whl", "6" * 64),
        wheel("zstandard-0.25.0-cp311-cp311-manylinux_2_28_x86_64.whl", "7" * 64),
        wheel("zstandard-0.25.0-cp311-cp311-musllinux_1_2_x86_64.whl", "8" * 64),
    ],
)
UV = package(
    "uv", "0.13.8", [wheel("uv-0.13.8-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", "9" * 64)]
)
MAC_ONLY = package(
    "appnope", "0.1.4", [wheel("appnope-0.1.4-py2.py3-none-any.whl")], marker="sys_platform == 'darwin'"
)


def test_lock_file_name_follows_pep_751():
    assert lock_file_name("stable") == "pylock.stable.toml"


def test_read_lock_returns_the_lock_and_the_files_sha256(tmp_path):
    text = b'lock-version = "1.0"\ncreated-by = "uv"\n[[packages]]\nname = "six"\nversion = "1.17.0"\n'
    path = tmp_path / "pylock.x.toml"
    path.write_bytes(text)
    lock, digest = read_lock(str(path))
    assert digest == hashlib.sha256(text).hexdigest()
    assert lock["packages"] == [{"name": "six", "version": "1.17.0"}]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b'lock-version = "1.0"\npackages = [\n', "is not valid TOML: "),
        (b"\xff\xfe", "is not UTF-8 text"),
        (
            b'created-by = "uv"\n[[packages]]\nname = "six"\n',
            "is not a PEP 751 lock (no lock-version or no [[packages]])",
        ),
        (b'lock-version = "1.0"\n', "is not a PEP 751 lock"),
        (b"lock-version = 1\npackages = []\n", "is not a PEP 751 lock"),
    ],
)
def test_read_lock_names_the_file_and_the_problem(tmp_path, content, message):
    path = tmp_path / "pylock.bad.toml"
    path.write_bytes(content)
    with pytest.raises(LockError) as error:
        read_lock(str(path))
    assert str(error.value).startswith(f"{path} ")
    assert message in str(error.value)


def test_read_lock_toml_error_says_the_line(tmp_path):
    path = tmp_path / "pylock.bad.toml"
    path.write_text('lock-version = "1.0"\n\nname = = 3\n')
    with pytest.raises(LockError, match=r"line 3"):
        read_lock(str(path))


def test_read_lock_missing_and_unreadable(tmp_path):
    with pytest.raises(LockError, match=r"/nope.toml does not exist$"):
        read_lock(str(tmp_path / "nope.toml"))
    with pytest.raises(LockError, match=r"cannot be read: Is a directory"):
        read_lock(str(tmp_path))


def test_lock_versions_are_by_canonical_name():
    lock = lock_of(package("Flashinfer_Python", "0.7.2", []), SIX)
    assert lock_versions(lock) == {"flashinfer-python": "0.7.2", "six": "1.17.0"}


def test_lock_requirements_are_the_profiles_pins_on_both_linux_platforms():
    marker = 'sys_platform == "linux" and (platform_machine == "x86_64" or platform_machine == "aarch64")'
    assert lock_requirements(STABLE) == [
        f"torch==2.14.1 ; {marker}",
        f"sglang==0.5.23 ; {marker}",
        f"flashinfer-python[cu13]==0.7.2 ; {marker}",
        f"uv==0.13.8 ; {marker}",
        f"sglang-kernel==0.4.10 ; {marker}",
    ]


def test_lock_requirements_without_extras_and_for_a_source_built_kernel():
    profile = yaml.safe_load((REPO / "profiles" / "stable.yml").read_text())
    profile["flashinfer"]["extras"] = []
    profile["flashinfer"]["package"] = "flashinfer"
    profile["sgl_kernel"]["install"] = "source"
    lines = lock_requirements(profile)
    assert [line.split(" ;")[0] for line in lines] == [
        "torch==2.14.1",
        "sglang==0.5.23",
        "flashinfer==0.7.2",
        "uv==0.13.8",
    ]


def test_lock_requirements_join_several_extras():
    profile = yaml.safe_load((REPO / "profiles" / "stable.yml").read_text())
    profile["flashinfer"]["extras"] = ["cu13", "jit"]
    assert lock_requirements(profile)[2].startswith("flashinfer-python[cu13,jit]==0.7.2 ; ")


def full_lock(**versions):
    pins = {
        "torch": "2.14.1",
        "sglang": "0.5.23",
        "flashinfer-python": "0.7.2",
        "uv": "0.13.8",
        "sglang-kernel": "0.4.10",
        **versions,
    }
    return lock_of(*(package(name, version, []) for name, version in pins.items() if version))


def test_pin_problems_none_when_the_lock_matches():
    assert pin_problems(STABLE, full_lock(), "p.toml", "stable") == []


def test_pin_problems_name_the_package_and_say_make_lock():
    problems = pin_problems(
        STABLE, full_lock(sglang="0.5.22", uv=None), "profiles/pylock.stable.toml", "stable"
    )
    assert problems == [
        "sglang: the profile pins 0.5.23, profiles/pylock.stable.toml has 0.5.22",
        "uv: the profile pins 0.13.8, profiles/pylock.stable.toml has no uv",
        "run `make lock PROFILE=stable` and commit profiles/pylock.stable.toml",
    ]


def test_pin_problems_ignore_the_kernel_when_it_is_built_from_source():
    profile = yaml.safe_load((REPO / "profiles" / "stable.yml").read_text())
    profile["sgl_kernel"]["install"] = "source"
    assert pin_problems(profile, full_lock(**{"sglang-kernel": None}), "p", "stable") == []
    profile["sgl_kernel"]["install"] = "wheel"
    assert pin_problems(profile, full_lock(**{"sglang-kernel": None}), "p", "stable")[0] == (
        "sglang-kernel: the profile pins 0.4.10, p has no sglang-kernel"
    )


def test_marker_environment_of_a_linux_cpython_host():
    env = marker_environment("aarch64", "3.11")
    assert env["python_full_version"] == "3.11.0"
    assert env["python_version"] == "3.11"
    assert env["implementation_version"] == "3.11.0"
    assert (env["platform_machine"], env["sys_platform"], env["platform_system"]) == (
        "aarch64",
        "linux",
        "Linux",
    )
    assert (env["os_name"], env["implementation_name"], env["platform_python_implementation"]) == (
        "posix",
        "cpython",
        "CPython",
    )
    assert marker_environment("x86_64", "3.12.4")["python_full_version"] == "3.12.4"
    assert marker_environment("x86_64", "3.12.4")["python_version"] == "3.12"


def test_host_tags_prefer_the_newest_manylinux_then_legacy_aliases():
    tags = [str(tag) for tag in host_tags("x86_64", "3.11", "2.28")]
    assert tags[0] == "cp311-cp311-manylinux_2_28_x86_64"
    assert tags.index("cp311-cp311-manylinux_2_17_x86_64") + 1 == tags.index(
        "cp311-cp311-manylinux2014_x86_64"
    )
    assert tags.index("cp311-cp311-manylinux_2_12_x86_64") + 1 == tags.index(
        "cp311-cp311-manylinux2010_x86_64"
    )
    assert tags.index("cp311-cp311-manylinux_2_5_x86_64") + 1 == tags.index("cp311-cp311-manylinux1_x86_64")
    assert "cp311-cp311-manylinux_2_29_x86_64" not in tags
    assert "cp311-cp311-manylinux_2_4_x86_64" not in tags
    assert "cp311-abi3-linux_x86_64" in tags
    assert "py3-none-any" in tags
    assert "cp311-cp311-linux_x86_64" in tags
    assert not any("aarch64" in tag for tag in tags)


def test_host_tags_of_an_old_glibc_have_no_newer_aliases():
    tags = [str(tag) for tag in host_tags("x86_64", "3.11", "2.12")]
    assert "cp311-cp311-manylinux2014_x86_64" not in tags
    assert "cp311-cp311-manylinux2010_x86_64" in tags


def test_select_picks_one_wheel_per_package_for_the_host():
    lock = lock_of(TORCH, SIX, ZSTD, MAC_ONLY)
    files, problems = select(lock, "x86_64", "3.11", "2.36")
    assert problems == []
    assert [(item["name"], item["filename"], item["sha256"]) for item in files] == [
        ("six", "six-1.17.0-py2.py3-none-any.whl", "5" * 64),
        ("torch", "torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", "1" * 64),
        ("zstandard", "zstandard-0.25.0-cp311-cp311-manylinux_2_28_x86_64.whl", "7" * 64),
    ]
    assert files[1]["url"] == "https://files.example/torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert files[1]["version"] == "2.14.1"
    assert files[1]["size"] == 10


def test_select_on_an_older_glibc_takes_the_older_manylinux_wheel():
    files, _ = select(lock_of(ZSTD), "x86_64", "3.11", "2.27")
    assert files[0]["sha256"] == "6" * 64


def test_select_for_aarch64():
    files, problems = select(lock_of(TORCH, ZSTD), "aarch64", "3.11", "2.36")
    assert [item["sha256"] for item in files] == ["2" * 64]
    assert problems == [
        "zstandard 0.25.0: the lock has no wheel for CPython 3.11 on Linux aarch64 (glibc 2.36)"
    ]


def test_select_names_the_lock_path_and_refuses_another_python():
    files, problems = select(lock_of(TORCH, requires=">=3.12"), "x86_64", "3.11", lock_path="p.toml")
    assert files == []
    assert problems == ["p.toml is for Python >=3.12, the host's stack Python is 3.11"]
    files, problems = select(lock_of(TORCH, requires=">=3.10,<3.11"), "x86_64", "3.11", lock_path="p.toml")
    assert problems == ["p.toml is for Python >=3.10,<3.11, the host's stack Python is 3.11"]
    files, problems = select(lock_of(SIX, requires=">=3.10, <3.12"), "x86_64", "3.11")
    assert problems == []
    assert len(files) == 1


def test_select_a_python_without_wheels_in_the_lock():
    files, problems = select(lock_of(TORCH), "x86_64", "3.13", "2.36")
    assert files == []
    assert problems == ["torch 2.14.1: the lock has no wheel for CPython 3.13 on Linux x86_64 (glibc 2.36)"]


def test_select_without_requires_python_and_with_a_package_without_wheels():
    lock = lock_of(package("only-sdist", "1.0", None, marker=None), SIX, requires=None)
    del lock["requires-python"]
    files, problems = select(lock, "x86_64", "3.11")
    assert [item["name"] for item in files] == ["six"]
    assert problems == ["only-sdist 1.0: the lock has no wheel for CPython 3.11 on Linux x86_64 (glibc 2.28)"]


def test_select_refuses_a_wheel_without_sha256():
    bare = package("six", "1.17.0", [{"url": "https://x/six-1.17.0-py3-none-any.whl", "hashes": {}}])
    files, problems = select(lock_of(bare), "x86_64", "3.11", lock_path="p")
    assert files == []
    assert problems == ["six-1.17.0-py3-none-any.whl: p records no sha256 for it"]


def test_select_reads_a_wheel_given_by_path_or_name():
    by_path = package(
        "six", "1.17.0", [{"path": "wheels/six-1.17.0-py3-none-any.whl", "hashes": {"sha256": "b" * 64}}]
    )
    by_name = package(
        "tqdm",
        "4.0",
        [{"name": "tqdm-4.0-py3-none-any.whl", "url": "https://x/y?z", "hashes": {"sha256": "c" * 64}}],
    )
    files, problems = select(lock_of(by_path, by_name), "x86_64", "3.11")
    assert problems == []
    assert [(item["filename"], item["url"]) for item in files] == [
        ("six-1.17.0-py3-none-any.whl", ""),
        ("tqdm-4.0-py3-none-any.whl", "https://x/y?z"),
    ]


def test_select_ignores_names_that_are_not_wheels():
    odd = package("six", "1.17.0", [wheel("six.whl"), wheel("six-1.17.0-py3-none-any.whl", "d" * 64)])
    files, _ = select(lock_of(odd), "x86_64", "3.11")
    assert files[0]["sha256"] == "d" * 64


def test_select_invalid_marker_is_a_lock_error():
    with pytest.raises(LockError, match=r"^six: invalid marker 'sys_platform =! 3'"):
        select(lock_of(package("six", "1", [], marker="sys_platform =! 3")), "x86_64", "3.11")


def test_select_invalid_requires_python_is_not_fatal():
    files, problems = select(lock_of(SIX, requires="3.11 please"), "x86_64", "3.11")
    assert problems == []
    assert len(files) == 1


def test_requirements_text_pins_each_file_with_its_hash():
    files = [
        {"name": "six", "version": "1.17.0", "sha256": "5" * 64},
        {"name": "torch", "version": "2.14.1", "sha256": "1" * 64},
    ]
    assert requirements_text(files) == (
        f"six==1.17.0 --hash=sha256:{'5' * 64}\ntorch==2.14.1 --hash=sha256:{'1' * 64}\n"
    )
    assert requirements_text([]) == ""


def test_coverage_per_platform():
    result = coverage(lock_of(TORCH, ZSTD), "3.11", "2.36")
    assert result == {
        "x86_64": [],
        "aarch64": ["zstandard 0.25.0: the lock has no wheel for CPython 3.11 on Linux aarch64 (glibc 2.36)"],
    }


def test_split_tools_takes_uv_out_of_the_stack():
    files, _ = select(lock_of(TORCH, UV), "x86_64", "3.11")
    stack, tools = split_tools(files)
    assert [item["name"] for item in stack] == ["torch"]
    assert [item["name"] for item in tools] == ["uv"]


@pytest.mark.parametrize("value", ["3.11", "3.11.7", "3.12"])
def test_check_python_version_accepts(value):
    assert check_python_version(value) == value


@pytest.mark.parametrize("value", ["3", "3.11.", "py3.11", "3.11.7.1", 3.11, None, "3.11\n"])
def test_check_python_version_refuses(value):
    with pytest.raises(LockError, match=r"^python version must look like 3.11 or 3.11.7, got "):
        check_python_version(value)


def test_the_committed_stable_lock_matches_its_profile_and_covers_both_platforms():
    path = REPO / "profiles" / "pylock.stable.toml"
    lock, _ = read_lock(str(path))
    assert pin_problems(STABLE, lock, str(path), "stable") == []
    assert coverage(lock, STABLE["python"], "2.35") == {"x86_64": [], "aarch64": []}
    files, _ = select(lock, "x86_64", "3.11", "2.36")
    names = {item["name"] for item in files}
    assert {"torch", "sglang", "flashinfer-python", "sglang-kernel", "uv"} <= names
    assert all(len(item["sha256"]) == 64 and item["url"].startswith("https://") for item in files)


def test_coverage_header_names_platforms_and_each_missing_wheel():
    assert coverage_header({"x86_64": [], "aarch64": []}, "3.11", "2.35") == (
        "# Platforms: Linux x86_64 complete; Linux aarch64 complete (CPython 3.11, glibc >= 2.35).\n"
    )
    assert coverage_header({"x86_64": [], "aarch64": ["z 1: no wheel", "y 2: no wheel"]}, "3.12", "2.28") == (
        "# Platforms: Linux x86_64 complete; Linux aarch64 INCOMPLETE (CPython 3.12, glibc >= 2.28).\n"
        "# no wheel: z 1: no wheel\n"
        "# no wheel: y 2: no wheel\n"
    )


def test_render_lock_is_a_pep_751_lock_that_reads_back(tmp_path):
    dists = [
        {
            "name": "six",
            "version": "1.17.0",
            "wheels": [{"file": "six-1.17.0-py3-none-any.whl", "sha256": "5" * 64}],
        },
        {
            "name": "sglang-kernel",
            "version": "0.4.10",
            "wheels": [{"file": "sglang_kernel-0.4.10-1abc-cp310-abi3-linux_x86_64.whl", "sha256": "6" * 64}],
        },
        {"name": "pip", "version": "25.0", "wheels": []},
    ]
    urls = {"six-1.17.0-py3-none-any.whl": "https://files.example/six-1.17.0-py3-none-any.whl"}
    text = render_lock(
        dists, requires_python="==3.11.*", urls=urls, header=["captured from gpu-1", 'with "quotes"']
    )
    assert text.startswith(
        '# captured from gpu-1\n# with "quotes"\n# not in this lock (no wheel of it was kept): '
        'pip==25.0\nlock-version = "1.0"\n'
    )
    path = tmp_path / "pylock.good.toml"
    path.write_text(text)
    lock, _ = read_lock(str(path))
    assert lock["requires-python"] == "==3.11.*"
    assert lock["created-by"] == "sglang-fleet snapshot"
    assert [p["name"] for p in lock["packages"]] == ["six", "sglang-kernel"]
    assert lock["packages"][0]["wheels"] == [
        {
            "name": "six-1.17.0-py3-none-any.whl",
            "url": urls["six-1.17.0-py3-none-any.whl"],
            "hashes": {"sha256": "5" * 64},
        }
    ]
    assert lock["packages"][1]["wheels"][0]["path"] == "sglang_kernel-0.4.10-1abc-cp310-abi3-linux_x86_64.whl"
    files, problems = select(lock, "x86_64", "3.11", "2.36")
    assert problems == []
    assert [item["filename"] for item in files] == [  # sorted by canonical name
        "sglang_kernel-0.4.10-1abc-cp310-abi3-linux_x86_64.whl",
        "six-1.17.0-py3-none-any.whl",
    ]


def test_render_lock_without_requires_python_or_header():
    text = render_lock(
        [{"name": "a", "version": "1", "wheels": [{"file": "a-1-py3-none-any.whl", "sha256": "1"}]}]
    )
    assert text.splitlines()[:3] == ['lock-version = "1.0"', 'created-by = "sglang-fleet snapshot"', ""]
    assert "requires-python" not in text


def test_wheel_urls_of_a_lock():
    assert wheel_urls(lock_of(SIX, package("x", "1", [{"path": "x-1-py3-none-any.whl", "hashes": {}}]))) == {
        "six-1.17.0-py2.py3-none-any.whl": "https://files.example/six-1.17.0-py2.py3-none-any.whl"
    }
    assert wheel_urls({"packages": [{"name": "y"}]}) == {}
