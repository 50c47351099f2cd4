"""The fleet-jobs scenario (issue 10): 3 model hosts behind 1 SMG gateway host, provisioned by the real
playbooks/site.yml from the fleet's wheelhouse and rolled by playbooks/rolling_rebuild.yml.

Model servers are the stand-in (tests/stand_ins/sglang-server), installed into every stack the production
way: a tiny wheel built here from that source (``stand_in_wheel``) goes into the served wheelhouse and
through ``sglang_service_extra_packages`` into each new stack, with the parse-only set sglang needs
(tests/sglang_parser.py, minus torch: the stack has torch 2.14.1). A "broken" build of the same wheel
(``mode="crash"``: the server crashes while loading unless told otherwise) stands for a new stack that
fails its readiness gate.

Every model names its weights (a tiny repository, pinned to a tag) on the Hub stand-in
(tests/stand_ins/hub_server.py, bound to the fleet's bridge): site.yml's model_weights stage downloads them
once per host into the weights root, and the units run from there with the Hub offline; the stand-in counts
the requests, so a test can show that nothing after the first download asks it again. The downloader's
venv gets the stable lock's huggingface_hub and its dependencies (``HUB_WHEELS``), hash-checked, from the
fleet's wheelhouse.

The inventory is a directory: the fleet's own, the groups and shared variables, host variables, and
``20-profile.yml`` naming the stack profile (rewritten between runs: the stack role refuses a profile
given with -e).
"""

from __future__ import annotations

import base64
import hashlib
import json
import sys
import threading
import time
import urllib.request
import zipfile
from collections import Counter
from pathlib import Path

import yaml
from cache import pip_download
from kernelpkg import make_archive, make_source, write_mirror
from lockwheels import downloader_files
from service_stack import PY_SPY, SMG_WHEELS, UV
from sglang_parser import KEEP_PARSE, PARSER_DEPENDENCIES, SGLANG, STAND_IN
from stackrun import SEEDED_UV_CACHE, fill_wheelhouse, seed_wheel_cache, stack_extravars

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "stand_ins"))
from hub_server import HubStandIn, Repo, make_repo

GATEWAY_PORT = 8000
MODEL_PORT = 30000
WEIGHTS_REPO, WEIGHTS_TAG, WEIGHTS_COMMIT = "org/stand-in", "v1", "5eed" + "0" * 36
WEIGHTS_ROOT = "/var/lib/sglang/models"  # the model_weights role's default root
STACK_ROOT = "/opt/sglang/stacks"  # the stack role's default stack_root
# the downloader's venv on the hosts: the stable lock's huggingface_hub and what it needs (the role installs
# exactly these files, hash-checked, from the fleet's wheelhouse)
HUB_WHEELS = [f"{f['name']}=={f['version']}" for f in downloader_files()]
STAND_IN_DIST = "sglang-server-stand-in"
_MODE_DEFAULT = 'os.environ.get("SGLANG_STAND_IN_MODE", "normal")'


def stand_in_wheel(dest: Path, mode: str = "") -> str:
    """A wheel of the stand-in server module in ``dest``; returns its exact requirement.

    ``mode`` bakes another default failure mode in (e.g. "crash"); the version's local label is the
    source's digest, so each variant is its own version.
    """
    source = STAND_IN.read_text()
    if mode:
        assert _MODE_DEFAULT in source, "the stand-in no longer reads SGLANG_STAND_IN_MODE like this"
        source = source.replace(_MODE_DEFAULT, f'os.environ.get("SGLANG_STAND_IN_MODE", "{mode}")')
    version = f"0.1.0+g{hashlib.sha256(source.encode()).hexdigest()[:12]}"
    dist = STAND_IN_DIST.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    files = {
        STAND_IN.name: source.encode(),
        f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {STAND_IN_DIST}\nVersion: {version}\n"
                             "Summary: STAND-IN sglang model server (not SGLang)\n").encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: sglang-fleet tests\nRoot-Is-Purelib: true\n"
                         b"Tag: py3-none-any\n",
    }
    digest = {name: base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
              for name, data in files.items()}
    record = [f"{name},sha256={digest[name]},{len(data)}" for name, data in files.items()]
    record.append(f"{info}/RECORD,,")
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = dest / f"{dist}-{version}-py3-none-any.whl"
    if not wheel.exists():
        partial = wheel.with_suffix(".partial")
        with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
            for name, data in files.items():
                archive.writestr(zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0)), data)
        partial.rename(wheel)
    return f"{STAND_IN_DIST}=={version}"


def start_weights_hub(fleet, workdir: Path):
    """The Hub stand-in (a stand-in: tests/stand_ins/hub_server.py), started on the fleet's bridge and
    serving WEIGHTS_REPO at WEIGHTS_COMMIT (tag WEIGHTS_TAG). The caller stops it (``__exit__``)."""
    hub = HubStandIn(bind=fleet.state["controller_ip"]).__enter__()
    hub.add(Repo(WEIGHTS_REPO, make_repo(workdir / "weights-src", {"model.safetensors": 2 << 20}),
                 WEIGHTS_COMMIT, tags={WEIGHTS_TAG}))
    return hub


