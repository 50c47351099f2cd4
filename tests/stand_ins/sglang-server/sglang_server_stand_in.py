"""STAND-IN for an SGLang model server (``python -m sglang.launch_server``), for hosts without a GPU.

It is not SGLang. What is real: it first parses its whole command line with the real sglang parser
(``sglang.srt.server_args.prepare_server_args`` of the installed release), so a flag the pinned release
does not know fails here exactly as in production (exit 2, argparse's message). Then it plays the
server's life: "loads", serves SGLang's endpoints (/health, /health_generate, /ready, /model_info,
/server_info, /v1/models, a minimal /v1/chat/completions), and drains on SIGTERM (health 503, waits for
requests in flight, exits), like SGLang, with no time limit of its own.
Parsing imports torch and most of sglang (3-5 CPU-seconds a start on the test hosts). With
``SGLANG_STAND_IN_PARSE_CACHE`` set (a directory; relative: under $HOME, the unit's state directory) the
stand-in keeps each answer the parser accepted there, owner-only (it holds the API keys), under a key made
of the command line, the SGLANG_ environment (but SGLANG_STAND_IN_*), the installed parser, the
stand-in's own source and the stack; a later start with the same ones reuses it and imports nothing of
sglang but its auth module. A refused command line is never kept: each start parses, and refuses, it
again. Unset: every start parses.

Failure modes, from the environment (the unit's Environment= / EnvironmentFile=):
  SGLANG_STAND_IN_MODE   normal | slow-start | hang | crash | drain-forever
  SGLANG_STAND_IN_DELAY  seconds of "loading" before ready (slow-start; default 2 otherwise)
``hang``: port open and /ready 503 forever after "Load weight end" (the field case: a loaded model,
zero GPU use, health never 200). ``crash``: a traceback and exit 1 during load. ``drain-forever``:
SIGTERM starts a drain that never ends (what TimeoutStopSec must bound).
A test control for a crash tied to one stack (as a stack with a broken build would): when the file
``/run/sglang-stand-in/crash-on-stack`` holds the name of the stack this server runs from, every rank
crashes while loading, whatever the mode (the stack stays usable for the others).
``--api-key``: each request is let through or refused (401 {"error": "Unauthorized"}) by the real
sglang's own decision (``sglang.srt.utils.auth.decide_request_auth``: /health*, /ready* and /metrics* need
no key, every other endpoint of the stand-in needs ``Authorization: Bearer <key>``).
Test controls (no key needed, loopback or not: it is a stand-in): POST /stand_in/unhealthy,
/stand_in/healthy (health 503/200), /stand_in/refuse, /stand_in/serve (generations 500 while health stays
200); GET /stand_in/stats (generations served).
With ``--enable-metrics`` (as SGLang 0.5.23) it serves /metrics in Prometheus text with SGLang's gauges
``sglang:num_running_reqs`` (here: requests in flight) and ``sglang:num_queue_reqs`` (always 0), the
signal a rolling rebuild waits on before it restarts a drained server.

Multi-node tensor parallel (``--nnodes N --node-rank R --dist-init-addr HOST:PORT``), as SGLang's ranks form
one process group at the dist-init address: rank 0 listens there and is ready only once every other rank
has joined running the same stack (the real path of ``sys.prefix``: a rank on another stack is refused
and logged, as mismatched builds cannot form one group); a rank that leaves makes rank 0's health 503 until
it is back. Ranks > 0 serve no HTTP: they join rank 0 (retrying until it listens) and join again when it
goes away (a restarted rank 0), until SIGTERM.

Speculative decoding: with ``--speculative-algorithm`` on its command line, POST /generate answers in
SGLang 0.5.23's shape (``{"text", "meta_info"}``) with the per-request figures SGLang puts in meta_info
(``spec_verify_ct``, ``spec_accept_length`` = completion_tokens / spec_verify_ct,
``spec_num_correct_drafts``, ``spec_num_proposed_drafts`` = spec_verify_ct * (num_draft_tokens - 1),
``spec_accept_rate``; sglang/srt/managers/tokenizer_manager.py:3138-3172), and /metrics adds the gauges
``sglang:spec_accept_length`` / ``sglang:spec_accept_rate``. The acceptance it plays comes from
  SGLANG_STAND_IN_SPEC_ACCEPT_LENGTH  the acceptance length to report (default 3.0: a healthy draft;
                                      e.g. 1.2 plays a draft that does not fit its target)
Without a speculative algorithm meta_info has no spec_* field, as in SGLang.
"""

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def log(message):
    print(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {message}", flush=True)


class State:
    ready = False
    ranks = None  # multi-node, rank 0: {rank: stack} of the ranks that joined
    draining = False
    healthy = True
    refusing = False
    in_flight = 0
    served = 0
    lock = threading.Lock()
    stopped = threading.Event()


def stack_of_this_process():
    """What ranks of one model must share: the stack this Python runs from (`current` resolved)."""
    return os.path.realpath(sys.prefix)


CRASH_ON_STACK = "/run/sglang-stand-in/crash-on-stack"


def crashes_on_this_stack():
    try:
        with open(CRASH_ON_STACK) as handle:
            return handle.read().strip() == os.path.basename(stack_of_this_process())
    except OSError:
        return False


def split_address(address):
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def serve_rendezvous(args, stack):
    """Rank 0: accept the other ranks at the dist-init port; each sends one line {"rank", "stack"}."""
    State.ranks = {}
    _, port = split_address(args.dist_init_addr)
    listener = socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True) \
        if socket.has_dualstack_ipv6() else socket.create_server(("", port))

    def member(conn):
        with conn, conn.makefile("rw") as stream:
            try:
                hello = json.loads(stream.readline() or "{}")
            except ValueError:
                return
            rank, theirs = hello.get("rank"), hello.get("stack")
            if theirs != stack:
                log(f"node rank {rank} runs {theirs}, rank 0 runs {stack}: the ranks of one model must "
                    "run the same stack; refused")
                stream.write("refused\n")
                stream.flush()
                return
            stream.write("ok\n")
            stream.flush()
            with State.lock:
                State.ranks[rank] = theirs
            log(f"node rank {rank} joined ({len(State.ranks) + 1}/{args.nnodes} ranks)")
            stream.read()  # until the rank goes away
            with State.lock:
                State.ranks.pop(rank, None)
            log(f"node rank {rank} left: the model has {len(State.ranks) + 1}/{args.nnodes} ranks")

    def accept():
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=member, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()


