"""Run a small probe script in another Python interpreter and read back its JSON answer.

The modules that inspect an environment (torch, sgl_kernel) never import its packages into the module
process: the environment may be another venv, another Python version, or broken in a way that would
take the module down with it (a hung CUDA init, a segfault in an extension). A probe runs instead as a
child process, bounded in time (module_utils/bounded_run: a timeout kills its whole session, and nothing it
leaves behind can hold the caller).

Stdlib only, Python 3.8+ (runs on managed hosts).
"""

import json
import os
import shutil

from ansible.module_utils.bounded_run import RunTimeout, run_bounded

# The probe prints its answer as the last line that starts with this marker, so that whatever the
# imported packages print to stdout (banners, warnings) cannot be mistaken for the answer.
MARKER = "@@SGLANG_FLEET_PROBE@@"

# Printed first by the prelude under Python 3: after it, a missing answer means the probe crashed (a
# segfault in an extension, a broken package), not that ``python`` is no Python 3 interpreter.
STARTED = "@@SGLANG_FLEET_PROBE_STARTED@@"

# Prelude shared by every probe script: ``answer(dict)`` prints the result and exits.
PRELUDE = (
    "import json, sys\n"
    "if sys.version_info[0] >= 3:\n"
    f"    sys.stdout.write({STARTED!r} + '\\n')\n"
    "    sys.stdout.flush()\n"
    "def answer(result):\n"
    "    sys.stdout.flush()\n"
    f"    sys.stdout.write('\\n' + {MARKER!r} + json.dumps(result) + '\\n')\n"
    "    sys.stdout.flush()\n"
    "    sys.exit(0)\n"
)


class ProbeError(Exception):
    """The probe could not run or gave no answer; the message says why and what to do."""


def resolve_python(python):
    """Absolute path of an executable interpreter; a bare name is looked up on PATH."""
    if not python or not isinstance(python, str):
        raise ProbeError("python must be the path of a Python interpreter, e.g. "
                         "/opt/sglang/venv/bin/python")
    if os.sep not in python:
        found = shutil.which(python)
        if not found:
            raise ProbeError(f"python {python!r} is not on PATH; give the full path of the interpreter")
        python = found
    if not os.path.exists(python):
        raise ProbeError(f"python {python} does not exist; give the interpreter of the environment to "
                         "inspect (e.g. <venv>/bin/python)")
    if os.path.isdir(python):
        raise ProbeError(f"python {python} is a directory; give the interpreter inside it (e.g. "
                         f"{os.path.join(python, 'bin', 'python')})")
    if not os.access(python, os.X_OK):
        raise ProbeError(f"python {python} is not executable (check its mode and the mount's noexec flag)")
    return os.path.abspath(python)


def _tail(text, limit=2000):
    text = text.strip()
    return text if len(text) <= limit else "..." + text[-limit:]


def run_probe(python, script, args=(), timeout=120, what="probe"):
    """Run ``PRELUDE + script`` in ``python`` (from stdin) and return the dict it passed to ``answer``.

    ``args`` become ``sys.argv[1:]``. Raises ProbeError on timeout, crash or a missing answer, with the
    interpreter's stderr tail in the message.
    """
    python = resolve_python(python)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        raise ProbeError(f"timeout must be a positive number of seconds, got {timeout!r}")
    # cwd "/" so that a torch/ or sgl_kernel/ directory in the caller's cwd cannot shadow the installed one.
    try:
        returncode, stdout, stderr = run_bounded([python, "-", *[str(a) for a in args]], timeout,
                                                 input=(PRELUDE + script).encode(), cwd="/")
    except OSError as exc:
        raise ProbeError(f"cannot start {python}: {exc}") from exc
    except RunTimeout as exc:
        detail = _tail(exc.stderr.decode("utf-8", "replace"))
        raise ProbeError(
            f"{what} in {python} did not finish within {timeout} s and was killed (a hung import or "
            f"CUDA initialisation?); raise timeout if the host is just slow"
            + (f"; {exc.leftover}" if exc.leftover else "")
            + (f"; stderr: {detail}" if detail else "")
        ) from None
    out = stdout.decode("utf-8", "replace")
    err = stderr.decode("utf-8", "replace")
    for line in reversed(out.splitlines()):
        if line.startswith(MARKER):
            try:
                return json.loads(line[len(MARKER):])
            except ValueError as exc:
                raise ProbeError(f"{what} in {python} printed a malformed answer: {exc}") from None
    status = f"was killed by signal {-returncode}" if returncode < 0 else f"exited with status {returncode}"
    started = STARTED in out.splitlines()
    detail = _tail(err or out.replace(STARTED, ""))
    raise ProbeError(f"{what} in {python} {status} without an answer"
                     + ("" if started else " (is it a Python 3 interpreter?)")
                     + (f"; output: {detail}" if detail else ""))
