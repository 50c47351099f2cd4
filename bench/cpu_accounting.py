"""Where CI's CPU goes: BSD process accounting over a command, summed by process tree.

    sudo .venv/bin/python bench/cpu_accounting.py run [--file FILE] -- bash .ci/run
    .venv/bin/python bench/cpu_accounting.py summary FILE [--since EPOCH] [--until EPOCH]

Why: `make test` on the 2-core CI machine keeps both cores about 95 % busy through its pytest stages
(sampled from /proc/stat every 10 s, 2026-12-05), so wall time falls only where CPU work goes away;
overlapping more work (more xdist workers, more lanes) does not help. `bench/ci_timing.py` says which
tests take long; this says which processes burn the CPU: the fleet hosts' module runs, the controller's
ansible-playbook processes (the main process and its per-task forks), the pytest workers, compilers, uv.

`run` switches the kernel's process accounting (acct(2), root only) to FILE (default
.cache/cpu-accounting/acct), runs the command, switches accounting off again and prints the summary.
Accounting is machine-wide: every process that ends meanwhile is recorded, not only the command's, and
there is one accounting file at a time: anything that switches accounting during the run (another `run`,
a test that switches it) ends this run's records. `run` checks that a process it starts after the command
is in its file, and says INCOMPLETE (exit 3 when the command passed) when it is not.
`summary` reads an existing FILE; --since/--until keep the processes started in that window (e.g. the
fleet stage: its start time from the `.ci/run` log).

What the records can and cannot say (acct_v3, linux/acct.h):
- one record per process, written when it exits, with its own user+system CPU (not its children's);
  a process still running when accounting stops is missing;
- CPU in 1/100 s, truncated per process: many very short processes (sh, sleep) add up to less than
  they cost;
- kernel threads' work for the processes (overlayfs copy-up, networking) is not in any record;
- CPU is sampled per scheduler tick (CONFIG_TICK_CPU_ACCOUNTING, as on the CI machine's kernel), and when
  the cores are contended the samples favour processes that stay in user space over ones that enter the
  kernel often: beside pure user-space spinners on 2 cores, a process reading its CPU clock by syscall in a
  loop was recorded with 21-22 % of its CPU and the spinners with 110-115 %; with every process alike,
  100-106 % (2026-12-05). Totals hold; shares between kinds of processes are approximate.
A process is a fleet host's when a systemd-nspawn is among its ancestors; an ansible-playbook whose
parent is another ansible-playbook is a fork (one per task and host); an ssh client with an
ansible-playbook ancestor is ansible's connection.
"""

from __future__ import annotations

import argparse
import collections
import ctypes
import os
import struct
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

RECORD = struct.Struct("<BBHIIIIIIfHHHHHHHH16s")  # struct acct_v3: 64 bytes
ACCT_V3 = 3
AHZ = 100  # the kernel's accounting clock (ticks per second) on Linux
DEFAULT_FILE = Path(".cache") / "cpu-accounting" / "acct"
HOST_ANCESTOR = "systemd-nspawn"
ANSIBLE = "ansible-playboo"  # the kernel keeps 15 characters of a command's name
# set for the accounted command: a test that would switch accounting itself checks against this file instead
# (switching would end the outer run's records)
ACCOUNTING_ENV = "SGLANG_CPU_ACCOUNTING"
INCOMPLETE = 3  # run's exit status when the command passed but its records stop early


class AccountingError(Exception):
    """Accounting cannot be switched or read; the message says why and what to do."""


@dataclass(frozen=True)
class Process:
    pid: int
    ppid: int
    start: int        # seconds since the epoch
    elapsed: float    # seconds
    cpu: float        # user + system seconds, this process only
    command: str


