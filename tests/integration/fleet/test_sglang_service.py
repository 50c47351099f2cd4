"""Role sglang_service on the test fleet under real systemd, with the stand-in model server
(tests/stand_ins/sglang-server: the real sglang 0.5.23 parser, then a fake model) and the REAL smg 1.13.0
gateway. Hosts: 1 and 2 are replicas (and a 2-node tensor-parallel pair), 3 is the gateway.
"""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request

import pytest
from ansible_run import run_on_fleet
from documented import assert_documented
from service_stack import (
    API_KEY,
    GATEWAY_PORT,
    MAIN,
    PAIR,
    download_wheels,
    prepare_stack,
    role_vars,
    site,
    write_inventory,
)

pytestmark = pytest.mark.integration
RENDER_TASK = "Render the command line of every served model (rejects an invalid entry, naming the variable)"
ROUTE_TASK = ("Send requests through the gateway; every worker in rotation must answer one, "
              "none out of rotation")
AUTH = {"Authorization": f"Bearer {API_KEY}"}


@pytest.fixture(scope="module")
def hosts(fleet):
    return [h["name"] for h in fleet.hosts]


@pytest.fixture(scope="module")
def inventory(fleet, tmp_path_factory):
    return write_inventory(fleet, tmp_path_factory.mktemp("inventory"))


@pytest.fixture(scope="module")
def play(inventory):
    def run(plays, **kwargs):
        return run_on_fleet(plays, inventory, **kwargs)
    return run


@pytest.fixture(scope="module")
def first_run(fleet, play):
    download_wheels()
    start = time.monotonic()
    result = play(site(fleet))
    result.seconds = time.monotonic() - start
    return result


def _show(fleet, host, unit):
    out = fleet.ssh(host, f"systemctl show --property=MainPID,ActiveState,NRestarts,User {unit}").stdout
    return dict(line.split("=", 1) for line in out.splitlines())


def _http(url, body=None, timeout=10, headers=AUTH):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def _status(url, body=None, headers=None):
    """The HTTP status of one request (the body is sglang's / smg's; only the status matters here)."""
    try:
        _http(url, body, headers=headers or {})
    except urllib.error.HTTPError as exc:
        return exc.code
    return 200


def _no_key_in(result):
    """The API key shows nowhere in what a play printed or returned."""
    assert API_KEY not in result.stdout
    assert API_KEY not in json.dumps(result.results)


def _progress(result, host, unit):
    return [r["msg"] for r in result.results[host] if r["task"] == f"Progress of sglang-{unit}"]


def test_first_run_serves_every_model(first_run, fleet, hosts):
    print(f"first run: {first_run.seconds:.0f} s")
    assert first_run.rc == 0, first_run.stdout[-6000:]
    h1, h2, _ = hosts
    for host, units in ((h1, ["main", "slow", "pair"]), (h2, ["main", "pair"])):
        for unit in units:
            state = _show(fleet, host, f"sglang-{unit}.service")
            assert state["ActiveState"] == "active", (host, unit, state)
            # the unit runs as the service user, not root
            user = fleet.ssh(host, f"ps -o user= -p {state['MainPID']}").stdout.strip()
            assert user == "sglang", (host, unit, user)


def test_gate_shows_progress_and_waits_for_a_slow_start(first_run, hosts):
    h1 = hosts[0]
    lines = _progress(first_run, h1, "slow")
    print("\n".join(lines))
    assert len(lines) >= 3, lines
    progress = re.compile(r"elapsed \d+ s of 90 s: http://127\.0\.0\.1:30001/health_generate")
    assert all(progress.match(x) for x in lines)
    assert "last log: " in lines[0]
    assert "-> 200" in lines[-1]
    # the stand-in loads for 12 s: the gate saw it loading, then ready
    assert all("-> 503" in x for x in lines[:-1])
    assert any("loading" in x or "Load weight" in x for x in lines[:-1])


def test_multi_node_ranks_and_gate_on_rank_0(first_run, fleet, hosts):
    h1, h2, _ = hosts
    address = {h["name"]: h["ip"] for h in fleet.hosts}
    rendered = {h: {r["item"]["name"]: r for r in first_run.task(
        h, RENDER_TASK)["results"]}
        for h in (h1, h2)}
    for rank, host in enumerate((h1, h2)):
        args = rendered[host]["pair"]["args"]
        assert args[args.index("--nnodes") + 1] == "2"
        assert args[args.index("--node-rank") + 1] == str(rank)
        assert args[args.index("--dist-init-addr") + 1] == f"{address[h1]}:50000"
    # the gate polled rank 0 only; rank 1 runs (the stand-in's rank 1 joins and serves no HTTP)
    assert _progress(first_run, h1, "pair")
    assert not _progress(first_run, h2, "pair")
    journal = fleet.ssh(h2, "journalctl -u sglang-pair.service -o cat --no-pager").stdout
    assert f"node rank 1: joining {address[h1]}:50000" in journal


