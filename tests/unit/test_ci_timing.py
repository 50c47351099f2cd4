"""bench/ci_timing.py: the stage summary `make test` prints, the .ci/run log parser, and compare on clean
clones (real git, a stand-in .ci/run: a full CI run takes most of an hour). cases/ci_logs/:
lint-failed.log and collection-errors.log are real output of `make test` (paths replaced);
main-cold-passed.log and branch-warm-failed.log are written in .ci/run's format, cut down, with a
colored closing line and a failure whose captured output holds another pytest's closing line."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from by_path import load

REPO_ROOT = Path(__file__).resolve().parents[2]
LOGS = Path(__file__).parent / "cases" / "ci_logs"


ci_timing = load("ci_timing", REPO_ROOT / "bench" / "ci_timing.py")


def log(name: str) -> dict:
    return ci_timing.parse_log((LOGS / name).read_text())


# --- parse -----------------------------------------------------------------------------------------------

def test_a_passed_run_gives_counts_pytest_time_and_ci_wall_time():
    figures = log("main-cold-passed.log")
    assert figures == {"result": "passed", "ci_seconds": 3541, "pytest_seconds": 3498.61,
                       "counts": {"passed": 1828, "skipped": 1}, "stages": {}}


def test_a_failed_run_takes_the_outer_closing_line_without_colours_and_the_stage_totals():
    figures = log("branch-warm-failed.log")
    # the inner "3 passed" line in a failure's captured output comes earlier and is not the result
    assert figures["counts"] == {"failed": 1, "passed": 1829, "errors": 1, "warnings": 2}
    assert figures["pytest_seconds"] == 1397.25
    assert figures["result"] == "failed"
    assert figures["ci_seconds"] == 1502
    assert figures["stages"] == {"lint": 48.3, "syntax": 11.9, "unit": 13.2, "integration": 402.7,
                                 "fleet": 979.0}


TWO_RUNS = """\
ci_timing: syntax ended: exit 0 after 15.2 s
==== 2400 passed, 3 skipped in 301.50s (0:05:01) ====
ci_timing: pytest ended: exit 0 after 303.0 s
FAILED tests/integration/fleet/test_f.py::test_rerun - AssertionError
---- Captured stdout call ----
==== 3 passed in 0.10s ====
==== 1 failed, 120 passed, 1 error in 1800.25s (0:30:00) ====
ci_timing: pytest-fleet ended: exit 1 after 1801.9 s
"""


def test_the_pytest_runs_of_one_make_test_add_up():
    figures = ci_timing.parse_log(TWO_RUNS)
    # each run's own closing line: the last before its "ended" line, not one in captured output
    assert figures["counts"] == {"passed": 2520, "skipped": 3, "failed": 1, "errors": 1}
    assert figures["pytest_seconds"] == 2101.75


def test_a_run_killed_before_it_ended_still_counts():
    killed = TWO_RUNS.rsplit("ci_timing: pytest-fleet", 1)[0]
    assert ci_timing.parse_log(killed)["counts"] == {"passed": 2520, "skipped": 3, "failed": 1, "errors": 1}
    # the end of a stage that is not a pytest run closes no run
    assert ci_timing.parse_log(TWO_RUNS.replace("pytest ended", "lint ended"))["counts"] == {
        "passed": 120, "failed": 1, "errors": 1}


def test_a_failed_lint_has_no_pytest_figures_and_only_the_stages_that_ran():
    figures = log("lint-failed.log")
    assert figures == {"result": "failed", "ci_seconds": None, "pytest_seconds": None, "counts": None,
                       "stages": {"lint": 0.2}}


def test_collection_errors_are_counted_and_the_stages_before_pytest_kept():
    figures = log("collection-errors.log")
    assert figures == {"result": "failed", "ci_seconds": None, "pytest_seconds": 2.09,
                       "counts": {"errors": 3}, "stages": {"lint": 88.4, "syntax": 15.2}}


def test_a_sub_make_failure_alone_is_not_the_runs_result():
    assert log("killed-in-fleet.log")["result"] == "unfinished"
    text = "make[1]: *** [Makefile:55: ruff] Error 1\n"
    assert ci_timing.parse_log(text)["result"] == "unfinished"
    assert ci_timing.parse_log("make: *** [Makefile:42: test] Error 2\n")["result"] == "failed"


@pytest.mark.parametrize(("line", "result", "seconds"), [
    ("ci: make test passed in 1499 s", "passed", 1499),
    ("ci: make test failed (exit 2) after 61 s", "failed", 61),
    ("ci: make test failed (exit 130) after 0 s", "failed", 0),
    ("ci: make test failed (exit 2) after 4807 s; disk: 3.1G free of 252G on /", "failed", 4807),
    ("ci: make test passed in s", "unfinished", None),
    ("ci: make test failed after 61 s", "unfinished", None),
    ("xci: make test passed in 1 s", "unfinished", None),
])
def test_the_ci_ending_line(line, result, seconds):
    figures = ci_timing.parse_log(f"ci: Python 3.11.7, 2 cores, 23 GiB\n{line}\n")
    assert (figures["result"], figures["ci_seconds"]) == (result, seconds)


def test_an_unfinished_run_has_no_counts():
    assert log("killed-in-fleet.log") == {"result": "unfinished", "ci_seconds": None, "pytest_seconds": None,
                                          "counts": None, "stages": {}}


@pytest.mark.parametrize(("line", "counts", "seconds"), [
    ("==== 3 passed in 0.51s ====", {"passed": 3}, 0.51),
    ("== 2 failed, 1 passed, 4 deselected, 1 warning in 12.00s ==", {"failed": 2, "passed": 1,
                                                                     "deselected": 4, "warnings": 1}, 12.0),
    ("=== 2 errors, 1 xfailed, 1 xpassed, 1 rerun in 61.20s (0:01:01) ===",
     {"errors": 2, "xfailed": 1, "xpassed": 1, "rerun": 1}, 61.2),
    ("==== no tests ran in 0.01s ====", {}, 0.01),
])
def test_every_form_of_the_closing_line(line, counts, seconds):
    figures = ci_timing.parse_log(f"collected 3 items\n{line}\n")
    assert (figures["counts"], figures["pytest_seconds"]) == (counts, seconds)


def test_lines_that_only_look_like_a_closing_line_are_not_one():
    for line in ("==== 3 passed in 0.51s", "3 passed in 0.51s ====", "=== test session starts ===",
                 " ==== 3 passed in 0.51s ===="):
        assert ci_timing.parse_log(line + "\n")["counts"] is None, line


def test_the_stage_block_ends_at_the_first_line_not_in_it():
    text = ("make test: seconds per stage\n  lint  1.5 s\nsomething else\n  unit  9.0 s\n"
            "make test: seconds per stage\n  fleet  2.0 s\n")
    # a second summary (a rerun in the same log) replaces the first
    assert ci_timing.parse_log(text)["stages"] == {"fleet": 2.0}
    assert ci_timing.parse_log(text.rsplit("make test", 1)[0])["stages"] == {"lint": 1.5}


def test_parse_prints_the_logs_side_by_side(capsys):
    assert ci_timing.main(["parse", str(LOGS / "main-cold-passed.log"), str(LOGS / "branch-warm-failed.log"),
                           str(LOGS / "killed-in-fleet.log")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["main-cold-passed.log", "branch-warm-failed.log", "killed-in-fleet.log"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:]}
    assert rows["result"] == ["passed", "failed", "unfinished"]
    assert rows["wall"] == ["(s)", "3541", "1502", "-"]
    assert rows["pytest"] == ["(s)", "3498.6", "1397.2", "-"]
    assert rows["passed"] == ["1828", "1829", "-"]
    assert rows["failed"] == ["0", "1", "-"]
    assert rows["errors"] == ["0", "1", "-"]
    assert rows["skipped"] == ["1", "0", "-"]
    assert rows["fleet"] == ["(s)", "-", "979.0", "-"]
    assert rows["lint"] == ["(s)", "-", "48.3", "-"]


def test_the_table_leaves_out_stages_no_run_has():
    table = ci_timing.render_table(["a"], [log("main-cold-passed.log")])
    assert "lint" not in table
    assert "passed" in table


# --- make test: time and summary ------------------------------------------------------------------------

def python(code: str) -> list:
    return [sys.executable, "-c", code]


@pytest.mark.parametrize(("command", "status"), [
    (python("pass"), 0),
    (python("import sys; sys.exit(3)"), 3),
    (python("import os, signal; os.kill(os.getpid(), signal.SIGTERM)"), 143),
    (["/nonexistent/ci-timing-command"], 127),
])
def test_time_records_the_wall_time_and_returns_the_commands_status(tmp_path, command, status):
    assert ci_timing.main(["time", "lint", "--dir", str(tmp_path / "t"), "--", *command]) == status
    record = json.loads((tmp_path / "t" / "lint.json").read_text())
    assert record["stage"] == "lint"
    assert record["status"] == status
    assert 0 <= record["seconds"] < 30


def test_time_measures_the_commands_own_duration(tmp_path):
    ci_timing.time_command(tmp_path, "syntax", python("import time; time.sleep(0.3)"))
    assert json.loads((tmp_path / "syntax.json").read_text())["seconds"] >= 0.3


def test_time_records_the_cpu_seconds_of_the_command_and_of_its_children(tmp_path, capsys):
    """A command that burns CPU in a child it waits for (about 0.4 s) and one that sleeps (none)."""
    burn = "import time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass"
    ci_timing.time_command(tmp_path, "pytest", python(
        f"import subprocess, sys; subprocess.run([sys.executable, '-c', {burn!r}], check=True)"))
    busy = json.loads((tmp_path / "pytest.json").read_text())
    assert 0.4 <= busy["cpu_seconds"] < 5
    line = capsys.readouterr().out.strip()
    assert re.fullmatch(r"ci_timing: pytest ended: exit 0 after [\d.]+ s, CPU [\d.]+ s \([\d.]+ cores\)",
                        line)
    assert ci_timing.STAGE_ENDED.match(line)["stage"] == "pytest"
    ci_timing.time_command(tmp_path, "syntax", python("import time; time.sleep(0.5)"))
    idle = json.loads((tmp_path / "syntax.json").read_text())
    assert idle["seconds"] >= 0.5
    assert idle["cpu_seconds"] < 0.4


def test_the_summary_lists_each_timed_commands_cpu_seconds_and_cores(tmp_path):
    directory = write_timing(tmp_path, lint=(40.0, 0), syntax=(10.0, 0), pytest_run=(625.0, 1),
                             report=full_report())
    for stage, cpu in (("lint", 60.0), ("pytest", 1187.5)):
        record = json.loads((directory / f"{stage}.json").read_text())
        (directory / f"{stage}.json").write_text(json.dumps({**record, "cpu_seconds": cpu}))
    summary = ci_timing.render_summary(directory).splitlines()
    start = summary.index("  total           675.0 s") + 1
    assert summary[start:start + 4] == [
        "CPU seconds of each timed command (its processes, the fleet's hosts too):",
        "  lint             60.0 s  in 40.0 s (1.50 cores)",  # syntax's record has none: no row
        "  pytest         1187.5 s  in 625.0 s (1.90 cores)",
        "slowest tests (setup + call + teardown):"]
    # a log of it still parses to the stages' seconds, not the CPU rows
    assert ci_timing.parse_log("\n".join(summary))["stages"]["lint"] == 40.0


def test_time_without_a_command_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        ci_timing.main(["time", "lint", "--dir", str(tmp_path), "--"])
    assert refused.value.code == 2
    assert "no command given" in capsys.readouterr().err
    assert not (tmp_path / "lint.json").exists()


@pytest.mark.parametrize(("nodeid", "stage"), [
    ("tests/unit/test_x.py::test_a", "unit"),
    ("tests/integration/test_preflight.py::test_a", "integration"),
    ("tests/integration/fleet/test_stack.py::test_a", "fleet"),
    ("tests/molecule/fleet/test_x.py::test_a", "fleet"),
    ("tests/integration/fleetish/test_x.py::test_a", "integration"),
    ("tests/test_top.py::test_a", "other"),
    ("unit/test_x.py::test_a", "other"),
])
def test_stage_of(nodeid, stage):
    assert ci_timing.stage_of(nodeid) == stage


def record(nodeid, outcome="passed", setup=0.0, call=0.0, teardown=0.0):
    return {"nodeid": nodeid, "outcome": outcome, "setup": setup, "call": call, "teardown": teardown}




def write_timing(directory: Path, *, lint=None, syntax=None, pytest_run=None, report=None) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for stage, record in (("lint", lint), ("syntax", syntax), ("pytest", pytest_run)):
        if record is not None:
            (directory / f"{stage}.json").write_text(json.dumps({"stage": stage, "seconds": record[0],
                                                                 "status": record[1]}))
    if report is not None:
        (directory / "pytest-report.json").write_text(json.dumps(report))
    return directory


def full_report(**changes) -> dict:
    tests = [record(f"tests/unit/test_u.py::test_{n}", call=0.5) for n in range(12)]
    tests += [record("tests/integration/test_i.py::test_slow", setup=1.0, call=30.0, teardown=2.0),
              record("tests/integration/test_i.py::test_broken", "error", setup=4.0),
              record("tests/integration/fleet/test_f.py::test_site", setup=300.0, call=120.0),
              record("tests/integration/fleet/test_f.py::test_rerun", "failed", call=60.0, teardown=5.0),
              record("tests/molecule/fleet/test_m.py::test_converge", call=90.0)]
    return {"wall_seconds": 620.0, "collect_seconds": 1.5, "session_teardown_seconds": 3.0, "exitstatus": 1,
            "collect_errors": [], "tests": tests, **changes}


def test_stage_totals_sum_each_stage_and_count_failures(tmp_path):
    directory = write_timing(tmp_path, lint=(40.0, 0), syntax=(10.0, 0), pytest_run=(625.0, 1),
                             report=full_report())
    totals = ci_timing.stage_totals(directory)
    assert totals["lint"] == {"seconds": 40.0, "status": 0}
    assert totals["syntax"] == {"seconds": 10.0, "status": 0}
    assert totals["unit"] == {"seconds": 6.0, "tests": 12, "failed": 0}
    assert totals["integration"] == {"seconds": 37.0, "tests": 2, "failed": 1}
    assert totals["fleet"] == {"seconds": 575.0, "tests": 3, "failed": 1}
    # pytest's own wall time (the timed command) less what the tests account for
    assert totals["pytest other"] == {"seconds": 7.0, "collect": 1.5, "session_teardown": 3.0}
    assert totals["pytest"] == {"seconds": 625.0, "status": 1}


def test_without_the_timed_command_the_reports_own_wall_time_counts(tmp_path):
    totals = ci_timing.stage_totals(write_timing(tmp_path, report=full_report(wall_seconds=630.0)))
    assert totals["pytest"] == {"seconds": 630.0, "status": 1}
    assert totals["pytest other"]["seconds"] == 12.0
    assert "lint" not in totals


def test_the_other_row_is_never_negative(tmp_path):
    # xdist: the tests' seconds add up to more than the wall time
    totals = ci_timing.stage_totals(write_timing(tmp_path, pytest_run=(100.0, 0), report=full_report()))
    assert totals["pytest other"]["seconds"] == 0.0


def test_summary_of_a_full_run(tmp_path):
    directory = write_timing(tmp_path, lint=(40.0, 0), syntax=(10.0, 0), pytest_run=(625.0, 1),
                             report=full_report())
    summary = ci_timing.render_summary(directory).splitlines()
    assert summary[:10] == [
        "make test: seconds per stage",
        "  stage           seconds   tests  failed",
        "  lint             40.0 s",
        "  syntax           10.0 s",
        "  unit              6.0 s      12       0",
        "  integration      37.0 s       2       1",
        "  fleet           575.0 s       3       1",
        "  pytest other      7.0 s  (start-up, collection 1.5 s, session fixtures' teardown 3.0 s)",
        "  total           675.0 s",
        "slowest tests (setup + call + teardown):",
    ]
    slowest = summary[10:]
    assert len(slowest) == 10
    assert slowest[0] == "     420.0 s  fleet        tests/integration/fleet/test_f.py::test_site"
    assert slowest[2] == "      65.0 s  fleet        tests/integration/fleet/test_f.py::test_rerun  [failed]"
    assert slowest[4] == "       4.0 s  integration  tests/integration/test_i.py::test_broken  [error]"
    # ties (the unit tests at 0.5 s) in node id order
    assert slowest[5:] == [f"       0.5 s  unit         tests/unit/test_u.py::test_{n}"
                           for n in (0, 1, 10, 11, 2)]


def test_summary_lists_the_tests_that_used_the_most_cpu(tmp_path):
    report = full_report()
    cpu = {"tests/integration/test_i.py::test_slow": 25.0,
           "tests/integration/fleet/test_f.py::test_site": 140.0, "tests/unit/test_u.py::test_3": 0.4,
           "tests/unit/test_u.py::test_4": 0.4}
    for test in report["tests"]:
        if test["nodeid"] in cpu:  # the others: records of a report from before CPU was recorded
            test["cpu_seconds"] = cpu[test["nodeid"]]
    summary = ci_timing.render_summary(write_timing(tmp_path, report=report)).splitlines()
    block = summary.index("most CPU (setup + call + teardown: the test's processes on this machine, not a "
                          "fleet host's):")
    assert summary[block + 1:block + 5] == [
        "     140.0 s  fleet        tests/integration/fleet/test_f.py::test_site",
        "      25.0 s  integration  tests/integration/test_i.py::test_slow",
        "       0.4 s  unit         tests/unit/test_u.py::test_3",  # ties in node id order
        "       0.4 s  unit         tests/unit/test_u.py::test_4",
    ]
    assert len(summary) == block + 5 or not summary[block + 5].startswith("  ")
    assert "most CPU" not in ci_timing.render_summary(write_timing(tmp_path / "old", report=full_report()))


def test_summary_gives_the_machines_cpu_over_each_pytest_run(tmp_path):
    machine = {"cores": 2, "busy": 2662.04, "idle": 133.0, "iowait": 186.3, "steal": 0.0}
    summary = ci_timing.render_summary(write_timing(tmp_path, report=full_report(machine_cpu=machine)))
    lines = summary.splitlines()
    row = lines.index("the machine's CPU seconds while each pytest run ran (all its processes; /proc/stat):")
    assert lines[row + 1] == ("  pytest         2662.0 s busy, 133.0 idle, 186.3 waiting on I/O, 0.0 stolen "
                              "(2 cores)")
    # a report without the record (written before it was kept, or on a machine without /proc/stat)
    for report in (full_report(), full_report(machine_cpu=None)):
        old = ci_timing.render_summary(write_timing(tmp_path / "old", report=report))
        assert "the machine's CPU" not in old


def test_the_machines_cpu_is_read_from_proc_stat_in_seconds(tmp_path):
    conftest = load_conftest()
    stat = tmp_path / "stat"
    tick = os.sysconf("SC_CLK_TCK")
    stat.write_text(f"cpu  {10 * tick} {1 * tick} {4 * tick} {100 * tick} {7 * tick} {2 * tick} {3 * tick} "
                    f"{5 * tick} 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\nintr 1\n")
    assert conftest.machine_cpu(stat) == {"busy": 20.0, "idle": 100.0, "iowait": 7.0, "steal": 5.0}
    stat.write_text("intr 1\n")
    assert conftest.machine_cpu(stat) is None
    assert conftest.machine_cpu(tmp_path / "missing") is None
    assert conftest.machine_cpu()["busy"] > 0  # this machine's


def test_summary_ends_with_the_least_free_disk_and_the_test_running_then(tmp_path):
    disk = {"path": "/var/tmp/cache", "start_free_gb": 45.25, "least_free_gb": 9.8,
            "least_during": "tests/integration/fleet/test_f.py::test_site", "end_free_gb": 44.0}
    summary = ci_timing.render_summary(write_timing(tmp_path, report=full_report(disk=disk))).splitlines()
    assert summary[-1] == ("disk free on /var/tmp/cache: 45.2 GiB at the start, least 9.8 GiB "
                           "(during tests/integration/fleet/test_f.py::test_site), 44.0 GiB at the end")
    # a report of a killed session has no end figure; one without a disk record prints no disk line
    del disk["end_free_gb"]
    last = ci_timing.render_summary(write_timing(tmp_path / "killed", report=full_report(disk=disk)))
    assert last.splitlines()[-1].endswith("(during tests/integration/fleet/test_f.py::test_site)")
    plain = ci_timing.render_summary(write_timing(tmp_path / "plain", report=full_report()))
    assert "disk free" not in plain


def load_conftest():
    return load("tests_conftest", REPO_ROOT / "tests" / "conftest.py")


def disk_report(tmp_path, monkeypatch, frees: list):
    """tests/conftest.py's TimingReport, whose free-disk readings are ``frees`` in turn (the first at its
    start); its thread takes no sample during the test."""
    conftest = load_conftest()
    readings = iter(frees)
    monkeypatch.setattr(conftest, "_free_gb", lambda path: next(readings))
    monkeypatch.setattr(conftest, "DISK_SAMPLE_SECONDS", 3600.0)
    monkeypatch.setenv("SGLANG_FLEET_CACHE", str(tmp_path / "cache"))
    return conftest.TimingReport(tmp_path / "report.json")


def test_the_timing_report_samples_the_free_disk_and_names_the_test(tmp_path, monkeypatch):
    report = disk_report(tmp_path, monkeypatch, [50.0, 20.0, 30.0, 35.0, 40.0])
    assert report.disk["path"] == str(tmp_path / "cache")  # the test cache's root, made if missing
    report.pytest_runtest_logstart("tests/t.py::test_big", ("tests/t.py", 1, "test_big"))
    report._note_disk()  # 20.0: the least, during test_big
    report.pytest_runtest_logstart("tests/t.py::test_small", ("tests/t.py", 2, "test_small"))
    report._note_disk()  # 30.0: not less
    report.pytest_sessionfinish(None, 0)  # its own last sample (35.0), then the end figure (40.0)
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["disk"] == {"path": str(tmp_path / "cache"), "start_free_gb": 50.0, "least_free_gb": 20.0,
                               "least_during": "tests/t.py::test_big", "end_free_gb": 40.0}
    # a trace point at each move of 1 GiB or more, naming every test running then
    assert [point[1:] for point in written["disk_trace"]] == [
        [50.0, "(collection)"], [20.0, "tests/t.py::test_big"],
        [30.0, "tests/t.py::test_big + tests/t.py::test_small"],
        [35.0, "tests/t.py::test_big + tests/t.py::test_small"]]


def test_the_least_free_disk_names_both_lanes_and_a_finished_test_leaves_them(tmp_path, monkeypatch):
    report = disk_report(tmp_path, monkeypatch, [50.0, 49.5, 10.0, 12.0, 12.0])
    report.pytest_runtest_logstart("tests/a.py::test_a", ("tests/a.py", 1, "test_a"))
    report.pytest_runtest_logstart("tests/b.py::test_b", ("tests/b.py", 1, "test_b"))
    report._note_disk()  # 49.5: under 1 GiB from the last point, no trace point
    report.pytest_runtest_logfinish("tests/a.py::test_a", ("tests/a.py", 1, "test_a"))
    report._note_disk()  # 10.0: while only test_b runs
    report.pytest_sessionfinish(None, 0)
    written = json.loads((tmp_path / "report.json").read_text())
    assert written["disk"]["least_during"] == "tests/b.py::test_b"
    assert [point[1:] for point in written["disk_trace"]] == [[50.0, "(collection)"],
                                                              [10.0, "tests/b.py::test_b"],
                                                              [12.0, "tests/b.py::test_b"]]


def test_summary_names_the_tests_during_which_the_disk_fell_most(tmp_path):
    trace = [[0.0, 80.0, "(collection)"], [10.0, 70.0, "tests/integration/fleet/test_a.py::test_1"],
             [20.0, 75.0, "tests/integration/fleet/test_a.py::test_1"],
             [30.0, 60.0, "tests/integration/fleet/test_a.py::test_1 + tests/integration/fleet/test_b.py::t"],
             [40.0, 57.5, "tests/integration/fleet/test_a.py::test_1"]]
    summary = ci_timing.render_summary(write_timing(tmp_path, report=full_report(disk_trace=trace)))
    lines = summary.splitlines()
    start = lines.index("the free disk fell most while these ran (GiB, summed over the run):")
    assert lines[start + 1:start + 3] == [
        "      15.0  tests/integration/fleet/test_a.py::test_1 + tests/integration/fleet/test_b.py::t",
        "      12.5  tests/integration/fleet/test_a.py::test_1"]
    assert "fell most" not in ci_timing.render_summary(write_timing(tmp_path / "plain", report=full_report()))


def test_summary_parses_back_from_a_log(tmp_path):
    directory = write_timing(tmp_path, lint=(40.0, 0), syntax=(10.0, 0), pytest_run=(625.0, 1),
                             report=full_report())
    figures = ci_timing.parse_log(ci_timing.render_summary(directory) + "\n")
    assert figures["stages"] == {"lint": 40.0, "syntax": 10.0, "unit": 6.0, "integration": 37.0,
                                 "fleet": 575.0}


def test_summary_after_a_failed_lint_says_what_did_not_run(tmp_path):
    summary = ci_timing.render_summary(write_timing(tmp_path, lint=(0.44, 2)))
    assert summary.splitlines() == [
        "make test: seconds per stage",
        "  stage           seconds   tests  failed",
        "  lint              0.4 s  failed (exit 2)",
        "  syntax          not run",
        "  unit            not run",
        "  integration     not run",
        "  fleet           not run",
        "  total             0.4 s",
    ]


def test_summary_when_pytest_wrote_no_report(tmp_path):
    summary = ci_timing.render_summary(write_timing(tmp_path, lint=(1.0, 0), syntax=(2.0, 0),
                                                    pytest_run=(3.25, 137)))
    assert "  pytest ran 3.2 s, exit 137, and wrote no per-test report" in summary.splitlines()
    assert summary.splitlines()[-1] == "  total             6.2 s"


def test_tests_outside_the_stages_get_their_own_row(tmp_path):
    report = full_report(tests=[record("tests/test_top.py::test_a", call=2.0)])
    summary = ci_timing.render_summary(write_timing(tmp_path, report=report)).splitlines()
    assert "  other             2.0 s       1       0" in summary
    assert "  unit            not run" in summary


def test_a_module_that_failed_to_collect_counts_as_a_failure_of_its_stage(tmp_path):
    report = full_report(collect_errors=["tests/unit/test_gone.py", "tests/integration/fleet/test_gone.py",
                                         "tests/integration/test_new.py"],
                         tests=[record("tests/unit/test_u.py::test_a", call=1.0)])
    totals = ci_timing.stage_totals(write_timing(tmp_path, report=report))
    assert totals["unit"] == {"seconds": 1.0, "tests": 1, "failed": 1}
    assert totals["fleet"] == {"seconds": 0.0, "tests": 0, "failed": 1}
    assert totals["integration"] == {"seconds": 0.0, "tests": 0, "failed": 1}


def test_the_unit_and_fleet_runs_add_up_per_stage(tmp_path):
    tests = full_report()["tests"]
    rest = full_report(wall_seconds=50.0, exitstatus=0, collect_seconds=1.0, session_teardown_seconds=0.5,
                       tests=[t for t in tests if "fleet" not in t["nodeid"]],
                       disk={"path": "/", "start_free_gb": 90.0, "least_free_gb": 80.0,
                             "least_during": "tests/unit/test_u.py::test_1", "end_free_gb": 85.0})
    fleet = full_report(wall_seconds=600.0, exitstatus=1, tests=[t for t in tests if "fleet" in t["nodeid"]],
                        disk={"path": "/", "start_free_gb": 85.0, "least_free_gb": 20.0,
                              "least_during": "tests/integration/fleet/test_f.py::test_site",
                              "end_free_gb": 84.0})
    write_timing(tmp_path, lint=(40.0, 0), syntax=(10.0, 0), pytest_run=(52.0, 0), report=rest)
    (tmp_path / "pytest-fleet.json").write_text(json.dumps({"stage": "pytest-fleet", "seconds": 605.0,
                                                            "status": 1}))
    (tmp_path / "pytest-fleet-report.json").write_text(json.dumps(fleet))
    assert ci_timing.pytest_runs(tmp_path) == ["pytest", "pytest-fleet"]
    totals = ci_timing.stage_totals(tmp_path)
    assert totals["unit"] == {"seconds": 6.0, "tests": 12, "failed": 0}
    assert totals["integration"] == {"seconds": 37.0, "tests": 2, "failed": 1}
    assert totals["fleet"] == {"seconds": 575.0, "tests": 3, "failed": 1}
    # the first failing run's status; the walls add up, less what the tests of each account for
    assert totals["pytest"] == {"seconds": 657.0, "status": 1}
    assert totals["pytest other"] == {"seconds": 657.0 - 43.0 - 575.0, "collect": 2.5,
                                      "session_teardown": 3.5}
    summary = ci_timing.render_summary(tmp_path).splitlines()
    assert "  total           707.0 s" in summary
    assert summary[10] == "     420.0 s  fleet        tests/integration/fleet/test_f.py::test_site"
    assert summary[-1] == ("disk free on /: 90.0 GiB at the start, least 20.0 GiB (during "
                           "tests/integration/fleet/test_f.py::test_site), 84.0 GiB at the end")


def test_runs_side_by_side_count_once_in_the_total(tmp_path):
    """Two pytest runs that overlapped (started side by side): the total is the time either ran (their
    stage rows still add up their tests' seconds), and a gap between runs does not count."""
    rest = full_report(wall_seconds=50.0, exitstatus=0, tests=[
        t for t in full_report()["tests"] if "fleet" not in t["nodeid"]])
    fleet = full_report(wall_seconds=600.0, exitstatus=0, tests=[
        t for t in full_report()["tests"] if "fleet" in t["nodeid"]])
    write_timing(tmp_path, lint=(40.0, 0), syntax=(10.0, 0), report=rest)
    (tmp_path / "pytest-fleet-report.json").write_text(json.dumps(fleet))
    for name, start, seconds in (("pytest", 1000.0, 52.0), ("pytest-fleet", 1001.0, 605.0)):
        (tmp_path / f"{name}.json").write_text(json.dumps({"stage": name, "seconds": seconds, "status": 0,
                                                           "started_at": start}))
    totals = ci_timing.stage_totals(tmp_path)
    assert totals["pytest"] == {"seconds": 606.0, "status": 0}
    assert totals["fleet"]["seconds"] == 575.0
    assert "  total           656.0 s" in ci_timing.render_summary(tmp_path).splitlines()
    # one after the other, with a gap: each run's own seconds
    (tmp_path / "pytest-fleet.json").write_text(json.dumps({
        "stage": "pytest-fleet", "seconds": 605.0, "status": 0, "started_at": 1100.0}))
    assert ci_timing.stage_totals(tmp_path)["pytest"]["seconds"] == 657.0


@pytest.mark.parametrize(("spans", "covered"), [
    ([(0.0, 10.0)], 10.0),
    ([(0.0, 10.0), (5.0, 8.0)], 10.0),
    ([(5.0, 20.0), (0.0, 10.0)], 20.0),
    ([(0.0, 1.0), (2.0, 3.0), (2.5, 4.0)], 3.0),
])
def test_covered_seconds_are_the_union_of_the_spans(spans, covered):
    assert ci_timing._covered(spans) == covered


def test_time_records_when_the_command_started(tmp_path):
    before = time.time()
    ci_timing.time_command(tmp_path, "pytest-fleet", python("import time; time.sleep(0.2)"))
    after = time.time()
    record = json.loads((tmp_path / "pytest-fleet.json").read_text())
    assert record["seconds"] >= 0.2
    assert before - 0.001 <= record["started_at"] <= after - record["seconds"] + 0.001


INTERRUPTED_CHILD = textwrap.dedent("""
    import sys, time
    try:
        print("ready", flush=True)  # inside the try: the test's SIGINT may come as soon as it is read
        time.sleep(30)
    except KeyboardInterrupt:
        time.sleep(1)  # longer than the 0.25 s subprocess.run would give it
        print("cleaned up", flush=True)
        sys.exit(2)
""")


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_ctrl_c_reaches_the_timed_command_which_ends_the_way_it_chooses(tmp_path, sigint):
    """Ctrl-C signals the terminal's whole process group: the command (pytest: it tears its fleets down)
    gets KeyboardInterrupt and `time` waits for it, instead of killing it a quarter second later, as
    subprocess.run does. Also when `time` itself was started with SIGINT ignored, as a background job of
    a shell without job control is (`... &` in a make recipe)."""
    script = tmp_path / "child.py"
    script.write_text(INTERRUPTED_CHILD)
    command = [sys.executable, str(REPO_ROOT / "bench" / "ci_timing.py"), "time", "pytest", "--dir",
               str(tmp_path), "--", sys.executable, str(script)]
    if sigint == "ignored":  # what `command &` does in a shell without job control
        command = ["sh", "-c", 'trap "" INT; exec "$@"', "sh", *command]
    timed = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert timed.stdout.readline() == "ready\n"
        os.killpg(timed.pid, signal.SIGINT)
        out, _ = timed.communicate(timeout=30)
    finally:
        if timed.poll() is None:
            os.killpg(timed.pid, signal.SIGKILL)
    assert out.splitlines()[0] == "cleaned up"
    assert out.splitlines()[1].startswith("ci_timing: pytest ended: exit 2 after ")
    assert timed.returncode == 2
    assert json.loads((tmp_path / "pytest.json").read_text())["status"] == 2


def test_time_says_when_a_stage_ended(tmp_path, capsys):
    ci_timing.time_command(tmp_path, "pytest-fleet", python("import sys; sys.exit(3)"))
    assert capsys.readouterr().out.startswith("ci_timing: pytest-fleet ended: exit 3 after ")
    assert ci_timing.pytest_runs(tmp_path) == ["pytest-fleet"]


def test_summary_command_prints_it(tmp_path, capsys):
    write_timing(tmp_path, lint=(1.0, 0))
    assert ci_timing.main(["summary", str(tmp_path)]) == 0
    assert capsys.readouterr().out.startswith("make test: seconds per stage\n")


# --- the pytest plugin (tests/conftest.py --timing-json), in a real pytest run ------------------------------

PLUGIN_TESTS = {
    "tests/integration/fleet/test_slow.py": """
        import time
        import pytest

        @pytest.fixture(scope="session")
        def shared():
            yield
            time.sleep(0.4)  # a session fixture's teardown runs in the last test's teardown

        def test_slow(shared):
            time.sleep(0.2)
    """,
    "tests/unit/test_cpu.py": """
        import subprocess
        import sys
        import time

        BURN = "import time\\nend = time.process_time() + 0.3\\nwhile time.process_time() < end: pass"

        def test_burns_in_a_child():
            subprocess.run([sys.executable, "-c", BURN], check=True)

        def test_sleeps():
            time.sleep(0.3)
    """,
    "tests/unit/test_gone.py": """
        import a_module_that_does_not_exist
    """,
    "tests/unit/test_fast.py": """
        import pytest

        @pytest.fixture
        def broken():
            raise RuntimeError("set-up fails")

        def test_passes():
            pass

        def test_fails():
            assert False

        def test_errors(broken):
            pass
    """,
}


def test_the_plugin_writes_each_tests_phases_and_keeps_the_session_teardown_apart(tmp_path):
    for name, source in PLUGIN_TESTS.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(source))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    report = tmp_path / "out" / "report.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "tests")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider",
                          "-p", "no:hypothesispytest", f"--timing-json={report}", "-q",
                          "--continue-on-collection-errors"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 1, run.stdout + run.stderr
    data = json.loads(report.read_text())
    tests = {test["nodeid"]: test for test in data["tests"]}
    outcomes = [tests[f"tests/unit/test_fast.py::test_{name}"]["outcome"]
                for name in ("passes", "fails", "errors")]
    assert outcomes == ["passed", "failed", "error"]
    slow = tests["tests/integration/fleet/test_slow.py::test_slow"]
    assert slow["outcome"] == "passed"
    assert 0.2 <= slow["call"] < 0.4
    assert data["session_teardown_seconds"] >= 0.4
    assert all(test["teardown"] < 0.4 for test in data["tests"])
    assert data["exitstatus"] == 1
    assert data["collect_errors"] == ["tests/unit/test_gone.py"]
    assert data["wall_seconds"] >= 0.6
    assert data["collect_seconds"] > 0
    assert_cpu_seconds(tests)
    machine = data["machine_cpu"]
    assert machine["cores"] == os.cpu_count()
    assert machine["busy"] >= 0.3  # at least the child's burn
    assert set(machine) == {"cores", "busy", "idle", "iowait", "steal"}


