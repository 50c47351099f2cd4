"""module_utils/wheel_cache: lock parsing, which pins a wheel cache lacks, pip's download requirements."""

from __future__ import annotations

import pytest
from ansible.module_utils.wheel_cache import (
    LockError,
    download_requirements,
    missing_pins,
    parse_lock,
    wheel_key,
)

LOCK = """--index-url https://pypi.org/simple
--extra-index-url https://download.pytorch.org/whl/cu130
--find-links http://192.168.7.1:8000/

filelock==4.3.1
Jinja2==3.1.6
torch==2.14.1+cu130
typing-extensions==4.16.0
"""


def test_parse_lock():
    options, pins = parse_lock(LOCK)
    assert options == ["--index-url https://pypi.org/simple",
                       "--extra-index-url https://download.pytorch.org/whl/cu130",
                       "--find-links http://192.168.7.1:8000/"]
    assert pins == [("filelock", "4.3.1"), ("jinja2", "3.1.6"), ("torch", "2.14.1+cu130"),
                    ("typing-extensions", "4.16.0")]


@pytest.mark.parametrize("line", ["torch>=2.14", "-e ./local", "torch==",
                                  "torch==2.14.1 ; python_version<'3.12'"])
def test_parse_lock_rejects_what_is_not_an_exact_pin(line):
    with pytest.raises(LockError, match="lock:1"):
        parse_lock(line + "\n")


@pytest.mark.parametrize(("name", "key"), [
    ("torch-2.14.1-cp311-cp311-manylinux_2_28_x86_64.whl", ("torch", "2.14.1", "manylinux_2_28_x86_64")),
    ("typing_extensions-4.16.0-py3-none-any.whl", ("typing-extensions", "4.16.0", "any")),
    ("pkg-1.0-1build-py3-none-any.whl", ("pkg", "1.0", "any")),
    ("torch-2.14.1.tar.gz", None),
    ("broken.whl", None),
])
def test_wheel_key(name, key):
    assert wheel_key(name) == key


CACHED = [
    "filelock-4.3.1-py3-none-any.whl",
    "torch-2.14.1+cu130-cp311-cp311-manylinux_2_28_x86_64.whl",
    "jinja2-3.1.5-py3-none-any.whl",                              # another version
    "typing_extensions-4.16.0-py3-none-any.whl",
]


@pytest.mark.parametrize(("pins", "cached", "machine", "missing"), [
    ([("filelock", "4.3.1"), ("jinja2", "3.1.6")], CACHED, "x86_64", ["jinja2==3.1.6"]),
    ([("torch", "2.14.1+cu130")], CACHED, "x86_64", []),
    ([("torch", "2.14.1")], CACHED, "x86_64", []),                  # a pin without local tag: any build
    ([("torch", "2.14.1+cu128")], CACHED, "x86_64", ["torch==2.14.1+cu128"]),
    ([("torch", "2.14.1+cu130")], CACHED, "aarch64", ["torch==2.14.1+cu130"]),  # another platform
    ([("typing-extensions", "4.16.0")], CACHED, "aarch64", []),      # pure Python: any platform
    ([("filelock", "4.3.1")], [], "x86_64", ["filelock==4.3.1"]),
])
def test_missing_pins(pins, cached, machine, missing):
    assert missing_pins(pins, cached, machine) == missing


def test_download_requirements_use_the_lock_sources_and_trust_plain_http():
    options, _ = parse_lock(LOCK)
    text = download_requirements(options, ["torch==2.14.1+cu130"])
    assert text.splitlines() == [*options, "--trusted-host 192.168.7.1:8000", "torch==2.14.1+cu130"]


def test_download_requirements_without_an_index():
    options, _ = parse_lock(LOCK)
    lines = download_requirements(options, ["filelock==4.3.1"], no_index=True).splitlines()
    assert lines == ["--find-links http://192.168.7.1:8000/", "--no-index", "--trusted-host 192.168.7.1:8000",
                     "filelock==4.3.1"]