def comp_t(value: int) -> int:
    """Decode a comp_t: a 13-bit mantissa and a 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * ((value >> 13) & 0x7))


def parse(data: bytes) -> List[Process]:
    """The acct_v3 records in ``data`` (an accounting file's bytes)."""
    if len(data) % RECORD.size:
        raise AccountingError(f"{len(data)} bytes is not a whole number of {RECORD.size}-byte acct_v3 "
                              "records")
    processes = []
    for offset in range(0, len(data), RECORD.size):
        fields = RECORD.unpack_from(data, offset)
        version = fields[1] & 0x0F
        if version != ACCT_V3:
            raise AccountingError(f"record at byte {offset} is acct version {version}, not {ACCT_V3} "
                                  "(acct_v3)")
        pid, ppid, start, elapsed = fields[6], fields[7], fields[8], fields[9]
        utime, stime = fields[10], fields[11]
        command = fields[18].split(b"\0", 1)[0].decode("utf-8", "replace")
        processes.append(Process(pid, ppid, start, elapsed / AHZ, (comp_t(utime) + comp_t(stime)) / AHZ,
                                 command))
    return processes


class Tree:
    """Parents by pid; a pid the kernel reused is told apart by start time (a parent started first)."""

    def __init__(self, processes: Sequence[Process]):
        self._by_pid: Dict[int, List[Process]] = collections.defaultdict(list)
        for process in processes:
            self._by_pid[process.pid].append(process)
        for same_pid in self._by_pid.values():
            same_pid.sort(key=lambda p: p.start)

    def parent(self, process: Process) -> Optional[Process]:
        # start is whole seconds, so a parent may look up to a second younger than its child
        candidates = [p for p in self._by_pid.get(process.ppid, ()) if p.start <= process.start + 1]
        return candidates[-1] if candidates else None

    def ancestors(self, process: Process) -> Iterator[Process]:
        seen = set()
        parent = self.parent(process)
        while parent is not None and id(parent) not in seen:
            seen.add(id(parent))
            yield parent
            parent = self.parent(parent)


def category(tree: Tree, process: Process) -> str:
    """Where a process's CPU counts (see the module docstring)."""
    ancestors = [p.command for p in tree.ancestors(process)]
    if HOST_ANCESTOR in ancestors:
        return f"fleet host: {process.command}"
    if process.command == ANSIBLE:
        return "ansible-playbook fork" if ancestors[:1] == [ANSIBLE] else "ansible-playbook main"
    if process.command == "ssh" and ANSIBLE in ancestors:
        return "ssh (ansible's connection)"
    return f"controller: {process.command}"


def summarize(processes: Sequence[Process], *, since: Optional[int] = None, until: Optional[int] = None,
              top: int = 20) -> str:
    """The CPU seconds per category, largest first, with the fleet hosts' total."""
    tree = Tree(processes)
    kept = [p for p in processes
            if (since is None or p.start >= since) and (until is None or p.start < until)]
    seconds: Dict[str, float] = collections.Counter()
    counts: Dict[str, int] = collections.Counter()
    for process in kept:
        name = category(tree, process)
        seconds[name] += process.cpu
        counts[name] += 1
    total = sum(seconds.values())
    hosts = sum(v for k, v in seconds.items() if k.startswith("fleet host: "))
    ansible = sum(v for k, v in seconds.items() if k.startswith("ansible-playbook"))
    lines = [f"CPU seconds by process ({len(kept)} processes, {total:.0f} CPU-s recorded)",
             f"  fleet hosts {hosts:.0f} ({_share(hosts, total)}), controller ansible-playbook {ansible:.0f} "
             f"({_share(ansible, total)}), other controller {total - hosts - ansible:.0f} "
             f"({_share(total - hosts - ansible, total)})",
             f"  {'CPU-s':>9} {'share':>6} {'processes':>9}  category"]
    for name, value in sorted(seconds.items(), key=lambda item: (-item[1], item[0]))[:top]:
        lines.append(f"  {value:9.1f} {_share(value, total):>6} {counts[name]:9d}  {name}")
    if len(seconds) > top:
        rest = sorted(seconds.values(), reverse=True)[top:]
        lines.append(f"  {sum(rest):9.1f} {_share(sum(rest), total):>6} {'':9}  "
                     f"({len(rest)} more categories)")
    return "\n".join(lines)


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f} %" if whole else "-"


def switch(path: Optional[Path]) -> None:
    """Point the kernel's process accounting at ``path`` (None: off)."""
    if not Path("/proc/sys/kernel/acct").exists():
        raise AccountingError("this kernel has no BSD process accounting (CONFIG_BSD_PROCESS_ACCT)")
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.acct(None if path is None else os.fsencode(path)) != 0:
        errno = ctypes.get_errno()
        hint = " (run as root)" if errno == 1 else ""
        raise AccountingError(f"acct({path or 'NULL'}): {os.strerror(errno)}{hint}")


def _marker() -> int:
    """Run a process that ends at once; its pid, to look for its record."""
    marker = subprocess.Popen(["true"])
    marker.wait()
    return marker.pid


def run(command: Sequence[str], path: Path) -> int:
    """Account ``command``; its exit status, or INCOMPLETE when it passed but the records stop early."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")  # acct(2) appends to an existing file
    switch(path)
    try:
        status = subprocess.call(list(command), env={**os.environ, ACCOUNTING_ENV: str(path)})
        last = _marker()  # ends while accounting is on: its record shows nothing switched it away
    finally:
        switch(None)
    processes = parse(path.read_bytes())
    print(summarize(processes))
    print(f"records: {path} (bench/cpu_accounting.py summary {path} --since/--until EPOCH for a window)")
    if not any(p.pid == last and p.command == "true" for p in processes):
        end = max((p.start + p.elapsed for p in processes), default=None)
        until = time.strftime("%H:%M:%S", time.localtime(end)) if end is not None else "its start"
        print(f"cpu_accounting: INCOMPLETE: the records stop at {until}, before the command ended: something "
              "switched accounting off or to another file meanwhile (acct(2) is machine-wide, one file at a "
              "time; e.g. another `cpu_accounting.py run`); the figures above cover only that part",
              file=sys.stderr)
        return status or INCOMPLETE
    return status


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = parser.add_subparsers(dest="action", required=True)
    run_parser = sub.add_parser("run", help="account a command's run (root)")
    run_parser.add_argument("--file", type=Path, default=DEFAULT_FILE)
    run_parser.add_argument("command", nargs=argparse.REMAINDER)
    summary_parser = sub.add_parser("summary", help="summarize an accounting file")
    summary_parser.add_argument("file", type=Path)
    summary_parser.add_argument("--since", type=int, help="keep processes started at or after EPOCH")
    summary_parser.add_argument("--until", type=int, help="keep processes started before EPOCH")
    summary_parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)
    try:
        if args.action == "run":
            command = args.command[1:] if args.command[:1] == ["--"] else args.command
            if not command:
                parser.error("run needs a command after --")
            return run(command, args.file)
        print(summarize(parse(args.file.read_bytes()), since=args.since, until=args.until, top=args.top))
        return 0
    except (AccountingError, OSError) as exc:
        print(f"cpu_accounting: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