def all_ranks_joined(args):
    return State.ranks is None or len(State.ranks) == args.nnodes - 1


def join_rank0(args, stack):
    """Rank > 0: join rank 0 and stay joined; join again when it goes away. Never returns."""
    host, port = split_address(args.dist_init_addr)
    while True:
        try:
            with socket.create_connection((host, port), timeout=5) as conn, conn.makefile("rw") as stream:
                conn.settimeout(None)
                stream.write(json.dumps({"rank": args.node_rank, "stack": stack}) + "\n")
                stream.flush()
                answer = stream.readline().strip()
                if answer == "ok":
                    log(f"node rank {args.node_rank}: joined rank 0 at {args.dist_init_addr}")
                    stream.read()
                    log(f"node rank {args.node_rank}: rank 0 went away; joining again")
                else:
                    log(f"node rank {args.node_rank}: rank 0 refused this rank ({answer or 'closed'})")
        except OSError as exc:
            log(f"node rank {args.node_rank}: rank 0 at {args.dist_init_addr} not reachable yet ({exc})")
        time.sleep(1)


def spec_figures(args, completion_tokens):
    """What SGLang's meta_info says of one finished request, for the acceptance this stand-in plays."""
    accept_length = float(os.environ.get("SGLANG_STAND_IN_SPEC_ACCEPT_LENGTH", "3.0"))
    draft_tokens = args.speculative_num_draft_tokens or 4
    verify_ct = max(1, round(completion_tokens / accept_length))
    proposed = verify_ct * (draft_tokens - 1)
    correct = min(max(completion_tokens - verify_ct, 0), proposed)
    return {"spec_verify_ct": verify_ct, "spec_accept_length": completion_tokens / verify_ct,
            "spec_num_correct_drafts": correct, "spec_num_proposed_drafts": proposed,
            "spec_accept_rate": correct / proposed if proposed else 0.0}


