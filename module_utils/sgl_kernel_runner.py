"""Run a long build under a hard memory limit, with a log, a status file and a bounded time.

The limit, in order of preference, each one read back before it is trusted:
- ``cgroup-v2``: ``systemd-run --scope -p MemoryMax=`` on a host whose /sys/fs/cgroup is cgroup2 with
  the memory controller (real Ubuntu 22.04/24.04 and Debian 12 nodes). A probe scope first checks that
  its cgroup's ``memory.max`` really holds the value (systemd accepts the property even where nothing
  enforces it, e.g. in a container).
- ``cgroup-v1``: a child of a writable v1 memory hierarchy, ``memory.limit_in_bytes`` written and read
  back (hybrid hosts where root owns the v1 controller).
- ``watchdog``: no cgroup can be enforced (a container host): the build runs in a session of its own and
  a watchdog sums the RSS of the build's processes twice a second and kills them at the budget: every
  process of that session, and every process carrying the build's marker variable (``BUILD_MARKER``) in
  its environment. The marker matters for sccache: its server daemonizes into a session of its own and
  runs the compilers there, with the client's environment. It cannot stop a spike shorter than its
  period; a cgroup can.

The status file (JSON) says: mechanism, limit, pid, start, end, return code, whether the limit or the
timeout killed the build, and the peak memory seen. ``progress`` reads the build's last ``[n/m]`` line.

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import time

MIB = 1 << 20
WATCHDOG_PERIOD = 0.5
V1_ROOT = "/sys/fs/cgroup/memory"
V2_ROOT = "/sys/fs/cgroup"
_PROGRESS = re.compile(rb"\[(\d+)/(\d+)\]")
BUILD_MARKER = "SGL_KERNEL_BUILD_MARKER"


class LimitError(Exception):
    """No memory limit can be enforced on this host; the message lists what was tried."""


def _read(path):
    # errors="replace": /proc/<pid>/stat holds the process name, cut at 15 bytes, maybe inside a character
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def _write(path, text):
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def _is_cgroup2(path):
    return os.path.exists(os.path.join(path, "cgroup.controllers"))


def probe_cgroup_v2(limit_bytes, unit_prefix="sgl-kernel-probe"):
    """(True, detail) when a systemd scope's MemoryMax is really set in the kernel, else (False, why)."""
    if not (shutil.which("systemd-run") and os.path.isdir("/run/systemd/system")):
        return False, "systemd-run or a running systemd is missing"
    if not _is_cgroup2(V2_ROOT) or "memory" not in (_read(os.path.join(V2_ROOT, "cgroup.controllers")) or ""):
        return False, f"{V2_ROOT} is not a cgroup2 hierarchy with the memory controller"
    unit = f"{unit_prefix}-{os.getpid()}"
    try:
        out = subprocess.run(["systemd-run", "--quiet", "--scope", f"--unit={unit}", "-p",
                              f"MemoryMax={limit_bytes}", "--", "cat", "/proc/self/cgroup"],
                             capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"systemd-run probe failed: {exc}"
    paths = [line.split(":", 2)[2] for line in out.stdout.splitlines() if line.startswith("0::")]
    if out.returncode != 0 or not paths:
        return False, f"systemd-run probe failed: {out.stderr.strip() or out.stdout.strip()}"
    # The scope is gone once cat exits; its limit was applied before cat ran, so read it from a twin
    # started to sleep instead.
    sleeper = subprocess.Popen(["systemd-run", "--quiet", "--scope", f"--unit={unit}-b", "-p",
                                f"MemoryMax={limit_bytes}", "--", "sleep", "5"])
    try:
        deadline = time.monotonic() + 5
        value = None
        while time.monotonic() < deadline and value is None:
            value = _read(os.path.join(V2_ROOT, paths[0].lstrip("/").rsplit("/", 1)[0], f"{unit}-b.scope",
                                       "memory.max"))
            time.sleep(0.1)
    finally:
        sleeper.kill()
        sleeper.wait()
    if value != str(limit_bytes):
        return False, f"MemoryMax={limit_bytes} was accepted but the scope's memory.max reads {value!r}"
    return True, f"systemd scope memory.max reads back {value}"


def setup_cgroup_v1(name, limit_bytes):
    """(cgroup dir, detail) with the limit written and read back, or (None, why not)."""
    if not os.path.isdir(V1_ROOT) or _is_cgroup2(V1_ROOT):
        return None, f"no v1 memory hierarchy at {V1_ROOT}"
    parent = os.path.join(V1_ROOT, "sglang-fleet")
    path = os.path.join(parent, name)
    if os.path.isdir(parent):  # earlier builds' cgroups, kept while a daemon (sccache) lived in them
        for old in os.listdir(parent):
            if os.path.isdir(os.path.join(parent, old)):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(parent, old))  # only succeeds when no process is left
    try:
        os.makedirs(path, exist_ok=True)
        _write(os.path.join(path, "memory.limit_in_bytes"), str(limit_bytes))
        swap = os.path.join(path, "memory.memsw.limit_in_bytes")
        if os.path.exists(swap):
            _write(swap, str(limit_bytes))
    except OSError as exc:
        return None, f"the v1 memory hierarchy is not writable here ({exc.strerror})"
    value = _read(os.path.join(path, "memory.limit_in_bytes"))
    page = os.sysconf("SC_PAGE_SIZE")
    if value is None or abs(int(value) - limit_bytes) >= page:
        return None, f"v1 memory.limit_in_bytes reads back {value!r}, not {limit_bytes}"
    return path, f"v1 memory.limit_in_bytes reads back {value}"


