"""Where CI time goes: the per-stage summary of `make test`, and `.ci/run` timed on clean clones.

    .venv/bin/python bench/ci_timing.py summary [DIR]          # what `make test` prints at its end
    .venv/bin/python bench/ci_timing.py parse LOG...           # figures of existing .ci/run logs
    sudo .venv/bin/python bench/ci_timing.py compare REV_A REV_B [--modes cold,warm]

`make test` times each stage with `time STAGE -- COMMAND` (lint = ruff + ansible-lint, syntax = the
syntax-check of every playbook, then its pytest runs: `pytest` for the unit and integration tests,
`pytest-fleet` for the fleet tests) into DIR (default .cache/ci-timing/), and each pytest run NAME writes
each test's seconds there as NAME-report.json (`--timing-json`, tests/conftest.py). `summary` adds the runs
up (runs that overlapped count once in the total: `time` records when each started) and splits
their time by stage: fleet = tests/integration/fleet/ and tests/molecule/, integration = the
rest of tests/integration/, unit = tests/unit/; what no test accounts for (start-up, collection,
session-fixture teardown) is its own row. `time` ends with a line naming the stage, its exit status, seconds
and CPU seconds; `parse` adds up the pytest counts of each pytest run it names. The summary also lists the
tests that used the most CPU seconds (their processes on this machine; a fleet host's are not counted), and
the machine's CPU seconds over each pytest run: busy, idle, waiting on I/O, stolen (CPU-bound, or waiting?).

A stage's CPU seconds are those of the processes its command started and waited for, theirs in turn
included (getrusage RUSAGE_CHILDREN): the fleet's hosts count (each host's processes are waited for by
its init, init by systemd-nspawn, nspawn by the test's launcher), a daemon that outlives its parent does
not (ssh's ControlPersist master). On a CPU-bound run they say more than wall time, which moves with
whatever else the machine runs: seconds over CPU seconds is the cores the stage kept busy.

`compare` clones each revision into a fresh directory (`git clone`, so only committed work counts),
runs its `.ci/run`, and prints the runs side by side: wall time, the pytest counts from its closing
line, the stage totals of its summary. cold = `$SGLANG_FLEET_CACHE` pointed at a new empty directory;
warm = the cache the same revision's cold run just filled (or, without a cold run, the current
`$SGLANG_FLEET_CACHE` / ~/.cache/sglang-fleet as it is). One run each; a full run takes most of an hour.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DIR = Path(".cache") / "ci-timing"
STAGES = ("lint", "syntax", "unit", "integration", "fleet")
PYTEST_STAGES = ("unit", "integration", "fleet")
SUMMARY_TITLE = "make test: seconds per stage"
SLOWEST = 10

# pytest's closing line: "==== 2 failed, 1827 passed, 3 skipped in 3540.12s (0:59:00) ====".
CLOSING = re.compile(r"^=+ (?P<counts>.*?) in (?P<seconds>[\d.]+)s(?: \([\d:]+\))? =+$")
COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected|warnings?|rerun)\b")
CI_ENDED = re.compile(r"^ci: make test (passed in|failed \(exit \d+\) after) (\d+) s(?:; .*)?$")
STAGE_ENDED = re.compile(r"^ci_timing: (?P<stage>\S+) ended: exit \d+ after [\d.]+ s(?:, .*)?$")
MAKE_FAILED = re.compile(r"^make: \*\*\* .*Error \d+")
STAGE_ROW = re.compile(r"^\s*(" + "|".join(STAGES) + r")\s+(\d+\.\d) s\b")
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def stage_of(nodeid: str) -> str:
    """The stage a test belongs to, from its node id (relative to the repository root)."""
    if nodeid.startswith(("tests/integration/fleet/", "tests/molecule/")):
        return "fleet"
    if nodeid.startswith("tests/integration/"):
        return "integration"
    if nodeid.startswith("tests/unit/"):
        return "unit"
    return "other"


# --- make test: time each stage, then summarise -------------------------------------------------------

def _children_cpu() -> float:
    """CPU seconds (user + system) of this process's children that have been waited for, and of theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_command(directory: Path, stage: str, command: Sequence[str]) -> int:
    """Run ``command``, record its wall time, CPU seconds and exit status as DIR/STAGE.json, return its
    status."""
    cpu_before = _children_cpu()
    started, started_at = time.monotonic(), time.time()
    # Ctrl-C reaches the command (the terminal signals the whole process group) and it stops the way it
    # does on its own (pytest tears its fleets down); this process waits for it instead of killing it
    # 0.25 s later, as subprocess.run does on KeyboardInterrupt. A handler, unlike SIG_IGN, is reset to
    # the default in the command: started in the background by a shell without job control (`... &` in a
    # make recipe), this process inherits SIGINT ignored, and so would the command.
    previous = signal.signal(signal.SIGINT, _wait_for_the_command)
    try:
        status = subprocess.run(list(command), check=False).returncode
    except OSError as error:
        print(f"ci_timing: cannot run {command[0]}: {error}", file=sys.stderr)
        status = 127
    finally:
        signal.signal(signal.SIGINT, previous)
    if status < 0:  # killed by a signal: report it the way a shell would
        status = 128 - status
    seconds = round(time.monotonic() - started, 3)
    cpu_seconds = round(_children_cpu() - cpu_before, 3)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{stage}.json").write_text(json.dumps(
        {"stage": stage, "seconds": seconds, "status": status, "cpu_seconds": cpu_seconds,
         "started_at": round(started_at, 3)}) + "\n")
    print(f"ci_timing: {stage} ended: exit {status} after {seconds:.1f} s, CPU {cpu_seconds:.1f} s"
          f"{_cores(cpu_seconds, seconds)}", flush=True)
    return status


