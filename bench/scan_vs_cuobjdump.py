#!/usr/bin/env python3
"""Benchmark the header-only fatbin scanner against cuobjdump on a real CUDA torch install.

Scans libtorch_cuda.so alone and the whole torch/lib, once with module_utils/cuda_fatbin and once with
``cuobjdump -lelf -lptx`` (one run per file: it takes one file at a time). Every measurement is a fresh
child process: wall time from spawn to exit, peak RSS from wait4's rusage of exactly that child. Files
are read once beforehand so both tools run warm (page cache). Prints the numbers, the ratios, whether the
arch sets are identical (an ``f`` cubin compared the way cuobjdump prints it, see tests/cuobjdump.py),
and which targets are met. Exit status 1 when the arch sets differ.

    .venv/bin/python bench/scan_vs_cuobjdump.py                        # torch 2.14.1 test venv
    .venv/bin/python bench/scan_vs_cuobjdump.py --torch-lib /path/to/site-packages/torch/lib
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import namedtuple
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from cuobjdump import LIST_ARGS, as_cuobjdump_lists, cuobjdump_path, parse_listing  # noqa: E402
from torchenv import torch_python  # noqa: E402

TARGET_SPEEDUP = 40
TARGET_RSS_MB = 200
TARGET_LIB_SECONDS = 3.0

# The scanner child imports module_utils the way Ansible ships it, like tests/conftest.py does.
SCANNER_CHILD = r"""
import json, sys, time
import ansible.module_utils
ansible.module_utils.__path__.append(sys.argv[1])
from ansible.module_utils.cuda_fatbin import iter_candidate_files, scan_file
start = time.perf_counter()
files = {path: scan_file(path)._asdict() for path in iter_candidate_files(sys.argv[2:])}
print(json.dumps({"scan_seconds": time.perf_counter() - start, "files": files}))
"""

Run = namedtuple("Run", ["wall", "rss_mb", "returncode", "stdout", "stderr"])


def measure(cmd):
    """Run ``cmd`` as a fresh child; wall seconds and that child's own peak RSS."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        child = subprocess.Popen(cmd, stdout=out, stderr=err)
        _pid, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return Run(wall, usage.ru_maxrss / 1024, child.returncode, out.read().decode(), err.read().decode())


def warm(paths):
    for path in paths:
        with open(path, "rb") as handle:
            while handle.read(1 << 24):
                pass


def scanner(paths, repeat):
    runs = [measure([sys.executable, "-c", SCANNER_CHILD, str(REPO / "module_utils"), *map(str, paths)])
            for _ in range(repeat)]
    for run in runs:
        if run.returncode != 0:
            sys.exit(f"scanner failed: {run.stderr}")
    report = json.loads(runs[-1].stdout)
    wall = statistics.median(run.wall for run in runs)
    return wall, max(run.rss_mb for run in runs), report


def cuobjdump(binary, files):
    """Total wall over one run per file, the largest peak RSS, and the listing of each file."""
    wall, rss, listings = 0.0, 0.0, {}
    for path in files:
        run = measure([str(binary), *LIST_ARGS, path])
        wall += run.wall
        rss = max(rss, run.rss_mb)
        listings[path] = parse_listing(path, run.returncode, run.stdout, run.stderr)
    return wall, rss, listings


def default_torch_lib():
    """torch/lib of the tests' torch 2.14.1 venv (created on first use: slow, several GB)."""
    (lib,) = torch_python("2.14.1").parent.parent.glob("lib/python*/site-packages/torch/lib")
    return lib


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--torch-lib", type=Path, help="torch/lib of a CUDA torch install "
                        "(default: the tests' cached torch 2.14.1 venv)")
    parser.add_argument("--cuobjdump", type=Path, help="cuobjdump binary (default: the tests' pinned one)")
    parser.add_argument("--repeat", type=int, default=3, help="scanner runs per target (median wall)")
    args = parser.parse_args()
    lib = args.torch_lib or default_torch_lib()
    binary = args.cuobjdump or cuobjdump_path()
    libtorch_cuda = lib / "libtorch_cuda.so"
    if not libtorch_cuda.is_file():
        sys.exit(f"{libtorch_cuda} not found: --torch-lib must be torch/lib of a CUDA build")

    files = list(scanner([lib], 1)[2]["files"])  # the candidate files, as the scanner walks them
    warm(files)
    rows, mismatches = [], []
    for label, paths, targets in [("libtorch_cuda.so", [libtorch_cuda], [str(libtorch_cuda)]),
                                  (f"torch/lib ({len(files)} files)", [lib], files)]:
        wall, rss, report = scanner(paths, args.repeat)
        ref_wall, ref_rss, listings = cuobjdump(binary, targets)
        for path in targets:
            code = report["files"][path]
            if as_cuobjdump_lists(code["sass"], code["ptx"]) != listings[path]:
                mismatches.append((path, code, listings[path]))
        rows.append((label, wall, rss, report["scan_seconds"], ref_wall, ref_rss))

    print(f"torch lib: {lib}\ncuobjdump: {binary}\n")
    print(f"{'target':<24} {'scanner s':>10} {'(in-proc)':>10} {'RSS MB':>8} {'cuobjdump s':>12} "
          f"{'RSS MB':>8} {'time x':>8} {'RSS x':>7}")
    for label, wall, rss, inproc, ref_wall, ref_rss in rows:
        print(f"{label:<24} {wall:>10.3f} {inproc:>10.3f} {rss:>8.1f} {ref_wall:>12.2f} {ref_rss:>8.0f} "
              f"{ref_wall / wall:>8.1f} {ref_rss / rss:>7.1f}")
    _label, cuda_wall, cuda_rss, _inproc, cuda_ref_wall, _ref_rss = rows[0]
    lib_wall = rows[1][1]
    speedup = cuda_ref_wall / cuda_wall
    print(f"\narch sets identical: {'yes' if not mismatches else 'NO'} ({len(files)} files)")
    for path, code, listing in mismatches:
        print(f"  {path}: scanner {code}, cuobjdump {listing}")
    print(f"target >= {TARGET_SPEEDUP}x faster on libtorch_cuda.so: {speedup:.0f}x "
          f"{'met' if speedup >= TARGET_SPEEDUP else 'MISSED'}")
    print(f"target <= {TARGET_RSS_MB} MB peak RSS on libtorch_cuda.so: {cuda_rss:.1f} MB "
          f"{'met' if cuda_rss <= TARGET_RSS_MB else 'MISSED'}")
    print(f"target torch/lib <= {TARGET_LIB_SECONDS} s warm: {lib_wall:.3f} s "
          f"{'met' if lib_wall <= TARGET_LIB_SECONDS else 'MISSED'}")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