def assert_cpu_seconds(tests: dict) -> None:
    """A child's CPU counts for the test that waited for it; a sleep is no CPU."""
    assert tests["tests/unit/test_cpu.py::test_burns_in_a_child"]["cpu_seconds"] >= 0.28
    assert tests["tests/unit/test_cpu.py::test_sleeps"]["cpu_seconds"] < 0.1


def test_under_xdist_each_tests_cpu_seconds_reach_the_report(tmp_path):
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests/unit/test_cpu.py").write_text(textwrap.dedent(PLUGIN_TESTS["tests/unit/test_cpu.py"]))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    report = tmp_path / "report.json"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "tests")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider",
                          "-p", "no:hypothesispytest", f"--timing-json={report}", "-q", "-n", "2"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert_cpu_seconds({test["nodeid"]: test for test in json.loads(report.read_text())["tests"]})


def test_under_loadgroup_the_fleet_tests_run_in_two_lanes_and_own_fleet_modules_whole_after_them(tmp_path):
    fleet_test = """
        import os

        def test_{n}():
            with open(os.environ["ORDER_FILE"], "a") as order:
                order.write(os.environ["PYTEST_XDIST_WORKER"] + " {module}::test_{n}\\n")
    """
    # a and m (molecule's own fleet) in the session lane, the rollout module in the other; the teardown
    # and toolkit modules (fleets of their own) each whole on one worker, after a lane
    layout = {"tests/integration/fleet/test_a.py": "a", "tests/integration/fleet/test_fleet_molecule.py": "m",
              "tests/integration/fleet/test_fleet_teardown.py": "t",
              "tests/integration/fleet/test_cuda_toolchain.py": "c",
              "tests/integration/fleet/test_rolling_rebuild.py": "r"}
    for name, module in layout.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("".join(textwrap.dedent(fleet_test).format(n=f"{module}{n}",
                                                                                module=module)
                                             for n in range(3)))
    (tmp_path / "tests/unit").mkdir(parents=True)
    (tmp_path / "tests/unit/test_u.py").write_text("import os\nimport time\n\n" + "".join(
        f"def test_u{n}():\n    time.sleep(0.05)\n"
        f"    print('ran on', os.environ['PYTEST_XDIST_WORKER'])\n\n\n" for n in range(20)))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    order = tmp_path / "order.txt"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "tests"), "ORDER_FILE": str(order)}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider",
                          "-p", "no:hypothesispytest", "-rP", "-n", "2", "--dist", "loadgroup"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "35 passed" in run.stdout
    lines = [line.split() for line in order.read_text().splitlines()]
    units = {unit: [(worker, test) for worker, test in lines if test.split("::")[0] in modules]
             for unit, modules in (("session", "am"), ("rollout", "r"), ("teardown", "t"), ("toolkit", "c"))}
    for unit, modules in (("session", "am"), ("rollout", "r"), ("teardown", "t"), ("toolkit", "c")):
        assert len({worker for worker, _ in units[unit]}) == 1, lines
        assert [test for _, test in units[unit]] == [f"{m}::test_{m}{n}" for m in modules for n in range(3)]
    # the lanes run side by side, one on each worker, and the own-fleet modules after them
    assert units["session"][0][0] != units["rollout"][0][0], lines
    for unit in ("teardown", "toolkit"):
        worker = units[unit][0][0]
        ran = [test for each, test in lines if each == worker]
        lane = units["session"] if units["session"][0][0] == worker else units["rollout"]
        assert ran.index(units[unit][0][1]) > ran.index(lane[-1][1]), lines