def test_gateway_gate_routed_a_request_to_every_worker(first_run, fleet, hosts):
    h1, h2, h3 = hosts
    routed = first_run.task(h3, ROUTE_TASK)
    print(routed["msg"], routed["workers"])
    assert_documented("smg_route_check", routed)
    assert routed["ok"] is True
    rows = {row["id"]: row for row in routed["workers"]}
    assert set(rows) == {f"{h1}-main", f"{h2}-main"}
    assert all(row["succeeded"] >= 1 and row["in_rotation"] for row in rows.values())
    # the workers' own counters agree: each served at least one generation (only the gate sent any yet)
    address = {h["name"]: h["ip"] for h in fleet.hosts}
    for host in (h1, h2):
        assert _http(f"http://{address[host]}:30000/stand_in/stats")["served"] >= 1, host


def test_api_keys_refuse_without_and_pass_with_directly_and_through_the_gateway(first_run, fleet, hosts):
    h1, _, h3 = hosts
    address = {h["name"]: h["ip"] for h in fleet.hosts}
    body = {"model": "/models/stand-in", "messages": [{"role": "user", "content": "hi"}]}
    for url in (f"http://{address[h1]}:30000/v1/chat/completions",
                f"http://{address[h3]}:{GATEWAY_PORT}/v1/chat/completions"):
        assert _status(url, body) == 401, url
        assert _status(url, body, {"Authorization": "Bearer wrong"}) == 401, url
        assert _status(url, body, AUTH) == 200, url
    # sglang asks no key for health (the gate and smg's health checks rely on that)
    assert _status(f"http://{address[h1]}:30000/health") == 200
    # the key lives in root-only files and never shows in a play's output
    for host, path in ((h1, "/etc/sglang/main.env"), (h3, "/etc/sglang/smg.env")):
        assert fleet.ssh(host, f"stat -c '%a %U' {path}").stdout.split() == ["600", "root"], (host, path)
        assert API_KEY in fleet.ssh(host, f"cat {path}").stdout
    _no_key_in(first_run)


def test_second_run_changes_nothing(first_run, fleet, play):
    again = play(site(fleet))
    assert again.rc == 0, again.stdout[-4000:]
    assert not again.stats.get("changed"), again.stats
    _no_key_in(again)


def test_check_mode_after_converge_reports_no_change(first_run, fleet, play):
    # the role's plays only: the stand-in stack's pip task (a test fixture) always reports a change in
    # check mode (ansible.builtin.pip does so whenever extra_args is set)
    checked = play(site(fleet)[len(prepare_stack()):], check=True)
    assert checked.rc == 0, checked.stdout[-4000:]
    assert not checked.stats.get("changed"), checked.stats


def test_units_verify_and_security_exposure(first_run, fleet, hosts):
    figures = {}
    for host, unit in ((hosts[0], "sglang-main.service"), (hosts[2], "smg.service")):
        verify = fleet.ssh(host, f"systemd-analyze verify /etc/systemd/system/{unit}", check=False)
        assert verify.returncode == 0, (unit, verify.stdout, verify.stderr)
        security = fleet.ssh(host, f"systemd-analyze security --no-pager {unit}", check=False).stdout
        match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", security)
        assert match, security[-2000:]
        figures[unit] = float(match.group(1))
    print(f"systemd-analyze security exposure: {figures}")
    assert all(value <= 4.0 for value in figures.values()), figures


def _through_gateway(fleet, hosts, n):
    url = f"http://{ {h['name']: h['ip'] for h in fleet.hosts}[hosts[2]] }:{GATEWAY_PORT}/v1/chat/completions"
    body = {"model": "/models/stand-in", "messages": [{"role": "user", "content": "hi"}]}
    return [_http(url, body)["worker"]
            for _ in range(n)]


def _gateway_vars_play(fleet, tasks_from, **extra):
    return [{"name": tasks_from, "hosts": "sglang_gateway", "gather_facts": False,
             "vars": role_vars(fleet, **extra),
             "tasks": [{"name": tasks_from, "ansible.builtin.include_role": {"name": "sglang_service",
                                                                            "tasks_from": tasks_from}}]}]


