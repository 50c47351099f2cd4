"""Model weights staging, one run, printed: a 1 GiB stand-in repository served by the Hub stand-in
(tests/stand_ins/hub_server.py, its own process) on this machine's loopback.

    .venv/bin/python bench/weights_timing.py [--size-mib 1024] [--shards 4] [--kill-at 0.5]

1. Generates a repository of ``--shards`` shards totalling ``--size-mib`` MiB (plus config and tokenizer)
   and a venv with the role's pinned huggingface_hub (from this machine's package index).
2. Stages it with the model_weights module (the role's code path: Hub metadata through huggingface_hub,
   resumable transfer, every file's sha256 checked, the manifest written), from scratch; then fetches
   the same files with a plain ``curl -o`` each, sequentially; prints both and the ratio.
3. Stages it again into an empty root and kills the module (SIGKILL) once ``--kill-at`` of the bytes
   are on disk, then runs it again: prints the time the resumed run needs to finish against the
   from-scratch time, and the bytes the resumed run transferred.
4. A second run over a staged directory: the manifest is read, nothing is asked or hashed.
Everything it made is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ansible

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT / "tests" / "stand_ins"))
from hub_server import make_repo  # noqa: E402

HF_VERSION = "1.33.0"  # roles/model_weights/defaults/main.yml
REPO_ID, COMMIT = "bench/model", "b" * 40
RUN_MODULE = f"""
import json, sys, runpy
import ansible.module_utils
ansible.module_utils.__path__.append({str(REPO_ROOT / 'module_utils')!r})
sys.argv = ["model_weights", json.dumps({{"ANSIBLE_MODULE_ARGS": json.loads(sys.argv[1])}})]
runpy.run_path({str(REPO_ROOT / 'library' / 'model_weights.py')!r}, run_name="__main__")
"""


def module(python: Path, args: dict) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(Path(ansible.__file__).parent.parent)}
    return subprocess.Popen([str(python), "-c", RUN_MODULE, json.dumps(args)], env=env,
                            stdout=subprocess.PIPE, text=True)


def stage(python: Path, args: dict) -> tuple[float, dict]:
    started = time.monotonic()
    proc = module(python, args)
    out, _ = proc.communicate()
    seconds = time.monotonic() - started
    result = json.loads(out.strip().splitlines()[-1])
    if result.get("failed"):
        raise SystemExit(f"model_weights failed: {result['msg']}")
    return seconds, result


def on_disk(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) if directory.exists() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mib", type=int, default=1024)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--kill-at", type=float, default=0.5)
    parser.add_argument("--port", type=int, default=18088)
    opts = parser.parse_args()
    if not shutil.which("curl"):
        raise SystemExit("curl is needed for the comparison")
    work = Path(tempfile.mkdtemp(prefix="weights-bench-", dir="/var/tmp"))
    server = None
    try:
        shard = (opts.size_mib << 20) // opts.shards
        repo = make_repo(work / "repo", {f"model-{i + 1:05d}-of-{opts.shards:05d}.safetensors": shard
                                         for i in range(opts.shards)})
        subprocess.run([sys.executable, "-m", "venv", str(work / "venv")], check=True)
        subprocess.run([str(work / "venv/bin/pip"), "install", "-q", f"huggingface_hub=={HF_VERSION}"],
                       check=True)
        python = work / "venv/bin/python"
        env = {**os.environ, "HUB_STAND_IN_REPO": REPO_ID, "HUB_STAND_IN_COMMIT": COMMIT}
        stand_in = REPO_ROOT / "tests/stand_ins/hub_server.py"
        server = subprocess.Popen([sys.executable, str(stand_in), str(repo), str(opts.port)], env=env,
                                  stdout=subprocess.PIPE, text=True)
        url = server.stdout.readline().strip()
        source = {"repo": REPO_ID, "revision": "v1", "endpoint": url}
        total = on_disk(repo)
        print(f"repository: {len(list(repo.iterdir()))} files, {total / (1 << 20):.0f} MiB, served at {url}")

        scratch, result = stage(python, {"source": source, "root": str(work / "a")})
        assert result["status"] == "downloaded", result
        rate = total / scratch / (1 << 20)
        print(f"model_weights from scratch: {scratch:.2f} s ({rate:.0f} MiB/s; "
              f"includes sha256 of every file)")

        started = time.monotonic()
        (work / "curl").mkdir()
        for path in sorted(repo.iterdir()):
            subprocess.run(["curl", "-sSf", "-o", str(work / "curl" / path.name),
                            f"{url}/{REPO_ID}/resolve/{COMMIT}/{path.name}"], check=True)
        curl = time.monotonic() - started
        print(f"plain curl of the same files: {curl:.2f} s ({total / curl / (1 << 20):.0f} MiB/s, no check)")
        print(f"ratio model_weights / curl: {scratch / curl:.2f}")

        root = work / "b"
        proc = module(python, {"source": source, "root": str(root)})
        directory = root / REPO_ID / "v1"
        started = time.monotonic()
        while on_disk(directory) < opts.kill_at * total and proc.poll() is None:
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_at, had = time.monotonic() - started, on_disk(directory)
        resumed, result = stage(python, {"source": source, "root": str(root)})
        print(f"killed after {killed_at:.2f} s with {had / (1 << 20):.0f} MiB on disk "
              f"({100 * had / total:.0f}%); the resumed run finished in {resumed:.2f} s "
              f"(from scratch: {scratch:.2f} s, {resumed / scratch:.2f} of it), transferring "
              f"{result['downloaded_bytes'] / (1 << 20):.0f} MiB, resumed {result['resumed']}")

        again, result = stage(python, {"source": source, "root": str(root)})
        assert result["status"] == "staged", result
        print(f"a second run over the staged directory: {again:.2f} s "
              f"(manifest read; nothing asked or hashed)")
    finally:
        if server is not None:
            server.terminate()
            server.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