@pytest.mark.parametrize("module", ["test_rolling_rebuild.py", "test_cuda_toolchain.py"])
def test_a_module_outside_the_session_lane_that_asks_for_the_session_fleet_is_refused(tmp_path, module):
    (tmp_path / "tests/integration/fleet").mkdir(parents=True)
    (tmp_path / "tests/integration/fleet" / module).write_text(
        "import pytest\n\n\n@pytest.fixture\ndef fleet():\n    return 1\n\n\n"
        "def test_uses(fleet):\n    assert fleet\n")
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "tests")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "conftest", "-p", "no:cacheprovider",
                          "-p", "no:hypothesispytest"], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120, check=False)
    assert run.returncode == 4, run.stdout + run.stderr
    assert (f"tests/integration/fleet/{module}::test_uses: uses the session fleet, but its "
            "module is in ROLLOUT_LANE_MODULES or OWN_FLEET_MODULES") in run.stderr


# --- compare: clean clones of two revisions, cold and warm ----------------------------------------------

STAND_IN_CI = """#!/bin/sh
# stand-in for .ci/run: says how full the cache it was given is, then fills it
echo "ci: cache $(ls -A "$SGLANG_FLEET_CACHE" | wc -l) entries"
touch "$SGLANG_FLEET_CACHE/entry-$$"
echo "==== {counts} in 1.50s ===="
{ending}
"""


