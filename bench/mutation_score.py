#!/usr/bin/env python3
"""Mutation score of every module_utils/ file against the unit suite (mutmut), per file, with survivors.

    bench/mutation_score.py run [FILE ...]     mutate each file (default: every module_utils/*.py), report
    bench/mutation_score.py report [FILE ...]  report the last run again (no mutation)

A file is mutated alone, in a fresh copy under ``.cache/mutation/<name>/``, against ``tests/unit`` only:
the unit suite is the one a developer runs, so it is the one that must catch defects. New module_utils
files are picked up by the glob. Exit status 1 when a file scores below ``--threshold`` (90%).

Layout: Ansible imports our module_utils as ``ansible.module_utils.<name>``, and mutmut names a mutant
after the path of its file, comparing that name with the function's ``__module__`` at run time. The copy
therefore holds the files at ``src/ansible/module_utils/`` (mutmut strips ``src.``), and tests/conftest.py
imports them from mutmut's mutated copy when ``SGLANG_FLEET_MODULE_UTILS`` says so. Tests that run a
module in a subprocess still see the unmutated ``module_utils/`` (they cannot kill a mutant).

Score = killed / (mutants - equivalent). "killed" includes mutants that made a test time out; a mutant no
unit test reaches ("no tests") counts as surviving. Equivalent mutants (no test can tell them apart from
the original) are listed with the reason in bench/mutation_equivalent.yml, keyed by function and the
changed line, so renumbering does not lose them.

mutmut runs in .venv's interpreter with the packages of requirements-mutation.txt on PYTHONPATH
(installed once into .cache/mutation/lib by ``make mutation``); .venv itself is not changed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".cache" / "mutation"
LIB = CACHE / "lib"
EQUIVALENT = REPO / "bench" / "mutation_equivalent.yml"
STAGED = Path("src") / "ansible" / "module_utils"
KILLED = {1, 3, 36, 24, -24, 152, 255}  # mutmut's exit codes for killed and timeout
NO_TESTS = {5, 33, None}  # None: never run (mutmut stops early when no unit test reaches the file)
SURVIVED = {0}


def module_utils_files(names: list[str]) -> list[Path]:
    every = sorted((REPO / "module_utils").glob("*.py"))
    if not every:
        sys.exit("module_utils/ holds no .py file")
    if not names:
        return every
    chosen = []
    for name in names:
        path = REPO / "module_utils" / (Path(name).stem + ".py")
        if path not in every:
            sys.exit(f"{name}: not a module_utils/ file (have: {', '.join(p.stem for p in every)})")
        chosen.append(path)
    return chosen


def project_files() -> list[str]:
    """Tracked and untracked-but-not-ignored files: what a commit would hold, as they are now."""
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                         check=True, capture_output=True).stdout.decode()
    return [f for f in out.split("\0") if f and (REPO / f).is_file()]


def stage(source: Path) -> Path:
    """A fresh copy of the project for mutating ``source``, with mutmut's configuration."""
    work = CACHE / source.stem
    shutil.rmtree(work, ignore_errors=True)
    files = project_files()
    for name in files:
        target = work / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    (work / STAGED).mkdir(parents=True)
    for path in (REPO / "module_utils").glob("*.py"):
        shutil.copy2(path, work / STAGED / path.name)
    top_level = sorted({Path(name).parts[0] for name in files} - {"pyproject.toml"})
    config = {
        "source_paths": [str(STAGED)],
        "only_mutate": [str(STAGED / source.name)],
        "pytest_add_cli_args_test_selection": ["tests/unit"],
        # hypothesis' plugin imports it at the end of every pytest run (~0.9 s of CPU per mutant); no unit
        # test uses it
        "pytest_add_cli_args": ["-p", "no:cacheprovider", "-p", "no:hypothesispytest"],
        "also_copy": top_level,
        # A mutant that makes a wait endless (a timeout or a kill removed) is killed after twice the
        # time its tests took plus 5 s, instead of mutmut's default 15x (minutes of idle waiting).
        "timeout_multiplier": 2.0,
        "timeout_constant": 5.0,
    }
    with open(work / "pyproject.toml", "a", encoding="utf-8") as handle:
        handle.write("\n[tool.mutmut]\n")
        for key, value in config.items():
            handle.write(f"{key} = {json.dumps(value)}\n")
    return work


def run_mutmut(work: Path, source: Path, children: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(LIB),
           "SGLANG_FLEET_MODULE_UTILS": str(work / "mutants" / STAGED)}
    env.pop("CI", None)  # a missing prerequisite skips instead of failing: mutmut needs a green baseline
    mutmut = [sys.executable, "-c", "import sys; from mutmut.__main__ import cli; sys.exit(cli())"]
    log = work / "mutmut.log"
    with open(log, "w", encoding="utf-8") as handle:
        proc = subprocess.run([*mutmut, "run", "--max-children", str(children)], cwd=work, env=env,
                              check=False, stdout=handle, stderr=subprocess.STDOUT)
    if os.environ.get("MUTATION_VERBOSE"):
        print(log.read_text(errors="replace"))
    if proc.returncode == 0:
        return
    # mutmut exits 1 after generating the mutants when no unit test calls any of them: every mutant
    # survives, which the report shows. Any other failure (a red baseline, a crash) leaves no result.
    if proc.returncode == 1 and "could not find any test case for any mutant" in log.read_text():
        print(f"# {source.name}: no unit test reaches any of its mutants", flush=True)
        return
    sys.exit(f"{source.name}: mutmut failed (exit {proc.returncode}); see {log.relative_to(REPO)}, or re-run "
             f"with MUTATION_VERBOSE=1")