def _wait_for_the_command(_signum, _frame) -> None:
    """SIGINT while a timed command runs: the command got it too; its exit ends the wait."""


def _cores(cpu_seconds: float, seconds: float) -> str:
    return f" ({cpu_seconds / seconds:.2f} cores)" if seconds > 0 else ""


def cpu_rows(directory: Path) -> List[str]:
    """One row per timed command that recorded its CPU seconds (lint, syntax, each pytest run), in the
    order they ran; none for records written before CPU was recorded."""
    rows = []
    for stage in ("lint", "syntax", *pytest_runs(directory)):
        record = _read_json(directory / f"{stage}.json")
        if record is not None and "cpu_seconds" in record:
            rows.append(f"  {stage:<13}{record['cpu_seconds']:>8.1f} s  in {record['seconds']:.1f} s"
                        f"{_cores(record['cpu_seconds'], record['seconds'])}")
    return rows


def machine_rows(directory: Path) -> List[str]:
    """One row per pytest run whose report has the machine's CPU over the run (tests/conftest.py): the
    seconds its cores were busy, idle, idle waiting on I/O and stolen by the hypervisor."""
    rows = []
    for name in pytest_runs(directory):
        machine = (_read_json(directory / f"{name}-report.json") or {}).get("machine_cpu")
        if machine:
            rows.append(f"  {name:<13}{machine['busy']:>8.1f} s busy, {machine['idle']:.1f} idle, "
                        f"{machine['iowait']:.1f} waiting on I/O, {machine['steal']:.1f} stolen "
                        f"({machine['cores']} cores)")
    return rows


def pytest_runs(directory: Path) -> List[str]:
    """The pytest runs recorded in DIR, in the order they started: NAME.json (the timed command) and/or
    NAME-report.json (its per-test report), NAME being pytest or pytest-SOMETHING."""
    names = {path.name[:-len("-report.json")] if path.name.endswith("-report.json") else path.stem
             for path in directory.glob("pytest*.json")}
    return sorted((name for name in names if name == "pytest" or name.startswith("pytest-")),
                  key=lambda name: (name != "pytest", name))


def _read_json(path: Path) -> Optional[dict]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


def stage_totals(directory: Path) -> Dict[str, dict]:
    """Seconds, test count and failures per stage; a stage that did not run is absent."""
    totals: Dict[str, dict] = {}
    for stage in ("lint", "syntax"):
        record = _read_json(directory / f"{stage}.json")
        if record is not None:
            totals[stage] = {"seconds": record["seconds"], "status": record["status"]}
    wall_total = accounted = collect = session_teardown = 0.0
    status, reported, spans = 0, False, []
    for name in pytest_runs(directory):
        report = _read_json(directory / f"{name}-report.json")
        run = _read_json(directory / f"{name}.json")
        wall = run["seconds"] if run is not None else (report or {}).get("wall_seconds", 0.0)
        wall_total += wall
        started = run is not None and "started_at" in run
        spans.append((run["started_at"], run["started_at"] + wall) if started else None)
        status = status or (run["status"] if run is not None else (report or {}).get("exitstatus", 0))
        if report is None:  # pytest ran but wrote no report (killed, or failed before its session)
            continue
        reported = True
        run_accounted = 0.0
        for test in report["tests"]:
            seconds = test["setup"] + test["call"] + test["teardown"]
            run_accounted += seconds
            stage = totals.setdefault(stage_of(test["nodeid"]), {"seconds": 0.0, "tests": 0, "failed": 0})
            stage["seconds"] += seconds
            stage["tests"] += 1
            stage["failed"] += test["outcome"] in ("failed", "error")
        for nodeid in report["collect_errors"]:  # a module that failed to import: its tests never ran
            stage = totals.setdefault(stage_of(nodeid), {"seconds": 0.0, "tests": 0, "failed": 0})
            stage["failed"] += 1
        # xdist: the tests' seconds may add up to more than the run's wall time
        accounted += min(run_accounted, wall)
        collect += report["collect_seconds"]
        session_teardown += report["session_teardown_seconds"]
    if pytest_runs(directory):
        # runs that overlapped (started side by side) count once: the time any of them ran; records
        # without their start (older ones) add up
        seconds = wall_total if None in spans else _covered(spans)
        totals["pytest"] = {"seconds": round(seconds, 3), "status": status}
    if reported:
        totals["pytest other"] = {"seconds": max(wall_total - accounted, 0.0), "collect": collect,
                                  "session_teardown": session_teardown}
    return totals


