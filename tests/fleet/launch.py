"""Launcher for one fleet process (a host's systemd-nspawn, or the wheelhouse server). Stdlib only.

Protocol with the harness, which makes a killed harness leak nothing:
1. the harness starts this launcher with stdin a pipe, records its PID in the fleet state, then
   writes ``go`` to it; if the harness dies before that, stdin reaches EOF and the launcher exits
   having done nothing;
2. the launcher moves itself into its cgroups (recorded in the state too, so teardown finds every
   process the payload ever forks);
3. with ``--overlay`` it mounts the host's root in a private mount namespace, so the mount vanishes
   with the host's processes and never shows in the machine's mount table; there it also detaches
   other fleets' /run/netns entries, which would otherwise pin their namespaces alive;
4. it execs the payload (same PID); with ``--restart-on-reboot`` (hosts) it instead stays as the
   payload's parent and starts it again when systemd-nspawn exits with status 133, which is how nspawn
   reports that the container asked for a reboot (it never reboots a container by itself). The recorded
   PID is then this launcher's: it keeps the cgroups and the private mount namespace (the overlay) alive
   across reboots, and it forwards SIGTERM/SIGINT to nspawn and exits with it, so teardown's "SIGTERM
   the recorded PID, then empty the cgroups" still powers the host off and leaves nothing.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import subprocess
import sys
import time

CLONE_NEWNS = 0x00020000
MS_REC = 0x4000
MS_PRIVATE = 1 << 18
MNT_DETACH = 2
NSPAWN_REBOOT_STATUS = 133  # systemd-nspawn: "the container requested a reboot"


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        sys.exit(f"fleet launcher: {what} failed: {os.strerror(err)}")


def supervise(command: list) -> int:
    """Run ``command`` (systemd-nspawn) until it exits for a reason other than a reboot request."""
    stopping = False
    child = None

    def forward(signum, _frame):
        nonlocal stopping
        stopping = True  # a stop asked while the container reboots must not start it again
        if child is not None and child.poll() is None:
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, forward)
    while True:
        child = subprocess.Popen(command)
        if stopping:  # the signal came between the check below and Popen
            child.send_signal(signal.SIGTERM)
        status = child.wait()
        if status != NSPAWN_REBOOT_STATUS or stopping:
            return status
        print(f"fleet launcher: the container rebooted (nspawn exit status {status}); starting it again",
              flush=True)
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cgroup", action="append", default=[], help="cgroup directory to join")
    parser.add_argument("--overlay", help="LOWER:UPPER:WORK:TARGET, mounted in a private mount namespace")
    parser.add_argument("--keep-netns", help="the one /run/netns entry to keep in that namespace")
    parser.add_argument("--restart-on-reboot", action="store_true",
                        help="restart the payload (systemd-nspawn) when it exits with status 133")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    if sys.stdin.readline().strip() != "go":
        sys.exit(1)  # the harness died before recording us: start nothing
    for group in args.cgroup:
        with open(os.path.join(group, "cgroup.procs"), "w") as procs:
            procs.write(str(os.getpid()))
    if args.overlay:
        libc = ctypes.CDLL(None, use_errno=True)
        lower, upper, work, target = args.overlay.split(":")
        _check(libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
        _check(libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "making / private")
        options = f"lowerdir={lower},upperdir={upper},workdir={work}".encode()
        _check(libc.mount(b"overlay", target.encode(), b"overlay", 0, options), f"overlay mount on {target}")
        if os.path.isdir("/run/netns"):
            for entry in os.listdir("/run/netns"):
                if entry != args.keep_netns:
                    libc.umount2(os.path.join("/run/netns", entry).encode(), MNT_DETACH)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.restart_on_reboot:
        sys.exit(supervise(command))
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