def _rotation_play(fleet, host, *entry_points):
    """sglang_service's rotation entry points on a model host, as any playbook runs them: with the
    inventory's settings only (the gateway's, the models' key; the profile named, not loaded, and no stack
    role), which made the old put_back fail with "object of type 'str' has no attribute 'smg'"."""
    settings = {key: value for key, value in role_vars(fleet).items()
                if key.startswith("sglang_service_gateway_") or key == "sglang_service_api_key"}
    return [{"name": " + ".join(entry_points), "hosts": host, "gather_facts": False,
             "vars": {"stack_profile": "stable", **settings},
             "tasks": [{"name": entry_point, "ansible.builtin.include_role": {"name": "sglang_service",
                                                                              "tasks_from": entry_point}}
                       for entry_point in entry_points]}]


def test_gateway_routes_to_both_takes_out_puts_back_and_skips_unhealthy(first_run, fleet, hosts, play):
    h1, h2, _ = hosts
    served = lambda: {w.split(":")[0] for w in _through_gateway(fleet, hosts, 8)}  # noqa: E731
    assert served() == {h1, h2}
    out = play(_rotation_play(fleet, h2, "out_of_rotation", "drain"))
    assert out.rc == 0, out.stdout[-4000:]
    # out_of_rotation, run on h2, delegated its manifest change and routing check to the gateway: h1
    # answered, h2 (out of rotation) got none of its requests
    rows = {row["id"]: row for row in out.task(h2, ROUTE_TASK)["workers"]}
    assert rows[f"{h1}-main"]["succeeded"] >= 1
    assert rows[f"{h1}-main"]["in_rotation"]
    assert rows[f"{h2}-main"]["dispatched"] == 0
    assert not rows[f"{h2}-main"]["in_rotation"]
    assert served() == {h1}
    # the drain read the models h2 serves over HTTP at their own port: main (30000), not the pair (rank 1
    # there; its rank 0 is h1); this scenario's servers run without --enable-metrics, and it says so
    drained = out.task(h2, "Wait for the requests in flight of each model to finish")["results"]
    assert [(r["item"]["item"]["name"], r["url"]) for r in drained] == [("main", "http://127.0.0.1:30000/metrics")]
    said = out.task(h2, "Say how the drain went")["results"]
    assert [r["msg"] for r in said] == [
        "sglang-main: no /metrics (status 404; start the server with --enable-metrics to wait for requests "
        "in flight): not waiting, SIGTERM drains them"]
    back = play(_rotation_play(fleet, h2, "readiness", "into_rotation"))
    assert back.rc == 0, back.stdout[-4000:]
    gated = [r["msg"] for r in back.results[h2] if r["task"] == "Progress of sglang-main"]
    assert gated, "readiness gated main"
    assert all(row["succeeded"] >= 1 for row in back.task(h2, ROUTE_TASK)["workers"])
    assert served() == {h1, h2}
    _no_key_in(out)
    _no_key_in(back)
    # a worker whose health fails stops getting requests (smg health check: every 1 s, 2 failures)
    address = {h["name"]: h["ip"] for h in fleet.hosts}
    _http(f"http://{address[h1]}:30000/stand_in/unhealthy", {})
    try:
        deadline = time.monotonic() + 30
        while served() != {h2}:
            assert time.monotonic() < deadline, "the gateway kept routing to the unhealthy worker"
            time.sleep(1)
    finally:
        _http(f"http://{address[h1]}:30000/stand_in/healthy", {})


def test_gateway_gate_fails_naming_a_healthy_worker_that_answers_nothing(first_run, fleet, hosts, play):
    h1, h2, h3 = hosts
    address = {h["name"]: h["ip"] for h in fleet.hosts}
    # h2's worker stays healthy for smg (/health 200) but fails every generation; smg retries those on
    # h1, so every client request still gets 200: only the per-worker check can see it
    _http(f"http://{address[h2]}:30000/stand_in/refuse", {})
    try:
        # 2 rounds: a few failures only, below smg's circuit-breaker threshold (10)
        result = play(_gateway_vars_play(fleet, "gateway", sglang_service_gateway_gate_max_rounds=2))
    finally:
        _http(f"http://{address[h2]}:30000/stand_in/serve", {})
    assert result.rc != 0
    failed = result.task(h3, ROUTE_TASK)
    print(failed["msg"])
    assert f"worker {h2}-main (http://{address[h2]}:30000) got nothing: " in failed["msg"]
    assert "dispatched, none answered successfully" in failed["msg"]
    assert f"{h1}-main" not in failed["msg"]
    assert not result.stats.get("changed"), result.stats
    _no_key_in(result)