def _covered(spans: Sequence[Tuple[float, float]]) -> float:
    """Seconds covered by the union of the (start, end) spans."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(spans):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def _reports(directory: Path) -> List[dict]:
    return [report for name in pytest_runs(directory)
            for report in [_read_json(directory / f"{name}-report.json")] if report is not None]


def slowest_tests(directory: Path, count: int = SLOWEST) -> List[dict]:
    tests = [test for report in _reports(directory) for test in report["tests"]]
    for test in tests:
        test["seconds"] = test["setup"] + test["call"] + test["teardown"]
    return sorted(tests, key=lambda test: (-test["seconds"], test["nodeid"]))[:count]


def most_cpu_tests(directory: Path, count: int = SLOWEST) -> List[dict]:
    """The ``count`` tests that used the most CPU seconds (tests/conftest.py TestCPU); none from reports
    written before tests' CPU was recorded."""
    tests = [test for report in _reports(directory) for test in report["tests"] if "cpu_seconds" in test]
    return sorted(tests, key=lambda test: (-test["cpu_seconds"], test["nodeid"]))[:count]


def render_summary(directory: Path) -> str:
    totals = stage_totals(directory)
    lines = [SUMMARY_TITLE, f"  {'stage':<13}{'seconds':>10}  {'tests':>6}  {'failed':>6}"]
    for stage in (*STAGES, "other"):
        row = totals.get(stage)
        if row is None:
            if stage != "other":  # tests outside unit/ and integration/ only get a row when there are any
                lines.append(f"  {stage:<13}{'not run':>10}")
        elif "tests" in row:
            lines.append(f"  {stage:<13}{row['seconds']:>8.1f} s  {row['tests']:>6}  {row['failed']:>6}")
        else:
            lines.append(f"  {stage:<13}{row['seconds']:>8.1f} s" + (f"  failed (exit {row['status']})"
                                                                     if row["status"] else ""))
    if "pytest other" in totals:
        other = totals["pytest other"]
        lines.append(f"  {'pytest other':<13}{other['seconds']:>8.1f} s  (start-up, collection "
                     f"{other['collect']:.1f} s, session fixtures' teardown "
                     f"{other['session_teardown']:.1f} s)")
    elif "pytest" in totals:
        lines.append(f"  pytest ran {totals['pytest']['seconds']:.1f} s, exit {totals['pytest']['status']}, "
                     "and wrote no per-test report")
    total = sum(totals[stage]["seconds"] for stage in ("lint", "syntax", "pytest") if stage in totals)
    lines.append(f"  {'total':<13}{total:>8.1f} s")
    cpu = cpu_rows(directory)
    if cpu:
        lines.append("CPU seconds of each timed command (its processes, the fleet's hosts too):")
        lines += cpu
    machine = machine_rows(directory)
    if machine:
        lines.append("the machine's CPU seconds while each pytest run ran (all its processes; /proc/stat):")
        lines += machine
    slowest = slowest_tests(directory)
    if slowest:
        lines.append("slowest tests (setup + call + teardown):")
        lines += [f"  {test['seconds']:>8.1f} s  {stage_of(test['nodeid']):<11}  {test['nodeid']}"
                  + ("" if test["outcome"] == "passed" else f"  [{test['outcome']}]") for test in slowest]
    most_cpu = most_cpu_tests(directory)
    if most_cpu:
        lines.append("most CPU (setup + call + teardown: the test's processes on this machine, not a fleet "
                     "host's):")
        lines += [f"  {test['cpu_seconds']:>8.1f} s  {stage_of(test['nodeid']):<11}  {test['nodeid']}"
                  for test in most_cpu]
    drops = disk_drops(directory)
    if drops:
        lines.append("the free disk fell most while these ran (GiB, summed over the run):")
        lines += [f"  {gb:>8.1f}  {running}" for running, gb in drops]
    disk = disk_line(directory)
    if disk:
        lines.append(disk)
    return "\n".join(lines)


