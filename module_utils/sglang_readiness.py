"""The readiness gate's pieces: one bounded probe of a server's health endpoint, the unit's state, and
naming the likely cause of a start that never became ready from what its logs show.

SGLang has no sd_notify: ``systemctl start`` returns as soon as the process runs, and the server may
then load weights, profile memory, capture CUDA graphs and JIT-compile for many minutes, or hang.
``/health_generate`` answers 200 only once a real one-token generation works.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import http.client
import re
import socket
import time
import urllib.error
import urllib.request

from ansible.module_utils.bounded_run import RunTimeout, run_bounded

READY_LINE = "The server is fired up and ready to roll!"

# (cause, pattern, what to do). First match wins, so the most specific evidence comes first.
CAUSES = (
    ("oom", re.compile(r"CUDA out of memory|OutOfMemoryError|Not enough memory|out of memory|"
                       r"oom-kill|Out of memory: Killed process|Result: oom-kill", re.I),
     "lower mem_fraction_static or the CUDA graph batch size, or use more GPUs (tp_size)"),
    ("driver_hang", re.compile(r"NVRM: Xid|Xid \(PCI|GSP.*timeout|fallen off the bus|"
                               r"RmInitAdapter failed|uncorrectable ECC", re.I),
     "a GPU driver fault (Xid/GSP): check `dmesg | grep -i xid`, drain the host and reset the GPU or "
     "reboot; a recurring Xid 8/79 points at the driver version or the hardware"),
    ("nccl_pcie_hang", re.compile(r"NCCL WARN|Watchdog caught collective operation timeout|"
                                  r"ProcessGroupNCCL.*(timeout|Timeout)|NCCL error|custom[ _]all[ _-]?reduce|"
                                  r"init_process_group.*timed out|ncclSystemError|ncclInternalError", re.I),
     "tensor parallel over PCIe with IOMMU/ACS: NCCL hangs on the first all-reduce. Keep "
     "pcie_allreduce_workaround on (NCCL_P2P_DISABLE=1, --disable-custom-all-reduce); the fix is ACS off "
     "or iommu=pt on the kernel command line"),
    ("warmup_timeout", re.compile(r"warmup.*(timed out|timeout)|SGLANG_WARMUP_TIMEOUT|"
                                  r"Initialization failed\. warmup error", re.I),
     "the warmup (first requests, JIT compiles) outlasted SGLANG_WARMUP_TIMEOUT: raise it in the "
     "entry's env, keep the JIT caches on persistent disk, install flashinfer-cubin/jit-cache"),
    ("cold_jit", re.compile(r"\bnvcc\b|JIT|jit[_ ]cache|Compiling|compiling|Building .*kernel|"
                            r"ninja|flashinfer.*(build|compil)|deep_gemm.*compil", re.I),
     "a cold JIT compile was still running: the first start on a new GPU/stack can take more than "
     "10 minutes on SM120. Raise the gate's bound for a first start and keep the caches (they survive "
     "restarts); flashinfer-cubin/jit-cache avoid most of it"),
    ("model_not_found", re.compile(r"(No such file or directory|does not appear to have a file|"
                                   r"Repository Not Found|is not a local folder|401 Client Error)", re.I),
     "the model path or Hugging Face id is wrong, or HF_TOKEN is missing for a gated model"),
    ("bad_arguments", re.compile(r"error: (unrecognized arguments|ambiguous option|argument )", re.I),
     "the pinned sglang rejects a flag: check extra_args against that release's --help"),
)


def classify(lines, crashed=False, timed_out=False):
    """{"cause", "evidence", "advice"} from the service's log lines (oldest first).

    The newest matching line wins within a cause; causes are tried in CAUSES order. Without evidence:
    ``crash`` when the process died, ``hang_after_load`` when it stayed up past the bound (the case of
    a loaded model that never answers), else ``unknown``.
    """
    for cause, pattern, advice in CAUSES:
        for line in reversed(lines):
            if pattern.search(line):
                return {"cause": cause, "evidence": line.strip(), "advice": advice}
    if crashed:
        tail = next((line.strip() for line in reversed(lines) if line.strip()), "")
        return {"cause": "crash", "evidence": tail,
                "advice": "the server exited during start-up; read the journal tail above"}
    if timed_out:
        last = next((x.strip() for x in reversed(lines) if x.strip()), "")
        return {"cause": "hang_after_load", "evidence": last,
                "advice": "the process is up but never answered a generation: take a stack dump "
                          "(py-spy dump --pid MAINPID), check GPU use (nvidia-smi) and dmesg for Xid"}
    return {"cause": "unknown", "evidence": "", "advice": "read the journal tail and diagnostics"}


def probe(url, timeout, headers=None):
    """(HTTP status or None, short text): one GET with a bound."""
    request = urllib.request.Request(url, headers=dict(headers or {}))
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, "ok"
    except urllib.error.HTTPError as exc:
        return exc.code, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, socket.timeout) as exc:
        reason = getattr(exc, "reason", exc)
        return None, str(reason) or type(exc).__name__
    except http.client.HTTPException as exc:          # the port answers, but not in HTTP (yet)
        return None, f"not HTTP: {type(exc).__name__}"


def wait_ready(url, wait, *, poll=1.0, request_timeout=5.0, headers=None, alive=None):
    """Poll ``url`` for up to ``wait`` seconds; (ready, last status, last text).

    ``alive``: a callable that returns False when the server process is gone (stop early).
    """
    deadline = time.monotonic() + max(wait, 0)
    status, text = None, "not probed"
    while True:
        status, text = probe(url, min(request_timeout, max(deadline - time.monotonic(), 0.5)), headers)
        if status == 200:
            return True, status, text
        if alive is not None and not alive():
            return False, status, text
        if time.monotonic() + poll > deadline:
            return False, status, text
        time.sleep(poll)


def _run(argv, timeout=15):
    """Text output of a diagnostic command, never an exception (a diagnosis must not fail itself)."""
    try:
        rc, out, _ = run_bounded(argv, timeout, merge_stderr=True)
    except RunTimeout as exc:
        return f"{exc}\n{exc.stdout.decode(errors='replace')}"
    except OSError as exc:
        return f"{argv[0]}: {exc.strerror or exc}"
    text = out.decode(errors="replace")
    return text if rc == 0 else f"(exit {rc}) {text}"


def unit_state(unit):
    """{active_state, sub_state, n_restarts, main_pid, result} of a systemd unit."""
    out = _run(["systemctl", "show", "--property=ActiveState,SubState,NRestarts,MainPID,Result", unit])
    fields = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    def number(key):
        return int(fields[key]) if fields.get(key, "").isdigit() else 0
    return {"active_state": fields.get("ActiveState", "unknown"), "sub_state": fields.get("SubState", ""),
            "n_restarts": number("NRestarts"), "main_pid": number("MainPID"),
            "result": fields.get("Result", "")}


def journal(unit, lines, since_invocation=False):
    argv = ["journalctl", "--no-pager", "-o", "cat", "-n", str(lines), "-u", unit]
    return [x for x in _run(argv).splitlines() if x.strip() and not x.startswith("-- ")]


def process_tree(main_pid):
    """pid, state, elapsed time and command of the unit's main process and its descendants."""
    out = _run(["ps", "-eo", "pid=,ppid=,stat=,etime=,args="])
    rows = []
    for line in out.splitlines():
        parts = line.split(None, 4)
        if len(parts) >= 4 and parts[0].isdigit() and parts[1].isdigit():
            rows.append((int(parts[0]), int(parts[1]), line))
    keep, frontier = set(), {main_pid} if main_pid else set()
    while frontier:
        keep |= frontier
        frontier = {pid for pid, ppid, _ in rows if ppid in frontier and pid not in keep}
    header = "  PID  PPID STAT     ELAPSED COMMAND"
    return "\n".join([header] + [line for pid, _, line in rows if pid in keep]) if keep else "(no process)"