def generate_answer(args, request, worker):
    """A /generate answer in SGLang's shape; spec_* figures only with a speculative algorithm."""
    sampling = request.get("sampling_params") or {}
    completion = int(sampling.get("max_new_tokens") or 128)
    meta = {"id": f"stand-in-{State.served}", "finish_reason": {"type": "length", "length": completion},
            "prompt_tokens": len(str(request.get("text") or "").split()), "completion_tokens": completion,
            "cached_tokens": 0, "worker": worker}
    if args.speculative_algorithm and completion > 1:
        meta.update(spec_figures(args, completion))
    return {"text": f" stand-in reply from {worker}", "meta_info": meta}


def spec_gauges(args, labels):
    """SGLang's speculative gauges on /metrics (only with a speculative algorithm)."""
    if not args.speculative_algorithm:
        return ""
    figures = spec_figures(args, 128)
    return ("# HELP sglang:spec_accept_length Mean acceptance length of speculative decoding.\n"
            "# TYPE sglang:spec_accept_length gauge\n"
            f"sglang:spec_accept_length{{{labels}}} {figures['spec_accept_length']}\n"
            "# HELP sglang:spec_accept_rate Speculative acceptance rate.\n"
            "# TYPE sglang:spec_accept_rate gauge\n"
            f"sglang:spec_accept_rate{{{labels}}} {figures['spec_accept_rate']}\n")


def make_handler(args):
    auth = sglang_module("srt/utils/auth.py")
    AuthLevel, decide_request_auth = auth.AuthLevel, auth.decide_request_auth

    model = args.served_model_name or args.model_path
    worker = f"{socket.gethostname()}:{args.port}"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def _send(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _send_text(self, code, text):
            data = text.encode()
            self.send_response(code)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _up(self):
            return State.ready and not State.draining and all_ranks_joined(args)

        def _refused(self, path):
            """sglang's own answer to a request without the right key (its routes here are NORMAL)."""
            if path.startswith("/stand_in/"):
                return False
            decision = decide_request_auth(method=self.command, path=path,
                                           authorization_header=self.headers.get("Authorization"),
                                           api_key=args.api_key, admin_api_key=args.admin_api_key,
                                           auth_level=AuthLevel.NORMAL)
            if decision.allowed:
                return False
            self._send(decision.error_status_code, {"error": "Unauthorized"})
            return True

        def do_GET(self):
            path = self.path.split("?")[0]
            if self._refused(path):
                return None
            if path in ("/health", "/health_generate"):
                ok = self._up() and State.healthy
                return self._send(200 if ok else 503, {"ok": ok})
            if path == "/ready":
                return self._send(200 if self._up() else 503, {"ready": self._up()})
            if path in ("/model_info", "/get_model_info"):
                return self._send(200, {"model_path": args.model_path, "tokenizer_path": args.model_path,
                                        "is_generation": True, "served_model_name": model})
            if path in ("/server_info", "/get_server_info"):
                return self._send(200, {"model_path": args.model_path, "tp_size": args.tp_size,
                                        "version": "stand-in", "stand_in": True})
            if path == "/v1/models":
                return self._send(200, {"object": "list", "data": [{"id": model, "object": "model",
                                                                    "owned_by": "sglang-stand-in"}]})
            if path == "/metrics" and args.stand_in_metrics:
                labels = f'model_name="{model}",engine_type="unified"'
                return self._send_text(200, (
                    "# HELP sglang:num_running_reqs The number of running requests.\n"
                    "# TYPE sglang:num_running_reqs gauge\n"
                    f"sglang:num_running_reqs{{{labels}}} {float(State.in_flight)}\n"
                    "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n"
                    "# TYPE sglang:num_queue_reqs gauge\n"
                    f"sglang:num_queue_reqs{{{labels}}} 0.0\n" + spec_gauges(args, labels)))
            if path == "/stand_in/stats":
                return self._send(200, {"served": State.served, "worker": worker})
            log(f"GET {path}: 404")
            return self._send(404, {"error": f"no route {path}"})

        def do_POST(self):
            path = self.path.split("?")[0]
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if self._refused(path):
                return None
            if path == "/stand_in/unhealthy":
                State.healthy = False
                return self._send(200, {"healthy": False})
            if path == "/stand_in/healthy":
                State.healthy = True
                return self._send(200, {"healthy": True})
            if path in ("/stand_in/refuse", "/stand_in/serve"):
                State.refusing = path == "/stand_in/refuse"
                return self._send(200, {"refusing": State.refusing})
            if path in ("/v1/chat/completions", "/generate", "/v1/completions"):
                if not self._up():
                    return self._send(503, {"error": "not ready"})
                if State.refusing:
                    return self._send(500, {"error": "STAND-IN refusing generations (/stand_in/refuse)"})
                with State.lock:
                    State.in_flight += 1
                try:
                    request = json.loads(body or b"{}")
                    time.sleep(float(os.environ.get("SGLANG_STAND_IN_LATENCY", "0")))
                    with State.lock:
                        State.served += 1
                    if path == "/generate":
                        return self._send(200, generate_answer(args, request, worker))
                    return self._send(200, {
                        "id": f"stand-in-{State.served}", "object": "chat.completion",
                        "created": int(time.time()),
                        "model": request.get("model") or model,
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant",
                                                 "content": f"stand-in reply from {worker}"}}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                        "worker": worker})
                finally:
                    with State.lock:
                        State.in_flight -= 1
            log(f"POST {path}: 404")
            return self._send(404, {"error": f"no route {path}"})

    return Handler


