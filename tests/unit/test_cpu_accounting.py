"""bench/cpu_accounting.py: acct_v3 records decoded and summed by process tree (records packed here in
the kernel's layout), and one real accounting run of a busy child (root: acct(2))."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from by_path import load
from prereq import require

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "bench" / "cpu_accounting.py"
acct = load("cpu_accounting", SCRIPT)


def encode_comp_t(value: int) -> int:
    """The kernel's encode_comp_t (kernel/acct.c): 13-bit mantissa, base-8 exponent, rounding up."""
    exp, rnd = 0, 0
    while value > 0x1FFF:
        rnd = value & (1 << 2)
        value >>= 3
        exp += 1
    if rnd and value + 1 > 0x1FFF:
        value >>= 3
        exp += 1
    return (exp << 13) + value


def record(pid: int, ppid: int, command: str, cpu_ticks: int = 0, *, start: int = 1_000,
           elapsed_ticks: float = 100.0, version: int = 3) -> bytes:
    user = encode_comp_t(cpu_ticks // 2)
    system = encode_comp_t(cpu_ticks - cpu_ticks // 2)
    return struct.pack("<BBHIIIIIIfHHHHHHHH16s", 0, version, 0, 0, 0, 0, pid, ppid, start, elapsed_ticks,
                       user, system, 0, 0, 0, 0, 0, 0, command.encode())


@pytest.mark.parametrize("ticks", [0, 1, 8191, 8192, 65_535, 123_456])
def test_comp_t_round_trips_within_its_precision(ticks):
    decoded = acct.comp_t(encode_comp_t(ticks))
    assert abs(decoded - ticks) <= ticks / 1024 + 8, (ticks, decoded)
    if ticks <= 0x1FFF:
        assert decoded == ticks


def test_records_decode_to_processes():
    data = record(42, 1, "python3", 250, start=1_796_000_000, elapsed_ticks=1234.0)
    (process,) = acct.parse(data)
    assert process == acct.Process(pid=42, ppid=1, start=1_796_000_000, elapsed=12.34, cpu=2.5,
                                   command="python3")


def test_a_truncated_file_or_another_record_version_is_refused_with_the_reason():
    with pytest.raises(acct.AccountingError, match="whole number of 64-byte"):
        acct.parse(record(1, 0, "init")[:-3])
    with pytest.raises(acct.AccountingError, match="acct version 2, not 3"):
        acct.parse(record(1, 0, "init") + record(2, 1, "sh", version=2))


def fleet_and_controller() -> list:
    """A controller's pytest worker running ansible-playbook (main, two forks, an ssh client), and a fleet
    host (systemd-nspawn -> systemd -> sshd -> sh -> python3) running the module; pid 300 is reused."""
    return acct.parse(b"".join([
        record(100, 1, "python", 1_000, start=10),            # pytest worker
        record(200, 100, "ansible-playboo", 300, start=20),   # ansible-playbook main
        record(201, 200, "ansible-playboo", 40, start=21),    # its fork for a task on a host
        record(202, 200, "ansible-playboo", 60, start=22),
        record(210, 201, "ssh", 5, start=21),
        record(300, 1, "sh", 0, start=5),                     # an old process with a pid used again
        record(500, 1, "systemd-nspawn", 10, start=11),
        record(501, 500, "systemd", 50, start=11),
        record(502, 501, "sshd", 7, start=12),
        record(300, 502, "sh", 1, start=21),                  # pid 300 again, now on the host
        record(301, 300, "python3", 20, start=21),
        record(302, 300, "python3", 18, start=22),
    ]))


def test_processes_count_where_their_tree_says():
    processes = fleet_and_controller()
    tree = acct.Tree(processes)
    names = {(p.pid, p.start): acct.category(tree, p) for p in processes}
    assert names[(200, 20)] == "ansible-playbook main"
    assert names[(201, 21)] == names[(202, 22)] == "ansible-playbook fork"
    assert names[(210, 21)] == "ssh (ansible's connection)"
    assert names[(100, 10)] == "controller: python"
    assert names[(500, 11)] == "controller: systemd-nspawn"  # the container's supervisor is the controller's
    assert names[(501, 11)] == "fleet host: systemd"
    assert names[(301, 21)] == names[(302, 22)] == "fleet host: python3"
    assert names[(300, 21)] == "fleet host: sh"   # the reused pid's later process is the host's
    assert names[(300, 5)] == "controller: sh"


def test_the_summary_sums_categories_largest_first_within_the_window():
    text = acct.summarize(fleet_and_controller())
    lines = text.splitlines()
    assert lines[0] == "CPU seconds by process (12 processes, 15 CPU-s recorded)"
    assert lines[1] == ("  fleet hosts 1 (6 %), controller ansible-playbook 4 (26 %), "
                        "other controller 10 (67 %)")
    rows = [line.split(None, 4) for line in lines[3:]]  # CPU-s, share ("7 %"), processes, category
    assert [row[4] for row in rows[:3]] == ["controller: python", "ansible-playbook main",
                                            "ansible-playbook fork"]
    assert rows[2][:4] == ["1.0", "7", "%", "2"]
    fork_only = acct.summarize(fleet_and_controller(), since=21, until=22)
    assert "(4 processes, 1 CPU-s recorded)" in fork_only
    assert "ansible-playbook main" not in fork_only
    assert "fleet host: python3" in fork_only


def test_the_summary_folds_the_rest_after_top():
    text = acct.summarize(fleet_and_controller(), top=2)
    assert text.splitlines()[-1].split()[-3:] == ["(8", "more", "categories)"]


# names itself (prctl PR_SET_NAME: the command its record keeps), then spins for 0.6 CPU-s
SPIN = ("import ctypes, time\nctypes.CDLL(None).prctl(15, b'cpu-acct-spin', 0, 0, 0)\n"
        "end = time.process_time() + 0.6\nwhile time.process_time() < end: pass\n")


def assert_spun(process) -> None:
    """The spin's record holds some CPU time, and no more than its own elapsed time (one thread), so
    acct(2) is on for the child and its CPU is read in seconds, not ticks (the packed records above check
    the decoding exactly). No lower share of the 0.6 CPU-s spun: acct(2) keeps CPU sampled per scheduler
    tick, and with the cores busy the samples miss a process that enters the kernel often, as this one
    does to read its CPU clock (CI recorded 0.23 s of a 0.4 s spin; here, beside four user-space spinners
    on two cores, 0.11 s of 0.6 s)."""
    assert 0 < process.cpu <= process.elapsed + 0.05, process



def spins(file: Path) -> list:
    return [p for p in acct.parse(file.read_bytes()) if p.command == "cpu-acct-spin"]


def accounted(file: Path, code: str) -> subprocess.CompletedProcess:
    """``cpu_accounting.py run --file FILE -- python -c CODE``, its output captured."""
    return subprocess.run([sys.executable, str(SCRIPT), "run", "--file", str(file), "--",
                           sys.executable, "-c", code],
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_command_under_accounting_is_recorded_with_its_cpu(tmp_path):
    """Real acct(2): a child that spins shows up with its CPU, and accounting is off afterwards."""
    require(os.geteuid() == 0, "acct(2) needs root (CI runs as root)")
    outer = os.environ.get(acct.ACCOUNTING_ENV)
    if outer:  # this suite runs under `cpu_accounting.py run`: switching here would end that run's records
        before = len(spins(Path(outer)))
        subprocess.run([sys.executable, "-c", SPIN], check=True, timeout=60)
        recorded = spins(Path(outer))[before:]
        assert len(recorded) == 1
        assert_spun(recorded[0])
        return
    file = tmp_path / "acct"
    result = accounted(file, SPIN)
    assert result.returncode == 0, result.stderr
    recorded = spins(file)
    assert len(recorded) == 1, result.stdout
    assert_spun(recorded[0])
    assert "controller: cpu-acct-spin" in result.stdout
    # switched off again: a process that ends now is not appended
    size = file.stat().st_size
    subprocess.run(["/bin/true"], check=True)
    assert file.stat().st_size == size


def test_records_that_stop_before_the_command_ends_are_called_incomplete(tmp_path):
    """Real acct(2): a command that switches accounting off (as another run would) passes, yet the run
    exits INCOMPLETE and says when its records stop, instead of printing part of the figures as all."""
    require(os.geteuid() == 0, "acct(2) needs root (CI runs as root)")
    require(not os.environ.get(acct.ACCOUNTING_ENV),
            "under `cpu_accounting.py run`: switching accounting here would end that run's records")
    file = tmp_path / "acct"
    off = "import ctypes\nassert ctypes.CDLL(None).acct(None) == 0\n"
    result = accounted(file, off)
    assert result.returncode == acct.INCOMPLETE, result.stderr
    assert "cpu_accounting: INCOMPLETE: the records stop at " in result.stderr
    assert "CPU seconds by process" in result.stdout
    # and a command that fails keeps its own status
    failing = accounted(file, off + "raise SystemExit(7)\n")
    assert failing.returncode == 7, failing.stderr
    assert "INCOMPLETE" in failing.stderr


def test_a_kernel_without_accounting_is_named(monkeypatch):
    monkeypatch.setattr(acct.Path, "exists", lambda self: False)
    with pytest.raises(acct.AccountingError, match="no BSD process accounting"):
        acct.switch(None)


def test_a_refused_switch_says_why_and_asks_for_root_on_eperm(monkeypatch):
    class Libc:  # acct(2) answering -1 as it does for a user without CAP_SYS_PACCT
        def acct(self, path):
            return -1
    monkeypatch.setattr(acct.ctypes, "CDLL", lambda name, use_errno=False: Libc())
    monkeypatch.setattr(acct.ctypes, "get_errno", lambda: 1)
    with pytest.raises(acct.AccountingError, match=r"acct\(/x\): Operation not permitted \(run as root\)"):
        acct.switch(Path("/x"))