def meta_path(work: Path, source: Path) -> Path:
    return work / "mutants" / STAGED / (source.name + ".meta")


def mutant_diff(work: Path, name: str) -> str:
    """The unified diff of one mutant against the original source (mutmut's own diff)."""
    env = {**os.environ, "PYTHONPATH": str(LIB)}
    code = ("import sys; from mutmut.__main__ import cli; sys.argv = ['mutmut', 'show', sys.argv[1]]; "
            "sys.exit(cli())")
    proc = subprocess.run([sys.executable, "-c", code, name], cwd=work, env=env, capture_output=True,
                          text=True, check=False)
    return proc.stdout.strip() or proc.stderr.strip()


def changed_lines(diff: str) -> tuple[str, str]:
    lines = diff.splitlines()
    minus = [line[1:].strip() for line in lines if line.startswith("-") and not line.startswith("---")]
    plus = [line[1:].strip() for line in lines if line.startswith("+") and not line.startswith("+++")]
    return " / ".join(minus), " / ".join(plus)


def equivalents() -> list[dict]:
    if not EQUIVALENT.exists():
        return []
    return yaml.safe_load(EQUIVALENT.read_text()) or []


def function_of(name: str) -> str:
    """``ansible.module_utils.x.x_func__mutmut_3`` -> ``x.func`` (the file stem and the function)."""
    module, _, mangled = name.rpartition(".")
    function = mangled.partition("__mutmut_")[0]
    function = function[2:] if function.startswith("x_") else function.replace("xǁ", "", 1).replace("ǁ", ".")
    return f"{module.rpartition('.')[2]}.{function}"


def is_equivalent(name: str, diff: str, known: list[dict]) -> dict | None:
    old, new = changed_lines(diff)
    for entry in known:
        if entry["function"] == function_of(name) and entry["original"] == old and entry["mutant"] == new:
            return entry
    return None


def report(source: Path, threshold: float, show_diffs: bool) -> bool:
    work = CACHE / source.stem
    meta = meta_path(work, source)
    if not meta.exists():
        print(f"{source.name:24} not run (bench/mutation_score.py run {source.stem})")
        return False
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    known = equivalents()
    killed = sorted(n for n, c in codes.items() if c in KILLED)
    alive = sorted(n for n, c in codes.items() if c not in KILLED)
    explained, survivors = [], []
    for name in alive:
        diff = mutant_diff(work, name)
        entry = is_equivalent(name, diff, known)
        (explained if entry else survivors).append((name, diff, codes[name]))
    counted = len(codes) - len(explained)
    score = 100.0 * len(killed) / counted if counted else 100.0
    verdict = "ok" if score >= threshold else f"BELOW {threshold:.0f}%"
    print(f"{source.name:24} {score:5.1f}%  killed {len(killed):3} of {counted:3}"
          f"  (survived {len(survivors)}, equivalent {len(explained)})  {verdict}")
    for name, diff, code in survivors:
        status = ("no unit test reaches it" if code in NO_TESTS else "survived" if code in SURVIVED
                  else f"exit {code}")
        print(f"    {status}: {name}")
        if show_diffs:
            old, new = changed_lines(diff)
            print(f"        - {old}\n        + {new}")
    return score >= threshold


def install() -> None:
    stamp = LIB / ".installed"
    wanted = (REPO / "requirements-mutation.txt").read_text()
    if stamp.exists() and stamp.read_text() == wanted:
        return
    shutil.rmtree(LIB, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                    "--no-deps", "--target", str(LIB),
                    "--requirement", str(REPO / "requirements-mutation.txt")],
                   check=True)
    stamp.write_text(wanted)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["run", "report"])
    parser.add_argument("files", nargs="*", help="module_utils file names (default: all)")
    parser.add_argument("--threshold", type=float, default=90.0)
    parser.add_argument("--children", type=int, default=1, help="mutants tested at once (default 1)")
    parser.add_argument("--no-diffs", action="store_true", help="list survivors without their change")
    args = parser.parse_args()
    files = module_utils_files(args.files)
    if args.action == "run":
        install()
        # Every copy is made before the first run, so that editing tests meanwhile changes no result.
        works = [stage(source) for source in files]
        for source, work in zip(files, works):
            start = time.monotonic()
            run_mutmut(work, source, args.children)
            print(f"# {source.name}: mutated and tested in {time.monotonic() - start:.0f} s", flush=True)
    ok = [report(source, args.threshold, not args.no_diffs) for source in files]
    return 0 if all(ok) else 1


if __name__ == "__main__":
    sys.exit(main())