GIT_IDENTITY = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
                "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env={**os.environ, **GIT_IDENTITY}).stdout.strip()


def commit_ci(repo: Path, counts: str, ending: str) -> str:
    script = repo / ".ci" / "run"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(STAND_IN_CI.format(counts=counts, ending=ending))
    script.chmod(0o755)
    git(repo, "add", ".ci/run")
    git(repo, "commit", "-q", "-m", counts)
    return git(repo, "rev-parse", "--short", "HEAD")


@pytest.fixture
def two_revisions(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    before = commit_ci(repo, "5 passed", 'echo "ci: make test passed in 2 s"')
    after = commit_ci(repo, "1 failed, 6 passed", 'echo "make: *** [Makefile:42: test] Error 2"; exit 2')
    # uncommitted work is not what a clean clone runs
    (repo / ".ci" / "run").write_text("#!/bin/sh\necho uncommitted; exit 9\n")
    return repo, before, after


def test_compare_runs_each_revision_cold_then_warm_on_its_own_cache(two_revisions, tmp_path, capsys):
    repo, before, after = two_revisions
    workdir = tmp_path / "work"
    assert ci_timing.main(["compare", before, after, "--repo", str(repo), "--workdir", str(workdir)]) == 0
    out = capsys.readouterr().out.splitlines()
    table = out[out.index(next(line for line in out if line.startswith(" "))):]
    assert table[0].split() == [before, "cold", before, "warm", after, "cold", after, "warm"]
    rows = {line.split()[0]: line.split()[1:] for line in table[1:]}
    assert rows["result"] == ["passed", "passed", "exit", "2", "exit", "2"]
    assert rows["passed"] == ["5", "5", "6", "6"]
    assert rows["failed"] == ["0", "0", "1", "1"]
    assert rows["pytest"] == ["(s)", "1.5", "1.5", "1.5", "1.5"]
    assert all(float(wall) < 60 for wall in rows["wall"][1:])
    logs = {path.name: path.read_text() for path in workdir.glob("*.log")}
    assert sorted(logs) == [f"0-{before}-cold.log", f"0-{before}-warm.log", f"1-{after}-cold.log",
                            f"1-{after}-warm.log"]
    # cold starts from an empty cache, warm finds what that revision's cold run left
    for name, text in logs.items():
        assert text.startswith("ci: cache 0 entries" if "cold" in name else "ci: cache 1 entries"), name
        assert "uncommitted" not in text


def test_warm_alone_uses_the_current_cache(two_revisions, tmp_path, monkeypatch, capsys):
    repo, before, _ = two_revisions
    cache = tmp_path / "kept-cache"
    cache.mkdir()
    for n in range(3):
        (cache / f"kept-{n}").touch()
    monkeypatch.setenv("SGLANG_FLEET_CACHE", str(cache))
    workdir = tmp_path / "work"
    ci_timing.main(["compare", before, "--repo", str(repo), "--modes", "warm", "--workdir", str(workdir)])
    assert (workdir / f"0-{before}-warm.log").read_text().startswith("ci: cache 3 entries")
    assert len(list(cache.iterdir())) == 4
    assert capsys.readouterr().out.splitlines()[-8].split() == [before, "warm"]


def test_compare_refuses_an_unknown_mode(capsys):
    with pytest.raises(SystemExit):
        ci_timing.main(["compare", "HEAD", "--modes", "cold,hot"])
    assert "unknown mode hot" in capsys.readouterr().err


def test_killed_sessions_temporary_directories_are_found_and_no_other(tmp_path):
    conftest = load_conftest()
    gone = subprocess.Popen(["true"])
    gone.wait()  # a pid whose process has ended
    locks = {"pytest-1": str(gone.pid), "pytest-2": str(os.getpid()), "pytest-4": "not a pid"}
    for name in ("pytest-1", "pytest-2", "pytest-3", "pytest-4", "pytest-current"):
        (tmp_path / name).mkdir()
        if name in locks:
            (tmp_path / name / ".lock").write_text(locks[name])
    # pytest-2: its session runs; pytest-3 ended (no lock); pytest-4's lock is not pytest's; current: no
    assert conftest.killed_sessions_tmp(tmp_path) == [tmp_path / "pytest-1"]


def test_bytecode_goes_to_the_test_cache_unless_the_caller_names_a_prefix(tmp_path, monkeypatch):
    conftest = load_conftest()
    monkeypatch.setattr(sys, "pycache_prefix", sys.pycache_prefix)
    monkeypatch.setattr(sys, "dont_write_bytecode", sys.dont_write_bytecode)
    monkeypatch.setenv("SGLANG_FLEET_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", "/elsewhere")
    assert conftest.bytecode_cache() is None  # the caller's own prefix is kept
    assert (os.environ["PYTHONPYCACHEPREFIX"], os.environ["PYTHONDONTWRITEBYTECODE"]) == ("/elsewhere", "1")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX")
    prefix = tmp_path / "cache" / "pycache"
    assert conftest.bytecode_cache() == prefix
    assert os.environ["PYTHONPYCACHEPREFIX"] == sys.pycache_prefix == str(prefix)
    assert "PYTHONDONTWRITEBYTECODE" not in os.environ
    assert sys.dont_write_bytecode is False
    # a process the tests start compiles into the prefix, not next to the source
    source = tmp_path / "src"
    source.mkdir()
    (source / "probe_module.py").write_text("VALUE = 1\n")
    subprocess.run([sys.executable, "-c", "import probe_module"], cwd=source, check=True)
    assert [path.name for path in (prefix / source.relative_to("/")).rglob("*.pyc")] == [
        f"probe_module.{sys.implementation.cache_tag}.pyc"]
    assert not (source / "__pycache__").exists()


def test_the_bytecode_of_sources_that_are_gone_is_pruned(tmp_path):
    conftest = load_conftest()
    prefix = tmp_path / "pycache"
    kept, gone = tmp_path / "kept" / "pkg", tmp_path / "gone"
    kept.mkdir(parents=True)
    mirror = prefix / tmp_path.relative_to("/")
    for directory in (mirror / "kept" / "pkg", mirror / "kept" / "pkg" / "sub", mirror / "gone" / "pkg"):
        directory.mkdir(parents=True)
        (directory / "m.cpython-311.pyc").write_bytes(b"")
    assert conftest.prune_bytecode_cache(prefix) == [mirror / "gone", mirror / "kept" / "pkg" / "sub"]
    assert sorted(str(p.relative_to(mirror)) for p in mirror.rglob("*.pyc")) == ["kept/pkg/m.cpython-311.pyc"]
    assert not gone.exists()


def test_make_n_test_shows_the_recipe_and_runs_nothing(tmp_path):
    """GNU make runs a recipe line that names $(MAKE) even under -n: `make -n test` ran the whole suite
    while the test recipe called its lint and syntax stages through $(MAKE)."""
    timing = tmp_path / "timing"
    make = subprocess.Popen(["make", "--no-print-directory", "-n", "test", f"TIMING_DIR={timing}"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = make.communicate(timeout=60)
    finally:  # a recipe that runs would start the whole suite: stop all of it
        if make.poll() is None or timing.exists():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(make.pid, signal.SIGKILL)
    assert not timing.exists(), "make -n ran the recipe"
    assert make.returncode == 0, err
    assert f"bench/ci_timing.py time --dir {timing} lint -- " in out
    assert " -m pytest " in out