def sglang_file(relative):
    """A file of the installed sglang package, found without importing sglang."""
    spec = importlib.util.find_spec("sglang")
    if spec is None:
        raise ModuleNotFoundError("No module named 'sglang'", name="sglang")
    return os.path.join(spec.submodule_search_locations[0], relative)


def read_bytes(path):
    with open(path, "rb") as handle:
        return handle.read()


def sglang_module(relative):
    """One module file of the installed sglang, loaded alone (sglang.srt.utils.auth imports only the
    standard library, but its package's __init__ imports torch)."""
    name = "sglang_stand_in_" + relative.replace("/", "_").removesuffix(".py")
    spec = importlib.util.spec_from_file_location(name, sglang_file(relative))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


# what the stand-in reads of the parser's answer (kept between starts: JSON values)
PARSED_FIELDS = ("model_path", "served_model_name", "host", "port", "tp_size", "nnodes", "node_rank",
                 "dist_init_addr", "api_key", "admin_api_key", "speculative_algorithm",
                 "speculative_num_draft_tokens")


def installed_record(name):
    """The RECORD of distribution ``name`` in this Python (every file of it, with its sha256), or its
    version alone where the RECORD cannot be read; '' where it is not installed."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return ""
    return dist.read_text("RECORD") or dist.version


def parse_key(argv):
    """What the parser's answer depends on: the installed sglang (all its files), the torch beside it,
    this Python, this stand-in, the command line and SGLANG_* environment. Not the stack's path: a new
    stack with the same sglang and torch reuses the answer."""
    digest = hashlib.sha256()
    for part in (installed_record("sglang"), installed_record("torch"), sys.version,
                 read_bytes(sglang_file("srt/server_args.py")),
                 read_bytes(__file__), json.dumps(argv),
                 json.dumps(sorted((k, v) for k, v in os.environ.items()
                                   if k.startswith("SGLANG_") and not k.startswith("SGLANG_STAND_IN_")))):
        digest.update(part if isinstance(part, bytes) else part.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def parse(argv):
    """The real parser's answer for ``argv`` (an unknown or ambiguous flag exits 2 there, as in
    production), or the answer it gave an earlier start with the same key (parse_key)."""
    where = os.environ.get("SGLANG_STAND_IN_PARSE_CACHE")
    kept = os.path.join(os.path.expanduser("~"), where, parse_key(argv) + ".json") if where else None
    fields = None
    if kept:
        try:
            with open(kept, encoding="utf-8") as handle:
                fields = json.load(handle)
        except (OSError, ValueError):  # none kept yet
            fields = None
    if fields is not None:
        log("arguments: the real sglang parser's answer for this command line, environment and stack, "
            "kept from an earlier start")
        return type("KeptServerArgs", (), fields)()
    from sglang.srt.server_args import prepare_server_args  # noqa: PLC0415

    args = prepare_server_args(argv)
    if kept:
        try:
            os.makedirs(os.path.dirname(kept), mode=0o700, exist_ok=True)
            partial = f"{kept}.{os.getpid()}"
            with open(os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
                json.dump({name: getattr(args, name) for name in PARSED_FIELDS}, handle)
            os.replace(partial, kept)
        except OSError as error:  # an unwritable home: every start parses
            log(f"the parser's answer is not kept: {error}")
    return args


def main(argv):
    args = parse(argv)
    args.stand_in_metrics = "--enable-metrics" in argv
    mode = os.environ.get("SGLANG_STAND_IN_MODE", "normal")
    delay = float(os.environ.get("SGLANG_STAND_IN_DELAY", "30" if mode == "slow-start" else "1"))
    log(f"STAND-IN sglang server (not SGLang): arguments parsed by the real sglang parser; mode={mode}")
    log(f"server_args=model_path={args.model_path} host={args.host} port={args.port} tp_size={args.tp_size} "
        f"nnodes={args.nnodes} node_rank={args.node_rank} dist_init_addr={args.dist_init_addr}")
    if crashes_on_this_stack():
        log("Traceback (most recent call last):")
        log(f"RuntimeError: STAND-IN crash on start ({CRASH_ON_STACK} names this stack)")
        return 1
    if args.node_rank and args.node_rank > 0:
        # only rank 0 serves HTTP; the other ranks join rank 0 and wait
        log(f"node rank {args.node_rank}: joining {args.dist_init_addr}; no HTTP server on this rank")
        signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
        join_rank0(args, stack_of_this_process())
    if args.nnodes and args.nnodes > 1:
        serve_rendezvous(args, stack_of_this_process())
    server = ThreadingHTTPServer((args.host, args.port), make_handler(args))
    server.daemon_threads = True

    def drain(*_):
        State.draining = True
        log("SIGTERM: draining (health 503), waiting for requests in flight")
        def finish():
            while mode == "drain-forever" or State.in_flight:
                time.sleep(0.1)
            log("drained; exiting")
            server.shutdown()
            State.stopped.set()
        threading.Thread(target=finish, daemon=True).start()

    signal.signal(signal.SIGTERM, drain)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    log("Load weight begin.")
    if mode == "crash":
        time.sleep(min(delay, 1))
        log("Traceback (most recent call last):")
        log("RuntimeError: STAND-IN crash on start (SGLANG_STAND_IN_MODE=crash)")
        sys.exit(1)
    step = 5.0
    waited = 0.0
    while waited < delay:
        time.sleep(min(step, delay - waited))
        waited += step
        log(f"loading ({min(waited, delay):.0f}/{delay:.0f} s)")
    log("Load weight end. type=StandInForCausalLM, dtype=bfloat16")
    if not all_ranks_joined(args):
        log(f"waiting for the other node ranks at {args.dist_init_addr}")
    while not all_ranks_joined(args) and not State.draining:
        time.sleep(0.2)
    if mode != "hang" and not State.draining:
        State.ready = True
        log("The server is fired up and ready to roll!")
    State.stopped.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