def disk_drops(directory: Path, count: int = 5) -> list:
    """[(the tests running, GiB the free disk fell while they ran)], the ``count`` largest falls, from the
    reports' disk traces (tests/conftest.py: a point each time the free disk moved by 1 GiB)."""
    fell: dict = {}
    for report in _reports(directory):
        trace = report.get("disk_trace") or []
        for (_t0, before, _r0), (_t1, after, running) in zip(trace, trace[1:]):
            if after < before:
                fell[running] = fell.get(running, 0.0) + before - after
    largest = sorted(fell.items(), key=lambda item: -item[1])[:count]
    return [(running, round(gb, 1)) for running, gb in largest]


def disk_line(directory: Path) -> str:
    """The free disk pytest saw (tests/conftest.py samples it every few seconds): at the start, the
    least and during which test, at the end. Empty when the report has no disk record."""
    disks = [report["disk"] for report in _reports(directory) if report.get("disk")]
    if not disks:
        return ""
    least = min(disks, key=lambda disk: disk["least_free_gb"])
    line = (f"disk free on {disks[0]['path']}: {disks[0]['start_free_gb']:.1f} GiB at the start, "
            f"least {least['least_free_gb']:.1f} GiB (during {least['least_during']})")
    if "end_free_gb" in disks[-1]:
        line += f", {disks[-1]['end_free_gb']:.1f} GiB at the end"
    return line


# --- .ci/run logs --------------------------------------------------------------------------------------

def parse_log(text: str) -> dict:
    """Figures of one .ci/run log: result, wall time, pytest's counts and time, stage totals."""
    figures: dict = {"result": "unfinished", "ci_seconds": None, "pytest_seconds": None, "counts": None,
                     "stages": {}}
    in_summary = False
    # The last closing line before a pytest run's "ci_timing: NAME ended" line is that run's own (a test's
    # captured output comes earlier); the runs' figures add up. A log without such lines (an older
    # make test) has one pytest run: its last closing line.
    last: Optional[Tuple[Dict[str, int], float]] = None
    summed: Optional[Tuple[Dict[str, int], float]] = None
    for raw in text.splitlines():
        line = ANSI.sub("", raw).rstrip()
        closing = CLOSING.match(line)
        stage_ended = STAGE_ENDED.match(line)
        if closing:
            counts: Dict[str, int] = {}
            for number, word in COUNT.findall(closing["counts"]):
                kind = {"error": "errors", "warning": "warnings"}.get(word, word)
                counts[kind] = counts.get(kind, 0) + int(number)
            last = (counts, float(closing["seconds"]))
        elif stage_ended and stage_ended["stage"].startswith("pytest") and last is not None:
            total = dict(summed[0]) if summed else {}
            for kind, number in last[0].items():
                total[kind] = total.get(kind, 0) + number
            summed, last = (total, (summed[1] if summed else 0.0) + last[1]), None
        elif CI_ENDED.match(line):
            ended = CI_ENDED.match(line)
            figures["result"] = "passed" if ended[1] == "passed in" else "failed"
            figures["ci_seconds"] = int(ended[2])
        elif MAKE_FAILED.match(line):
            figures["result"] = "failed"
        elif line == SUMMARY_TITLE:
            in_summary, figures["stages"] = True, {}
        elif in_summary:
            row = STAGE_ROW.match(line)
            if row:
                figures["stages"][row[1]] = float(row[2])
            elif not line.startswith("  "):
                in_summary = False
    if summed is not None and last is not None:  # a pytest run that never ended (killed): count it too
        summed = ({kind: summed[0].get(kind, 0) + last[0].get(kind, 0) for kind in {*summed[0], *last[0]}},
                  summed[1] + last[1])
    figures["counts"], figures["pytest_seconds"] = summed or last or (None, None)
    return figures


def _cell(value) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def render_table(columns: Sequence[str], runs: Sequence[dict]) -> str:
    """The figures of several runs side by side, one column per run."""
    rows = [("result", [run["result"] for run in runs]),
            ("wall (s)", [run.get("wall_seconds", run["ci_seconds"]) for run in runs]),
            ("pytest (s)", [run["pytest_seconds"] for run in runs])]
    for kind in ("passed", "failed", "errors", "skipped"):
        rows.append((kind, [None if run["counts"] is None else run["counts"].get(kind, 0) for run in runs]))
    for stage in STAGES:
        if any(stage in run["stages"] for run in runs):
            rows.append((f"{stage} (s)", [run["stages"].get(stage) for run in runs]))
    width = max(12, *(len(column) + 2 for column in columns))
    lines = [f"{'':<12}" + "".join(f"{column:>{width}}" for column in columns)]
    lines += [f"{label:<12}" + "".join(f"{_cell(value):>{width}}" for value in values)
              for label, values in rows]
    return "\n".join(lines)