def test_gateway_refuses_replicas_with_another_api_key(first_run, fleet, hosts, play):
    """... before it changes anything."""
    h1, h3 = hosts[0], hosts[2]
    before = fleet.ssh(h3, "md5sum /etc/sglang/smg.env /var/lib/sglang/smg/workers.json").stdout
    result = play(_gateway_vars_play(fleet, "gateway", sglang_service_gateway_api_key="another-key"))
    assert result.rc != 0
    failed = result.task(h3, "Check that no replica requires an API key other than the gateway's")
    text = json.dumps(failed)
    assert f"host {h1}: its sglang_service_api_key differs from sglang_service_gateway_api_key" in text
    assert "another-key" not in result.stdout
    _no_key_in(result)
    assert fleet.ssh(h3, "md5sum /etc/sglang/smg.env /var/lib/sglang/smg/workers.json").stdout == before


def _one_model_play(fleet, model, **extra):
    # the other models on the host stay (they are not in this play's list): no removal here
    return [{"name": "One model", "hosts": "pair[0]", "gather_facts": False,
             "vars": role_vars(fleet, sglang_service_install=False, sglang_service_models=[model],
                               sglang_service_remove_unlisted=False, **extra),
             "roles": ["sglang_service"]}]


def test_gate_fails_within_its_bound_for_a_hang_with_diagnostics(first_run, fleet, hosts, play):
    # The stand-in parses its new command line with the real sglang parser before it "loads" and hangs
    # (3-5 CPU-s alone). With both cores busy that took about 15 s on 2026-12-07: a bound of 15 s expired
    # before "Load weight end": the bound leaves room for a slow parse, the hang still exceeds it.
    bound = 30
    model = {"name": "hung", "model_path": "/models/stand-in", "port": 30020,
             "env": {"SGLANG_STAND_IN_MODE": "hang"}}
    start = time.monotonic()
    result = play(_one_model_play(fleet, model, sglang_service_gate_bound=bound))
    took = time.monotonic() - start
    fleet.ssh(hosts[0], "systemctl stop sglang-hung.service")
    assert result.rc != 0
    failed = result.task(hosts[0], "Fail with the diagnosis of sglang-hung")
    text = "\n".join(str(x) for x in failed["msg"])
    print(text)
    assert "likely cause hang_after_load" in text
    assert "Load weight end" in text  # the journal tail
    assert "PID" in text  # the process tree
    assert "sglang_server_stand_in" in text
    assert "--api-key ********" in text  # the process tree, the key masked
    _no_key_in(result)
    assert "MainThread" in text  # py-spy's stack dump (py-spy is installed into the stack)
    gate = [r for r in result.results[hosts[0]] if r["task"] == "Probe sglang-hung"]
    assert bound <= gate[-1]["elapsed"] < bound + 5
    print(f"hang: gate bound {bound} s, failed after {gate[-1]['elapsed']} s; play {took:.0f} s")


def test_crash_fails_the_gate_and_systemd_restarts_it(first_run, fleet, hosts, play):
    model = {"name": "crashy", "model_path": "/models/stand-in", "port": 30021,
             "env": {"SGLANG_STAND_IN_MODE": "crash"}}
    result = play(_one_model_play(fleet, model))
    assert result.rc != 0
    text = "\n".join(str(x) for x in result.task(hosts[0], "Fail with the diagnosis of sglang-crashy")["msg"])
    assert "likely cause crash" in text
    assert "STAND-IN crash on start" in text
    state = _show(fleet, hosts[0], "sglang-crashy.service")
    fleet.ssh(hosts[0], "systemctl stop sglang-crashy.service")
    assert int(state["NRestarts"]) >= 1, state


def test_stop_is_bounded_when_the_drain_never_ends(first_run, fleet, hosts, play):
    model = {"name": "draining", "model_path": "/models/stand-in", "port": 30022,
             "env": {"SGLANG_STAND_IN_MODE": "drain-forever", "SGLANG_STAND_IN_DELAY": "1"}}
    result = play(_one_model_play(fleet, model, sglang_service_timeout_stop_sec=4))
    assert result.rc == 0, result.stdout[-3000:]
    start = time.monotonic()
    fleet.ssh(hosts[0], "systemctl stop sglang-draining.service")
    took = time.monotonic() - start
    journal = fleet.ssh(hosts[0], "journalctl -u sglang-draining.service -o cat --no-pager").stdout
    assert "SIGTERM: draining" in journal
    assert 3.5 < took < 10, took


DIRS_TASK = "Create the state and cache directories, owned by the service user"


