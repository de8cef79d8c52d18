"""The vLLM reproduction's stand-in engine (NOT vLLM; loads no model): what `vllm serve` and `vllm preload`
do where fastrestartd can see it, for fastrestartd's tests (tests/supervisor/vllm_e2e_test.cc runs
tests/supervisor/vllm_standin/vllm, a script over this package; docs/vllm.md, "The vLLM reproduction").

`vllm serve` goes through the reproduction's vLLM order (vllm/entrypoints/cli/main.py: the parser, and with
it the general plugins; then vllm/entrypoints/launchers/launcher.py setup_server binds --host:--port; the
engine; then serve_http, where uvicorn listens with its backlog) and uses FAKE_VLLM_ENGINE=standin (the
default) for its engine and HTTP side:

  vllm serve MODEL [flags]     an OpenAI-style server: GET /health, POST /v1/completions (model checked
                               against --served-model-name), started after a delay. A port some process
                               listens on fails at setup_server with EADDRINUSE (exit 1); the port listens
                               only once started (refused before). Through fastrestart_vllm.launch it
                               serves on the socket fastrestartd passes instead. Prints the startup lines
                               vLLM prints ("vLLM server version X, serving model M", the model runner);
                               with --load-format ipc_cache it reads --model-loader-extra-config and looks
                               for a preload daemon's state in the socket directory: "Mapped N tensors from
                               the weight cache daemon (zero_copy mode)" on a key match, else "Weight cache
                               unusable (...); falling back to disk loading", or with "fallback": false an
                               exit with vLLM's error. Like vLLM's ipc_cache loader it fails on extra
                               config keys it does not take ("Unexpected extra config keys") and on a
                               quantization outside its allowlist (UnsupportedQuantForIPCError), fallback
                               or not. Logs "Using V2 Model Runner" unless --standin-runner-v1.
                               argparse errors like vLLM 0.31's for the flags it removed. The completion
                               text is a digest of the weights it "holds": the preload's (taken when the
                               preload started) or the checkpoint's current bytes.
  vllm preload --model M ...   a weight cache daemon launcher: after a delay writes its state (the key and
                               the weights' digest) to the socket directory, logs vLLM's READY line and
                               answers 200 on --weight-cache-health-host:--weight-cache-health-port/health
                               (503 before); SIGTERM removes its state and exits 0. (Where vLLM's preload
                               loads plugins was not checked: it loads none here.)

Like vLLM's, the stand-in preload's key covers the checkpoint's layout only (vLLM issue #59647): it hashes
file names and sizes, never the bytes, so a checkpoint rewritten in place with the same layout still
"matches" and is served from the preload's old weights. That is what fastrestartd's checkpoint watch is for.

Every invocation appends one JSON line to $VLLM_STANDIN_LOG: {"event": "start"|"exit", "cmd", "argv",
"pid", "time", "env": {CUDA_VISIBLE_DEVICES}}; tests read the command lines and the order of starts and
stops from it.

Test knobs (never real vLLM flags; fastrestartd passes them through to `serve` only):
  --standin-startup-delay S      seconds before the server answers (default 0.2)
  --standin-crash-after-requests N   exit 1 with an EngineDeadError traceback after N completions
  --standin-fail "message"       print the message (a vLLM fatal error) at startup and exit 1
  --standin-runner-v1            log vLLM's "using the V1 model runner instead" line
  --standin-loader-line LINE     print LINE at startup (a fastrestart vLLM loader plugin's result line)
Environment: VLLM_STANDIN_PRELOAD_DELAY (seconds, default 0.3), VLLM_STANDIN_VERSION (default 0.31.0),
VLLM_STANDIN_PRELOAD_FAIL (the preload prints this and exits 1 while loading, as a failed rank makes it).
Stdlib only.
"""

import argparse
import hashlib
import http.server
import json
import os
import signal
import sys
import tempfile
import threading
import time

import repro

