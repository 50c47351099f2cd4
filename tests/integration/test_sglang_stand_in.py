"""The stand-in model server's kept parser answers (tests/stand_ins/sglang-server,
SGLANG_STAND_IN_PARSE_CACHE): the first start of a command line parses it with the real sglang 0.5.23
parser and keeps the answer, a later start with the same command line, environment and install reuses
it (no torch import) and serves the same, also from another stack (another environment directory) with
the same sglang and torch, but not from one whose sglang differs; another command line is parsed again;
a refused one is never kept and is refused at every start; without the variable nothing is kept."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from processes import free_port
from sglang_parser import KEEP_PARSE, parser_python

pytestmark = pytest.mark.integration

KEPT = "kept from an earlier start"
KEY = "sk-stand-in-test"


def _get(port: int, path: str, key: str | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=3) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _serve(home: Path, argv: list[str], port: int, env: dict, python: Path | None = None) -> tuple[str, dict]:
    """Start the stand-in, wait until it is ready, read what it serves, stop it: (its log, answers)."""
    proc = subprocess.Popen([str(python or parser_python()), "-m", "sglang_server_stand_in", *argv],
                            env={**os.environ, "HOME": str(home), "SGLANG_STAND_IN_DELAY": "0", **env},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while True:
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the stand-in was not ready within 120 s"
            try:
                if _get(port, "/ready")[0] == 200:
                    break
            except OSError:
                pass
            time.sleep(0.2)
        answers = {"no key": _get(port, "/v1/models"), "key": _get(port, "/v1/models", KEY),
                   "info": _get(port, "/server_info", KEY)}
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    return out, answers


def test_an_accepted_command_line_is_parsed_once_and_its_answer_reused(tmp_path):
    port = free_port()
    argv = ["--model-path", "/models/stand-in", "--port", str(port), "--tp-size", "1", "--api-key", KEY]
    first, served = _serve(tmp_path, argv, port, KEEP_PARSE)
    assert KEPT not in first
    kept = list((tmp_path / KEEP_PARSE["SGLANG_STAND_IN_PARSE_CACHE"]).iterdir())
    assert len(kept) == 1, kept
    assert kept[0].stat().st_mode & 0o777 == 0o600  # it holds the API key
    assert json.loads(kept[0].read_text())["api_key"] == KEY

    again, served_again = _serve(tmp_path, argv, port, KEEP_PARSE)
    assert KEPT in again
    assert served_again == served
    assert served["no key"][0] == 401
    assert served["key"][0] == 200
    assert served["key"][1]["data"][0]["id"] == "/models/stand-in"
    assert served["info"][1]["tp_size"] == 1

    # another command line (another port) is parsed again and kept beside the first
    other = free_port()
    third, _ = _serve(tmp_path, [*argv[:3], str(other), *argv[4:]], other, KEEP_PARSE)
    assert KEPT not in third
    assert len(list((tmp_path / KEEP_PARSE["SGLANG_STAND_IN_PARSE_CACHE"]).iterdir())) == 2


def test_a_refused_command_line_is_refused_at_every_start_and_nothing_kept_without_the_variable(tmp_path):
    python = str(parser_python())
    env = {**os.environ, "HOME": str(tmp_path), **KEEP_PARSE}
    for _ in range(2):
        argv = ["--model-path", "/m", "--no-such-flag"]
        proc = subprocess.run([python, "-m", "sglang_server_stand_in", *argv], env=env, capture_output=True,
                              text=True, timeout=300, check=False)
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert "unrecognized arguments: --no-such-flag" in proc.stderr
    assert list(tmp_path.rglob("*.json")) == []

    port = free_port()
    home = tmp_path / "plain"
    home.mkdir()
    out, served = _serve(home, ["--model-path", "/m", "--port", str(port), "--api-key", KEY], port, {})
    assert served["key"][0] == 200
    assert KEPT not in out
    assert list(home.iterdir()) == []


def _other_stack(root: Path, record_suffix: str | None = None) -> Path:
    """Python of a new environment directory that imports the parser venv's packages (a .pth file), as a
    new stack holding the same sglang and torch does; with ``record_suffix`` its own copy of sglang's
    dist-info, whose RECORD differs (what another sglang build would have), is found first."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    python = root / "bin" / "python"
    purelib = [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
    site = Path(subprocess.run(purelib, check=True, capture_output=True, text=True).stdout.strip())
    parser_site = Path(subprocess.run([str(parser_python()), *purelib[1:]], check=True, capture_output=True,
                                      text=True).stdout.strip())
    (site / "parser.pth").write_text(f"{parser_site}\n")
    if record_suffix is not None:
        [info] = parser_site.glob("sglang-*.dist-info")
        copy = site / info.name
        copy.mkdir()
        for name in ("METADATA", "RECORD"):
            (copy / name).write_bytes((info / name).read_bytes())
        with open(copy / "RECORD", "a", encoding="utf-8") as record:
            record.write(record_suffix)
    return python


def test_a_new_stack_with_the_same_sglang_reuses_the_answer_and_another_sglang_does_not(tmp_path):
    port = free_port()
    argv = ["--model-path", "/models/stand-in", "--port", str(port), "--api-key", KEY]
    first, _ = _serve(tmp_path, argv, port, KEEP_PARSE)
    assert KEPT not in first

    same = _other_stack(tmp_path / "stack-b")
    again, served = _serve(tmp_path, argv, port, KEEP_PARSE, python=same)
    assert KEPT in again, again[-3000:]
    assert served["key"][0] == 200
    assert served["key"][1]["data"][0]["id"] == "/models/stand-in"

    other = _other_stack(tmp_path / "stack-c", record_suffix="sglang/extra.py,sha256=x,1\n")
    third, served = _serve(tmp_path, argv, port, KEEP_PARSE, python=other)
    assert KEPT not in third, third[-3000:]
    assert served["key"][0] == 200
    assert len(list((tmp_path / KEEP_PARSE["SGLANG_STAND_IN_PARSE_CACHE"]).iterdir())) == 2