def prepare_wheels(fleet) -> dict:
    """Everything the hosts install, in the served wheelhouse; the stand-in requirements."""
    wheelhouse = fill_wheelhouse()
    pip_download([UV, PY_SPY, *SMG_WHEELS, SGLANG, *PARSER_DEPENDENCIES, *HUB_WHEELS])
    served = Path(fleet.state["wheelhouse"]["dir"])
    assert served.resolve() == wheelhouse.resolve(), "the jobs fleet serves the shared wheelhouse"
    return {"normal": stand_in_wheel(served), "crash": stand_in_wheel(served, "crash"), "dir": served}


def kernel_source(fleet, workdir: Path) -> dict:
    """The test kernel package as a source archive + FetchContent mirror, served by the fleet."""
    served = Path(fleet.state["wheelhouse"]["dir"]) / "sglang-fleet-rollout-test"
    checkout = workdir / "checkout"
    checkout.mkdir(exist_ok=True)
    if not (checkout / "README.md").exists():
        make_source(checkout, "new")
    sha256 = make_archive(checkout, served / "src" / "sglang-kernel-test.tar.gz")
    write_mirror(served / "gh")
    base = fleet.wheelhouse_url + "sglang-fleet-rollout-test"
    return {"url": f"{base}/src/sglang-kernel-test.tar.gz", "sha256": sha256, "mirror": f"{base}/gh"}


def model(hub_url: str, **env) -> dict:
    return {"name": "main", "model_path": "/models/stand-in", "host": "0.0.0.0", "port": MODEL_PORT,
            "weights": {"repo": WEIGHTS_REPO, "revision": WEIGHTS_TAG, "endpoint": hub_url},
            "extra_args": ["--enable-metrics"],
            # each request takes a while, so the rollout has requests in flight to wait for
            "env": {"SGLANG_STAND_IN_DELAY": "1", "SGLANG_STAND_IN_LATENCY": "0.2", **KEEP_PARSE, **env}}


# host 3's wheel mirror: a path the wheelhouse does not have (HTTP 404 for every file)
NO_KERNEL_MIRROR = "{}sglang-fleet-no-kernel/"