VERSION = os.environ.get("VLLM_STANDIN_VERSION", "0.31.0")
REMOVED_0_31 = {"--enable-mamba-fine-grained-prefix-cache"}
TOKENIZER_MODES = ("auto", "hf", "mistral", "custom")
IPC_KEYS = {"socket_path", "socket_dir", "mode", "fallback", "connect_timeout_s", "state_timeout_s"}
IPC_QUANT = {None, "fp8", "modelopt_fp4", "mxfp4"}
KEY_FLAGS = ("--model", "--revision", "--dtype", "--quantization", "--tensor-parallel-size",
             "--pipeline-parallel-size", "--data-parallel-size")
ALIASES = {"-tp": "--tensor-parallel-size", "-pp": "--pipeline-parallel-size", "-dp": "--data-parallel-size",
           "-q": "--quantization"}


def log_event(event, cmd, **extra):
    path = os.environ.get("VLLM_STANDIN_LOG")
    if not path:
        return
    rec = {"event": event, "cmd": cmd, "argv": sys.argv[1:], "pid": os.getpid(), "time": time.time(),
           "env": {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES")}}
    rec.update(extra)
    with open(path, "a") as f:
        f.write(json.dumps(rec) + "\n")


def say(msg):
    # vLLM's log format: "INFO 11-30 08:00:00 [file.py:12] message"
    sys.stderr.write("INFO %s [standin] %s\n" % (time.strftime("%m-%d %H:%M:%S"), msg))
    sys.stderr.flush()


def die(cmd, msg, code=1):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()
    log_event("exit", cmd, code=code)
    sys.exit(code)


def parse(cmd, argv):
    """A small argparse: flags and their values; vLLM's errors for what 0.31 refuses."""
    flags, positional, i = {}, [], 0
    while i < len(argv):
        w = argv[i]
        if w.startswith("-") and len(w) > 1 and not w[1].isdigit():
            name, _, inline = w.partition("=")
            name = ALIASES.get(name, name)
            if name.startswith("--"):
                name = "--" + name[2:].replace("_", "-")
            values = [inline] if inline else []
            while not inline and i + 1 < len(argv) and not (argv[i + 1].startswith("-") and len(argv[i + 1]) > 1
                                                             and not argv[i + 1][1].isdigit()):
                i += 1
                values.append(argv[i])
            if name in REMOVED_0_31:
                die(cmd, "usage: vllm %s [options]\nvllm %s: error: unrecognized arguments: %s" % (cmd, cmd, w), 2)
            flags[name] = values[-1] if values else True
        else:
            positional.append(w)
        i += 1
    mode = flags.get("--tokenizer-mode")
    if mode is not None and mode not in TOKENIZER_MODES:
        die(cmd, "vllm %s: error: argument --tokenizer-mode: invalid choice: '%s' (choose from %s)"
            % (cmd, mode, ", ".join("'%s'" % m for m in TOKENIZER_MODES)), 2)
    return flags, positional


def checkpoint_files(model):
    if os.path.isdir(model):
        return sorted(os.path.join(model, f) for f in os.listdir(model) if f.endswith(".safetensors"))
    return [model] if os.path.isfile(model) else []


def layout_key(flags, model):
    """The key: config fields plus the files' names and sizes (headers, not bytes: vLLM #59647)."""
    key = {f: str(flags.get(f, "")) for f in KEY_FLAGS}
    key["--model"] = model
    key["files"] = [[os.path.basename(p), os.path.getsize(p)] for p in checkpoint_files(model)]
    key["vllm_version"] = VERSION
    return key


def weights_digest(model):
    h = hashlib.sha256()
    for p in checkpoint_files(model):
        with open(p, "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:12]


def socket_dir(flag_value):
    return flag_value or os.path.join(tempfile.gettempdir(), "vllm_weight_cache_%d" % os.getuid())


def state_path(directory):
    return os.path.join(directory, "standin-preload.json")


class Handler(http.server.BaseHTTPRequestHandler):
    server_version = "vllm-standin"

    def log_message(self, *args):
        pass

    def reply(self, code, body=b"", ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/health":
            self.reply(200 if self.server.ready() else 503)
        else:
            self.reply(404)

    def do_POST(self):
        if self.path != "/v1/completions" or self.server.cmd != "serve":
            return self.reply(404)
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        names = self.server.served_names
        if body.get("model") is not None and body["model"] not in names:
            return self.reply(404, json.dumps({"error": {"message": "The model `%s` does not exist." % body["model"]}}).encode())
        self.server.requests += 1
        text = " " + self.server.weights
        self.reply(200, json.dumps({"choices": [{"text": text, "index": 0}], "model": names[0]}).encode())
        limit = self.server.crash_after
        if limit and self.server.requests >= limit:
            def crash():
                time.sleep(0.05)
                sys.stderr.write("Traceback (most recent call last):\nvllm.v1.engine.exceptions.EngineDeadError: "
                                 "EngineCore encountered an issue. See stack trace (above) for the root cause.\n")
                sys.stderr.flush()
                log_event("exit", "serve", code=1)
                os._exit(1)
            threading.Thread(target=crash, daemon=True).start()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def health_server(host, port, cmd, ready):
    """The preload's own HTTP server on (host, port), serving at once (its /health: 503 until ready)."""
    srv = Server((host, port), Handler)
    srv.cmd, srv.ready, srv.requests, srv.crash_after, srv.weights, srv.served_names = cmd, ready, 0, 0, "", ["?"]
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def http_app(srv_state):
    """The API server's app for the reproduction's uvicorn: serves the listening socket it is given."""
    def app(sock):
        srv = Server(sock.getsockname()[:2], Handler, bind_and_activate=False)
        srv.socket.close()
        srv.socket, srv.server_address = sock, sock.getsockname()
        for k, v in srv_state.items():
            setattr(srv, k, v)
        srv.requests = 0
        repro.step("listen", "api_server")
        say("Application startup complete.")
        srv.serve_forever()
    return app


def on_term(cmd, cleanup=None):
    def handler(signum, frame):
        if cleanup:
            cleanup()
        say("shutting down (signal %d)" % signum)
        log_event("exit", cmd, code=0, signal=signum)
        os._exit(0)
    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def cmd_preload(argv):
    flags, _ = parse("preload", argv)
    if flags.get("--load-format") == "ipc_cache":
        die("preload", "ValueError: The weight cache daemon itself must load from disk; use the default --load-format")
    model = flags.get("--model")
    if not isinstance(model, str):
        die("preload", "vllm preload: error: --model is required", 2)
    directory = socket_dir(flags.get("--weight-cache-socket-dir"))
    os.makedirs(directory, mode=0o700, exist_ok=True)
    state = {"ready": False}
    key, digest = layout_key(flags, model), weights_digest(model)  # the bytes as they are now: "loaded"
    log_event("start", "preload", key=key)
    on_term("preload", lambda: os.path.exists(state_path(directory)) and os.unlink(state_path(directory)))
    port = flags.get("--weight-cache-health-port")
    if port:
        health_server(flags.get("--weight-cache-health-host", "0.0.0.0"), int(port), "preload", lambda: state["ready"])
    say("Loading weights of %s on %s GPU(s)" % (model, flags.get("--tensor-parallel-size", "1")))
    time.sleep(float(os.environ.get("VLLM_STANDIN_PRELOAD_DELAY", "0.3")))
    if os.environ.get("VLLM_STANDIN_PRELOAD_FAIL"):
        sys.stderr.write(os.environ["VLLM_STANDIN_PRELOAD_FAIL"] + "\n")
        sys.stderr.write("ERROR [preload.py:1] Weight cache daemon rank(s) exited during startup (exitcodes=[1]); shutting down.\n")
        die("preload", "", 1)
    with open(state_path(directory) + ".tmp", "w") as f:
        json.dump({"key": key, "weights": digest, "pid": os.getpid()}, f)
    os.rename(state_path(directory) + ".tmp", state_path(directory))
    state["ready"] = True
    sys.stderr.write("===== Weight cache daemon READY: node 0/1 serving %s local rank(s) x 1 role(s) in %s =====\n"
                     % (flags.get("--tensor-parallel-size", "1"), directory))
    sys.stderr.flush()
    while True:
        time.sleep(3600)


def cmd_serve(argv):
    """`vllm serve` after its parser was built (the plugins loaded): setup_server, the engine, serve_http."""
    from vllm.entrypoints.launchers import launcher
    flags, positional = parse("serve", argv)
    model = positional[0] if positional else flags.get("--model")
    log_event("start", "serve")
    on_term("serve")
    say("vLLM server version %s, serving model %s" % (VERSION, model))
    host, port = flags.get("--host", "0.0.0.0"), int(flags.get("--port", 8000))
    # vLLM's setup_server: bound first, before the engine starts; listening only once the engine is up
    # (serve_http), so connections meanwhile are refused (or, on a socket fastrestartd passed, wait).
    try:
        _, sock = launcher.setup_server(argparse.Namespace(host=host, port=port, uds=flags.get("--uds")))
    except OSError as e:
        die("serve", "OSError: [Errno %d] %s" % (e.errno, e.strerror))
    repro.step("bind", "api_server")
    # The engine, in this process: the steps of vLLM's engine core and worker (vllm/v1/engine/core.py,
    # vllm/v1/worker/gpu_worker.py) as lines only; the startup delay stands for their time.
    repro.step("engine_core_spawn", "api_server")
    names = flags.get("--served-model-name")
    state = {"cmd": "serve", "ready": lambda: True, "crash_after": int(flags.get("--standin-crash-after-requests", 0)),
             "served_names": [names if isinstance(names, str) else model], "weights": ""}
    time.sleep(float(flags.get("--standin-startup-delay", 0.2)))
    if isinstance(flags.get("--standin-fail"), str):
        die("serve", flags["--standin-fail"])
    if isinstance(flags.get("--standin-loader-line"), str):
        sys.stderr.write(flags["--standin-loader-line"] + "\n")
        sys.stderr.flush()
    if flags.get("--standin-runner-v1"):
        say("Model Runner V2 does not yet support custom logits processors; using the V1 model runner instead.")
    else:
        say("Using V2 Model Runner")
    if flags.get("--load-format") == "ipc_cache":
        extra = json.loads(flags.get("--model-loader-extra-config", "{}"))
        unexpected = sorted(set(extra) - IPC_KEYS)
        if unexpected:
            die("serve", "ValueError: Unexpected extra config keys for load format ipc_cache: %s" % unexpected)
        if flags.get("--quantization") not in IPC_QUANT:
            die("serve", "vllm.model_executor.model_loader.weight_cache.protocol.UnsupportedQuantForIPCError: "
                "[weight_cache:engine] quantization method %r is not verified" % flags["--quantization"])
        path = state_path(socket_dir(extra.get("socket_dir")))
        mine = layout_key(flags, model)
        if not os.path.exists(path):
            why = "Cannot connect to weight cache daemon at %s" % path
            if extra.get("fallback", True) is False:
                die("serve", "RuntimeError: Weight cache daemon did not become ready within %.1f s: %s"
                    % (float(extra.get("state_timeout_s", 300.0)), why))
            say("Weight cache unusable (%s); falling back to disk loading" % why)
            state["weights"] = weights_digest(model)
        else:
            with open(path) as f:
                daemon = json.load(f)
            diff = sorted(k for k in mine if mine[k] != daemon["key"].get(k))
            if diff:
                if extra.get("fallback", True) is False:
                    die("serve", "ValueError: WeightCacheKey mismatch on fields: %s" % diff)
                say("Weight cache unusable (WeightCacheKey mismatch on fields: %s); falling back to disk loading" % diff)
                state["weights"] = weights_digest(model)
            else:
                say("Mapped 291 tensors from the weight cache daemon (%s mode)" % extra.get("mode", "zero_copy"))
                state["weights"] = daemon["weights"]
    else:
        state["weights"] = weights_digest(model)
    for name in ("profile", "kv_cache", "graph_capture"):
        repro.step(name, "engine_core")
    launcher.serve_http(http_app(state), sock, host=host, port=port)
    return 0