# --- .ci/run on clean clones ---------------------------------------------------------------------------

def run_ci(repo: Path, revision: str, workdir: Path, label: str, cache: Path) -> dict:
    """Clone ``revision`` of ``repo`` into WORKDIR/LABEL, run its .ci/run with ``cache`` as
    $SGLANG_FLEET_CACHE, log to WORKDIR/LABEL.log; the log's figures plus the measured wall time."""
    clone = workdir / label
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(repo), str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "checkout", "--quiet", "--detach", revision], check=True)
    log = workdir / f"{label}.log"
    env = {**os.environ, "SGLANG_FLEET_CACHE": str(cache)}
    print(f"ci_timing: {label}: .ci/run of {revision} in {clone}, cache {cache}, log {log}", flush=True)
    started = time.monotonic()
    with log.open("w") as output:
        status = subprocess.run([str(clone / ".ci" / "run")], cwd=clone, env=env, stdout=output,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, check=False).returncode
    figures = parse_log(log.read_text(errors="replace"))
    figures["wall_seconds"] = round(time.monotonic() - started, 1)
    if status != 0:
        figures["result"] = f"exit {status}"
    print(f"ci_timing: {label}: {figures['result']} in {figures['wall_seconds']:.1f} s", flush=True)
    return figures


def compare(repo: Path, revisions: Sequence[str], modes: Sequence[str], workdir: Path) -> str:
    columns, runs = [], []
    for index, revision in enumerate(revisions):
        short = subprocess.run(["git", "-C", str(repo), "rev-parse", "--short", revision], check=True,
                               capture_output=True, text=True).stdout.strip()
        filled = None
        for mode in modes:
            if mode == "cold":
                cache = filled = Path(tempfile.mkdtemp(prefix=f"cache-{index}-", dir=workdir))
            else:
                cache = filled or Path(os.environ.get("SGLANG_FLEET_CACHE")
                                       or Path.home() / ".cache" / "sglang-fleet")
            label = f"{short} {mode}"
            runs.append(run_ci(repo, revision, workdir, f"{index}-{short}-{mode}", cache))
            columns.append(label)
    return render_table(columns, runs)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    timed = commands.add_parser("time", help="run COMMAND, record its wall time as DIR/STAGE.json",
                                usage="ci_timing.py time [--dir DIR] STAGE -- COMMAND [ARG...]")
    timed.add_argument("stage")
    timed.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    summary = commands.add_parser("summary", help="seconds per stage and the slowest tests of a make test")
    summary.add_argument("dir", nargs="?", type=Path, default=DEFAULT_DIR)
    parse = commands.add_parser("parse", help="figures of existing .ci/run logs, side by side")
    parse.add_argument("logs", nargs="+", type=Path)
    comparing = commands.add_parser("compare", help=".ci/run of each revision on a clean clone, side by side")
    comparing.add_argument("revisions", nargs="+")
    comparing.add_argument("--repo", type=Path, default=REPO_ROOT)
    comparing.add_argument("--modes", default="cold,warm", help="comma-separated, in order: cold, warm")
    comparing.add_argument("--workdir", type=Path, help="where clones, caches and logs go (kept)")
    argv = list(sys.argv[1:] if argv is None else argv)
    command = argv[argv.index("--") + 1:] if "--" in argv else []
    args = parser.parse_args(argv[:len(argv) - len(command) - ("--" in argv)])

    if args.command == "time":
        if not command:
            parser.error("time: no command given (time STAGE -- COMMAND ...)")
        return time_command(args.dir, args.stage, command)
    if command:
        parser.error(f"{args.command}: unexpected arguments after --: {' '.join(command)}")
    if args.command == "summary":
        print(render_summary(args.dir))
        return 0
    if args.command == "parse":
        runs = [parse_log(path.read_text(errors="replace")) for path in args.logs]
        print(render_table([path.name for path in args.logs], runs))
        return 0
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - {"cold", "warm"})
    if unknown:
        parser.error(f"--modes: unknown mode {', '.join(unknown)} (use cold, warm)")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="ci-timing-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(compare(args.repo.resolve(), args.revisions, modes, workdir.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
