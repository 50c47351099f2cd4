"""Command line: ``python tests/fleet up|down|status|gc|base`` (run as root from the repository root)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as `python tests/fleet`: import the package from tests/
    sys.path[0] = str(Path(__file__).resolve().parent.parent)

from fleet.base import ensure_base
from fleet.core import Fleet, gc
from fleet.state import all_names
from fleet.system import FleetError, is_alive


def _status(name: str) -> dict:
    fleet = Fleet(name)
    data = fleet.state.data if fleet.state else {}
    return {"name": name, "phase": data.get("phase"), "subnet": data.get("subnet"),
            "owner_pid": (data.get("owner") or {}).get("pid"),
            "inventory": str(fleet.inventory), "key": str(fleet.key),
            "wheelhouse_url": fleet.wheelhouse_url if fleet.state else None,
            "hosts": [{"name": h["name"], "ip": h["ip"], "pid": h["pid"],
                       "running": is_alive(h["pid"], h["start"])} for h in data.get("hosts", [])]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/fleet", description=__doc__)
    sub = parser.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="boot hosts and write an inventory")
    up.add_argument("--name", default="dev", help="fleet name, 1-9 of [a-z0-9] (default: dev)")
    group = up.add_mutually_exclusive_group()
    group.add_argument("--hosts", type=int, default=3, help="number of hosts, named NAME-1..N (default 3)")
    group.add_argument("--host", action="append", dest="host_names", metavar="HOSTNAME",
                       help="explicit host name (repeat)")
    up.add_argument("--wheelhouse", type=Path, help="wheel directory served to the hosts "
                    "(default: the shared cache wheelhouse)")
    up.add_argument("--wheel", action="append", default=[], metavar="SPEC",
                    help="download this requirement (name==version) into the wheelhouse first (repeat)")
    up.add_argument("--wheels-file", type=Path, help="a requirements file of wheels to download first")
    up.add_argument("--with-deps", action="store_true", help="also download the wheels' dependencies")
    up.add_argument("--no-cuda", action="store_true", help="do not bind-mount the machine's CUDA toolkit")
    up.add_argument("--replace", action="store_true", help="tear down a fleet of that name first")
    up.add_argument("--owner-pid", type=int, metavar="PID",
                    help="a process (a test session) whose end makes the fleet garbage for `gc`")
    up.add_argument("--json", action="store_true", help="print the fleet as JSON")
    down = sub.add_parser("down", help="stop hosts and remove everything recorded in the fleet's state")
    target = down.add_mutually_exclusive_group()
    target.add_argument("--name", default="dev")
    target.add_argument("--all", action="store_true", help="every fleet with state in the cache")
    status = sub.add_parser("status", help="fleets, their hosts and inventories")
    status.add_argument("--name")
    sub.add_parser("gc", help="tear down fleets whose owner process (a test session) is gone")
    base = sub.add_parser("base", help="build or restore the cached base rootfs")
    base.add_argument("--rebuild", action="store_true")
    args = parser.parse_args(argv)

    try:
        if args.cmd == "up":
            wheels = list(args.wheel)
            if args.wheels_file:
                wheels += [w.split("#")[0].strip() for w in args.wheels_file.read_text().splitlines()
                           if w.split("#")[0].strip()]
            fleet = Fleet(args.name).up(args.host_names or args.hosts, wheel_dir=args.wheelhouse,
                                        wheels=wheels, wheel_deps=args.with_deps, cuda=not args.no_cuda,
                                        owner_pid=args.owner_pid, replace=args.replace)
            info = _status(args.name)
            if args.json:
                print(json.dumps(info))
            else:
                for h in info["hosts"]:
                    print(f"{h['name']:<20} {h['ip']}")
                print(f"inventory: {fleet.inventory}\n"
                      f"try:       ansible -i {fleet.inventory} all -m ansible.builtin.ping\n"
                      f"play:      ANSIBLE_CACHE_PLUGIN=memory ansible-playbook -i {fleet.inventory} PLAYBOOK"
                      f"  (host names recur: no facts cached on disk)\n"
                      f"ssh:       ssh -i {fleet.key} -o StrictHostKeyChecking=no "
                      f"-o UserKnownHostsFile=/dev/null root@{info['hosts'][0]['ip']}\n"
                      f"remove:    python tests/fleet down --name {args.name}")
        elif args.cmd == "down":
            for name in all_names() if args.all else [args.name]:
                had_state = Fleet(name).down()
                print(f"fleet {name}: " + ("down, nothing left" if had_state else "no state, nothing to do"))
        elif args.cmd == "status":
            print(json.dumps([_status(n) for n in ([args.name] if args.name else all_names())], indent=1))
        elif args.cmd == "gc":
            print("removed: " + (" ".join(gc()) or "nothing"))
        elif args.cmd == "base":
            print(ensure_base(rebuild=args.rebuild))
    except FleetError as exc:
        print("\n".join([f"fleet: error: {exc}", *getattr(exc, "__notes__", [])]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