class JobsFleet:
    """The 4-host scenario: inventory, profiles, and what the tests read back from the hosts."""

    def __init__(self, fleet, workdir: Path, wheels: dict, kernel: dict, hub):
        self.fleet = fleet
        self.hub = hub
        self.workdir = workdir
        self.wheels = wheels
        self.kernel = kernel
        self.models = [h["name"] for h in fleet.hosts[:3]]
        self.gateway = fleet.hosts[3]["name"]
        self.address = {h["name"]: h["ip"] for h in fleet.hosts}
        self.inventory = workdir / "inventory"
        self.wheel_cache = workdir / "wheel-cache"
        self.artifacts = workdir / "kernel-artifacts"
        seed_wheel_cache(self.wheel_cache, wheels["dir"])
        self.write_inventory()
        self.use_profile(None)

    def write_inventory(self, host_vars: dict | None = None) -> None:
        root = self.inventory
        (root / "host_vars").mkdir(parents=True, exist_ok=True)
        (root / "00-fleet.yml").write_text(Path(self.fleet.inventory).read_text())
        shared = {
            **stack_extravars(self.fleet, self.wheel_cache),
            "stack_uv_cache_dir": SEEDED_UV_CACHE,
            "gpu_capability": "12.0",
            "sglang_service_install": True,
            "sglang_service_install_dependencies": False,
            "sglang_service_flashinfer_cache_packages": False,
            "sglang_service_extra_packages": [*PARSER_DEPENDENCIES, self.wheels["normal"]],
            "sglang_service_launch_module": "sglang_server_stand_in",
            "sglang_service_gate_step": 2, "sglang_service_gate_bound": 90, "sglang_service_restart_sec": 2,
            "sglang_service_timeout_stop_sec": 20,
            # take_out / put_back run delegated from the model hosts: they see the gateway's settings here
            "sglang_service_gateway_model": "main", "sglang_service_gateway_host": "0.0.0.0",
            "sglang_service_gateway_port": GATEWAY_PORT, "sglang_service_gateway_health_interval_secs": 1,
            "sglang_service_gateway_discovery_interval_secs": 2,
            "sgl_kernel_artifact_dir": str(self.artifacts),
            "sgl_kernel_source_archive_sha256": self.kernel["sha256"],
            "sgl_kernel_source_mirror_url": self.kernel["mirror"],
            "sgl_kernel_progress_interval": 5,
            # the downloader from the stable lock's own entries (the stand-in stack is unlocked), served
            # by the fleet's wheelhouse, as a locked stack gives them (stack_lock_files, stack_wheel_mirrors)
            "model_weights_lock_files": downloader_files(),
            "model_weights_wheel_mirrors": [self.fleet.wheelhouse_url],
            "model_weights_wheel_use_lock_urls": False,
            "model_weights_progress_step": 2,
        }
        groups = {"all": {"vars": shared, "children": {
            "sglang_replicas": {"hosts": {h: None for h in self.models}},
            "sglang_gateway": {"hosts": {self.gateway: None}}}}}
        (root / "10-groups.yml").write_text(yaml.safe_dump(groups))
        for host in [*self.models, self.gateway]:
            values = {"sglang_service_models": [model(self.hub.url)] if host in self.models else []}
            if host == self.models[2]:  # a wheel mirror without the released kernel wheel: the store's copy
                values["sgl_kernel_wheel_mirrors"] = [NO_KERNEL_MIRROR.format(self.fleet.wheelhouse_url)]
            values.update((host_vars or {}).get(host, {}))
            (root / "host_vars" / f"{host}.yml").write_text(yaml.safe_dump(values))

    def use_profile(self, profile: Path | None) -> None:
        source = self.inventory / "20-profile.yml"
        if profile is None:
            source.unlink(missing_ok=True)  # the stack role's default profile
        else:
            source.write_text(yaml.safe_dump({"all": {"vars": {"stack_profile": str(profile)}}}))

    def ssh(self, host: str, command: str, check: bool = True) -> str:
        return self.fleet.ssh(host, command, check=check).stdout.strip()

    def current(self, host: str) -> str:
        return self.ssh(host, f"readlink {STACK_ROOT}/current")

    def fingerprint(self, host: str) -> str:
        return json.loads(self.ssh(host, f"cat {STACK_ROOT}/current/stack.json"))["fingerprint"]

    def stacks(self, host: str) -> list[str]:
        return sorted(set(self.ssh(host, f"ls -1 {STACK_ROOT}").split()) - {"current"})

    @property
    def weights_dir(self) -> str:
        return f"{WEIGHTS_ROOT}/{WEIGHTS_REPO}/{WEIGHTS_TAG}"

    def weights_files(self, host: str) -> dict[str, tuple[int, int, str]]:
        """{relative path: (inode, size, mtime ns)} of every file under the host's weights directory."""
        out = self.ssh(host, f"find {self.weights_dir} -type f -printf '%P %i %s %T@\\n'")
        files = {}
        for line in out.splitlines():
            name, inode, size, mtime = line.rsplit(" ", 3)
            files[name] = (int(inode), int(size), mtime)
        return files

    def unit(self, host: str) -> dict:
        out = self.ssh(host, "systemctl show --property=ActiveState,MainPID,ActiveEnterTimestampMonotonic "
                             "sglang-main.service")
        return dict(line.split("=", 1) for line in out.splitlines())

    def healthy(self, host: str, port: int = MODEL_PORT) -> bool:
        try:
            with urllib.request.urlopen(f"http://{self.address[host]}:{port}/health_generate",
                                        timeout=10) as response:
                return response.status == 200
        except OSError:
            return False

    def gateway_workers(self) -> dict:
        with urllib.request.urlopen(f"http://{self.address[self.gateway]}:{GATEWAY_PORT}/workers",
                                    timeout=10) as response:
            workers = json.loads(response.read())["workers"]
        # in rotation: what SMG routes to (a worker it lists as draining gets no new request)
        return {w["url"]: w["is_healthy"] for w in workers if w.get("status") != "draining"}

    def worker_url(self, host: str) -> str:
        return f"http://{self.address[host]}:{MODEL_PORT}"

    def disk_mib(self) -> dict:
        """MiB each host's writable layer holds (its stacks, uv cache and logs)."""
        out = {}
        for h in self.fleet.hosts:
            upper = Path(h["dir"]) / "upper"
            out[h["name"]] = _du_mib(upper) if upper.exists() else None
        return out


def _du_mib(path: Path) -> int:
    seen, total = set(), 0
    for item in path.rglob("*"):
        try:
            st = item.lstat()
        except OSError:
            continue
        if item.is_file() and not item.is_symlink() and (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_blocks * 512
    return total // 2**20


class ClientLoop(threading.Thread):
    """Requests through the gateway, one after the other, until stopped (or ``limit`` seconds)."""

    def __init__(self, url: str, limit: float = 1800):
        super().__init__(daemon=True)
        self.url = url.rstrip("/") + "/v1/chat/completions"
        self.limit = limit
        self.stopping = threading.Event()
        self.ok = 0
        self.failures: list[str] = []
        self.workers: Counter = Counter()

    def run(self) -> None:
        deadline = time.monotonic() + self.limit
        # the stand-in serves its --model-path as the model name
        body = json.dumps({"model": "/models/stand-in",
                           "messages": [{"role": "user", "content": "hi"}]}).encode()
        while not self.stopping.is_set() and time.monotonic() < deadline:
            request = urllib.request.Request(self.url, data=body,
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=30) as response:
                    reply = json.loads(response.read())
                self.ok += 1
                self.workers[str(reply.get("worker", "?")).split(":")[0]] += 1
            except Exception as error:  # every failure is counted and shown
                self.failures.append(f"{time.strftime('%H:%M:%S')} {type(error).__name__}: {error}")
                time.sleep(0.2)

    def stop(self) -> None:
        self.stopping.set()
        self.join(60)

    @property
    def total(self) -> int:
        return self.ok + len(self.failures)

