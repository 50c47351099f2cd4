"""site.yml installs the real locked stack (profiles/pylock.stable.toml) on a fleet host.

The wheelhouse the fleet serves is filled from the lock itself (the same files, by name and sha256),
so the host installs exactly what `make site` installs for a user: sglang 0.5.23 with torch 2.14.1,
flashinfer and every dependency the lock holds. The host is made hostile first: a global pip.conf and
uv.toml naming an index that does not exist and constraints that would refuse the stack, and the same
as PIP_* / UV_* variables in its login environment; the controller's environment gets them too. The
stack must come out exactly the lock's set all the same, and a second run changes nothing.

The host is this module's own (a fleet of one, torn down at its end). The module runs last in the
session fleet's lane, when that fleet and the stacks on it are gone, so the real stack has the disk (a CI
machine ran out of it here).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from ansible_run import REPO_ROOT, run_on_fleet
from fleet import Fleet
from fleet_present import checked_fleet
from lockwheels import fill_from_lock, stack_versions
from pins import UV_BIN
from stackrun import SITE, fill_wheelhouse

pytestmark = pytest.mark.integration

LOCK = REPO_ROOT / "profiles" / "pylock.stable.toml"
ROOT = "/opt/sglang/locked"
NOWHERE = "http://192.0.2.1:9/simple"  # TEST-NET-1: never answers
HOSTILE = {
    "/etc/pip.conf": f"[global]\nindex-url = {NOWHERE}\nconstraint = /etc/hostile-constraints.txt\n",
    "/etc/hostile-constraints.txt": "torch<=2.0\nsglang<0.5\nnumpy<1\n",
    "/etc/uv/uv.toml": f'index-url = "{NOWHERE}"\nconstraint-dependencies = ["torch<=2.0"]\n',
    "/etc/environment": (
        f"PIP_INDEX_URL={NOWHERE}\nPIP_CONSTRAINT=/etc/hostile-constraints.txt\n"
        f"UV_INDEX_URL={NOWHERE}\nUV_CONSTRAINT=/etc/hostile-constraints.txt\n"
    ),
}


@pytest.fixture(scope="module")
def own_fleet(fleet_base):
    """One host of this module's own, torn down at its end (checked on the machine)."""
    with checked_fleet(Fleet(f"l{os.getpid() % 10**8}"), 1, "the locked install's fleet") as fleet:
        yield fleet


@pytest.fixture(scope="module")
def locked(own_fleet, tmp_path_factory):
    fleet = own_fleet
    fill_wheelhouse()  # the kernel role's build tools
    house = fill_from_lock()  # the lock's files into the served wheelhouse (once per cache)
    host = fleet.hosts[0]["name"]
    for path, content in HOSTILE.items():
        fleet.ssh(host, f"mkdir -p {Path(path).parent} && cat > {path} <<'EOF'\n{content}EOF")
    hostile_controller = tmp_path_factory.mktemp("hostile") / "pip.conf"
    hostile_controller.write_text(HOSTILE["/etc/pip.conf"])
    envvars = {
        "PIP_CONFIG_FILE": str(hostile_controller),
        "PIP_INDEX_URL": NOWHERE,
        "UV_INDEX_URL": NOWHERE,
        "UV_CONSTRAINT": "/etc/hostile-constraints.txt",
    }
    extravars = {
        "stack_root": ROOT,
        "stack_find_links": [fleet.wheelhouse_url],
        "stack_no_index": True,
        "stack_wheel_cache_dir": str(house),
        "stack_min_free_gb": 8,
        "pytorch_index_url": "",
    }

    def run():
        return run_on_fleet(SITE, fleet.inventory, extravars=extravars, limit=host, envvars=envvars)

    first = run()
    second = run() if first.rc == 0 else None
    return {"host": host, "first": first, "second": second}


def test_the_locked_stack_installs_under_hostile_pip_and_uv_configuration(locked):
    first = locked["first"]
    assert first.rc == 0, first.stdout[-6000:]


def test_the_installed_set_is_exactly_the_lock(locked, own_fleet):
    host = locked["host"]
    listed = own_fleet.ssh(
        host, f"{UV_BIN} pip list --format=json --python {ROOT}/current/bin/python"
    )
    installed = {
        item["name"].lower().replace("_", "-"): item["version"] for item in json.loads(listed.stdout)
    }
    # the kernel stage reinstalls the same released wheel from its artifact store (same name and version)
    assert installed == stack_versions()


def test_the_stack_imports_sglang_server_args(locked, own_fleet):
    out = own_fleet.ssh(
        locked["host"],
        f"{ROOT}/current/bin/python -c 'import sglang, sglang.srt.server_args, torch; "
        "print(sglang.__version__, torch.__version__)'",
        timeout=300,
    )
    assert out.stdout.split() == ["0.5.23", "2.14.1+cu130"]


def test_the_stack_records_its_lock(locked, own_fleet):
    host = locked["host"]
    manifest = json.loads(own_fleet.ssh(host, f"cat {ROOT}/current/stack.json").stdout)
    assert len(manifest["fingerprint_inputs"]["lock_sha256"]) == 64
    copied = own_fleet.ssh(host, f"sha256sum {ROOT}/current/pylock.toml").stdout.split()[0]
    assert (
        copied
        == hashlib.sha256(LOCK.read_bytes()).hexdigest()
        == manifest["fingerprint_inputs"]["lock_sha256"]
    )


def test_a_second_run_changes_nothing(locked):
    second = locked["second"]
    assert second is not None, "the first run failed"
    assert second.rc == 0, second.stdout[-4000:]
    assert second.stats["changed"].get(locked["host"], 0) == 0, [
        res["task"] for res in second.results[locked["host"]] if res.get("changed")
    ]