def test_a_state_or_cache_directory_put_wrong_is_put_right_and_only_it(first_run, fleet, hosts, play):
    """The role reads its 9 directories at once and runs the file module only on those not right."""
    h1, state = hosts[0], "/var/lib/sglang"
    dirs = [state, f"{state}/cache/nv", f"{state}/cache/triton", f"{state}/cache/xdg"]
    stat = f"stat -c '%n %a %U:%G' {' '.join(dirs)}"
    right = [f"{path} 750 sglang:sglang" for path in dirs]
    assert fleet.ssh(h1, stat).stdout.splitlines() == right
    fleet.ssh(h1, f"chown root:root {state}/cache/triton && chmod 0755 {state}/cache/nv "
                  f"&& rm -rf {state}/cache/xdg")
    again = play(_one_model_play(fleet, MAIN))
    assert again.rc == 0, again.stdout[-4000:]
    fixed = again.task(h1, DIRS_TASK)["results"]
    assert sorted(item["item"] for item in fixed) == sorted(dirs[1:]), fixed
    assert all(item["changed"] for item in fixed), fixed
    assert fleet.ssh(h1, stat).stdout.splitlines() == right
    settled = play(_one_model_play(fleet, MAIN))
    assert settled.rc == 0, settled.stdout[-4000:]
    assert settled.task(h1, DIRS_TASK)["event"] == "runner_on_skipped"  # an empty loop: no file module run


MANAGED = "grep -l '^EnvironmentFile=/etc/sglang/' /etc/systemd/system/sglang-*.service 2>/dev/null || true"


def _managed_units(fleet, host):
    return sorted(line.rsplit("/", 1)[1] for line in fleet.ssh(host, MANAGED).stdout.split())


def test_units_of_models_no_longer_listed_are_removed(first_run, fleet, hosts, play):
    """Runs last: it removes h1's slow unit (and the units the tests above added on h1)."""
    h1 = hosts[0]
    # a unit the role did not make, named like one of its own: never touched
    fleet.ssh(h1, "printf '[Service]\\nExecStart=/bin/sleep infinity\\n' "
                  "> /etc/systemd/system/sglang-byhand.service "
                  "&& systemctl daemon-reload && systemctl start sglang-byhand.service")
    before = _managed_units(fleet, h1)
    assert {"sglang-main.service", "sglang-pair.service", "sglang-slow.service"} <= set(before), before
    kept = {unit: _show(fleet, h1, unit)["MainPID"]
            for unit in ("sglang-main.service", "sglang-pair.service")}
    listed = [{"name": "Models listed", "hosts": h1, "gather_facts": False,
               "vars": role_vars(fleet, sglang_service_install=False, sglang_service_models=[MAIN, PAIR]),
               "roles": ["sglang_service"]}]
    checked = play(listed, check=True)
    assert checked.rc == 0, checked.stdout[-4000:]
    assert checked.stats.get("changed"), "check mode did not say the units would go"
    assert _managed_units(fleet, h1) == before  # check mode removed nothing
    assert _show(fleet, h1, "sglang-slow.service")["ActiveState"] == "active"

    removed = play(listed)
    assert removed.rc == 0, removed.stdout[-4000:]
    gone = sorted(set(before) - {"sglang-main.service", "sglang-pair.service"})
    assert _managed_units(fleet, h1) == ["sglang-main.service", "sglang-pair.service"]
    for unit in gone:
        name = unit[len("sglang-"):-len(".service")]
        state = fleet.ssh(h1, f"systemctl show --property=LoadState,ActiveState,UnitFileState {unit}").stdout
        assert "LoadState=not-found" in state, (unit, state)
        assert "ActiveState=inactive" in state, (unit, state)
        assert fleet.ssh(h1, f"test -e /etc/sglang/{name}.env", check=False).returncode == 1, name
        assert fleet.ssh(h1, f"test -e /etc/systemd/system/multi-user.target.wants/{unit}",
                         check=False).returncode == 1, unit
    # the listed models were not restarted; the hand-made unit is untouched
    assert {unit: _show(fleet, h1, unit)["MainPID"] for unit in kept} == kept
    assert _show(fleet, h1, "sglang-byhand.service")["ActiveState"] == "active"
    fleet.ssh(h1, "systemctl stop sglang-byhand.service; rm -f /etc/systemd/system/sglang-byhand.service; "
                  "systemctl daemon-reload")

    again = play(listed)
    assert again.rc == 0, again.stdout[-4000:]
    assert not again.stats.get("changed"), again.stats
    print(f"removed {gone} from {h1}; kept {sorted(kept)}")
