"""STAND-IN model server for the nvidia_driver reboot test (no GPU and no SGLang on this host; it is not
SGLang): answers the two requests sglang_service's `drain` and `readiness` entry points make of a served
model, /metrics (SGLang's in-flight gauges, both 0) and /health_generate (200), on the port it is given,
and records each one in /root/rotation.log with the boot it came in (PID 1's start time).
``--stopped`` (the unit's ExecStopPost) records "stopped <boot> <systemctl is-system-running>" instead.
"""

import subprocess
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

METRICS = b"sglang:num_running_reqs 0.0\nsglang:num_queue_reqs 0.0\n"


def boot():
    with open("/proc/1/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[19]  # field 22, counted after the command name


def record(line):
    with open("/root/rotation.log", "a") as log:
        log.write(line + "\n")


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        path = self.path.split("?")[0]
        body = {"/metrics": METRICS, "/health_generate": b"{}"}.get(path)
        if body is None:
            self.send_error(404)
            return
        record(f"{path.lstrip('/')} {boot()}")
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


if sys.argv[1] == "--stopped":
    state = subprocess.run(["systemctl", "is-system-running"], capture_output=True, text=True, check=False)
    record(f"stopped {boot()} {state.stdout.strip()}")
else:
    HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