def _marked(pid, marker):
    """Whether process ``pid`` has ``BUILD_MARKER=marker`` in its environment."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as handle:
            environ = handle.read()
    except OSError:
        return False
    return f"{BUILD_MARKER}={marker}".encode() in environ.split(b"\0")


def build_processes(session_id, marker=None):
    """{pid: resident bytes} of every process in ``session_id`` or, with ``marker``, marked with it."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        stat = _read(f"/proc/{entry}/stat")
        if not stat:
            continue
        # the fields after the name, from the state on: [3] is the session, [21] the rss
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 21 and (fields[3] == str(session_id) or (marker and _marked(entry, marker))):
            found[int(entry)] = int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
    return found


def session_rss(session_id, marker=None):
    """Sum of resident memory (bytes) of the build's processes (see ``build_processes``)."""
    return sum(build_processes(session_id, marker).values())


def _kill_session(pid, marker=None):
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)
    if marker:
        for other in build_processes(pid, marker):
            with contextlib.suppress(OSError):
                os.kill(other, signal.SIGKILL)


def run_limited(argv, *, log_path, status_path, limit_bytes, timeout, env=None, cwd=None, name="build",
                mechanisms=("cgroup-v2", "cgroup-v1", "watchdog")):
    """Run ``argv`` with its output in ``log_path`` under a memory limit and a timeout; the status dict.

    The first of ``mechanisms`` that can be enforced here is used (see the module docstring).
    """
    status = {"mechanism": None, "limit_bytes": int(limit_bytes), "limit_detail": [], "pid": None,
              "started": time.time(), "finished": None, "rc": None, "killed_by": None,
              "peak_bytes": 0, "log": log_path, "argv": list(argv), "timeout": timeout}
    command, cgroup_v1 = list(argv), None
    for mechanism in mechanisms:
        if mechanism == "cgroup-v2":
            ok, detail = probe_cgroup_v2(limit_bytes)
            status["limit_detail"].append(f"cgroup-v2: {detail}")
            if ok:
                command = ["systemd-run", "--quiet", "--scope", f"--unit=sgl-kernel-{name}-{os.getpid()}",
                           "-p", f"MemoryMax={limit_bytes}", "-p", "MemorySwapMax=0", "--", *argv]
                status["mechanism"] = mechanism
                break
        elif mechanism == "cgroup-v1":
            cgroup_v1, detail = setup_cgroup_v1(f"{name}-{os.getpid()}", limit_bytes)
            status["limit_detail"].append(f"cgroup-v1: {detail}")
            if cgroup_v1:
                # the shell joins the cgroup before it execs the build, so every child is inside
                procs = os.path.join(cgroup_v1, "cgroup.procs")
                command = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs, *argv]
                status["mechanism"] = mechanism
                break
        elif mechanism == "watchdog":
            status["mechanism"] = mechanism
            status["limit_detail"].append("watchdog: sums the RSS of the build's session twice a second")
            break
    if status["mechanism"] is None:
        raise LimitError("no memory limit can be enforced: " + "; ".join(status["limit_detail"]))

    marker = f"{name}-{os.getpid()}-{time.time():.6f}"
    env = dict(os.environ if env is None else env, **{BUILD_MARKER: marker})
    os.makedirs(os.path.dirname(log_path) or ".", exist_ok=True)
    with open(log_path, "ab", buffering=0) as log:
        log.write(f"== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(command)}\n".encode())
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                   env=env, cwd=cwd, start_new_session=True)
    status["pid"] = process.pid
    _save(status_path, status)
    deadline = time.monotonic() + timeout
    try:
        while process.poll() is None:
            rss = session_rss(process.pid, marker)
            status["peak_bytes"] = max(status["peak_bytes"], rss)
            if status["mechanism"] == "watchdog" and rss > limit_bytes:
                status["killed_by"] = f"watchdog: the build's processes used {rss // MIB} MiB > limit"
                _kill_session(process.pid, marker)
            elif time.monotonic() > deadline:
                status["killed_by"] = f"timeout: the build ran longer than {timeout} s"
                _kill_session(process.pid, marker)
            time.sleep(WATCHDOG_PERIOD)
    finally:
        if process.poll() is None:  # our own caller was interrupted: leave nothing running
            _kill_session(process.pid, marker)
            process.wait()
    status["rc"] = process.returncode
    if cgroup_v1:
        peak = _read(os.path.join(cgroup_v1, "memory.max_usage_in_bytes"))
        oom_kills = re.search(r"oom_kill (\d+)", _read(os.path.join(cgroup_v1, "memory.oom_control")) or "")
        status["peak_bytes"] = max(status["peak_bytes"], int(peak or 0))
        if status["rc"] and oom_kills and int(oom_kills.group(1)) > 0:
            status["killed_by"] = status["killed_by"] or "cgroup-v1 memory limit (OOM kill in the cgroup)"
        with contextlib.suppress(OSError):
            os.rmdir(cgroup_v1)
    if status["mechanism"] == "cgroup-v2" and status["rc"] and status["rc"] in (-9, 137) \
            and not status["killed_by"]:
        status["killed_by"] = "cgroup-v2 memory limit (SIGKILL in the scope)"
    status["finished"] = time.time()
    _save(status_path, status)
    return status


def _save(path, status):
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(status, handle)
    os.replace(tmp, path)


def read_status(path):
    text = _read(path)
    return json.loads(text) if text else None


def progress(log_path, tail_bytes=65536):
    """(last "[n/m]" counter or None, last non-empty log line) from the end of the build log."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - tail_bytes))
            tail = handle.read()
    except OSError:
        return None, None
    counters = _PROGRESS.findall(tail)
    counter = f"[{counters[-1][0].decode()}/{counters[-1][1].decode()}]" if counters else None
    lines = [line for line in tail.splitlines() if line.strip()]
    last = lines[-1].decode("utf-8", "replace")[:200] if lines else None
    return counter, last


def log_tail(log_path, lines=25):
    """The last ``lines`` non-empty lines of the log (for an error message)."""
    try:
        with open(log_path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            text = handle.read().decode("utf-8", "replace")
    except OSError:
        return []
    return [line.rstrip()[:300] for line in text.splitlines() if line.strip()][-lines:]
