"""What the benchmark drivers share (bench/standby_cycles.py, bench/tp_cycles.py, bench/e2e_restart.py,
bench/socket_restart.py, bench/front_kill.py): the one writer of fastrestartd's config (supervisor_config), the
one launcher of fastrestartd (Fastrestartd), its control socket (fastrestartctl), its log's READY lines, its engine's HTTP API, nvidia-smi, the kill clock (KillClock,
Prober: every restart figure starts at the kill(2) the bench sends), and the loop of kill -9 cycles that
saves the results after every cycle, so that a run cut short by its timeout keeps what it measured.

The kill clock (docs/benchmarks.md, "How a restart is timed"): the bench reads time.monotonic() just
before kill(2) (and time.time(), for the record). fastrestartd stamps the engine's reap (status
`last_exit.died_at_s`) and the READY (`last_start.ready_at_s`) on the same clock (CLOCK_MONOTONIC, libuv's
uv_hrtime), so kill -> reap and kill -> READY are differences on one clock of one machine. A client that
keeps sending requests (Prober) gives kill -> the first answered request, and kill -> the first byte of an
answer (the moment the engine began answering: a streamed answer's first event, another's status line), so
READY minus that first byte says how far READY is from the first request the engine could answer.

The drivers import it from their own folder (python3 puts a script's folder first on sys.path). The shell
benches start fastrestartd through it too: `fastrestartd_run.py exec CONFIG LOG [ARGS...]` (bench/lib.sh's
fastrestartd_start, bench/gpu_snapshot.sh, bench/gpu_supervisor.sh, bench/supervisor_overhead.sh).
"""
import collections
import http.client
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

PROMPT = "The capital of France is"  # the oracle prompt

# The [weights.key] of the PyTorch reference engine at TP=1 (docs/refengine.md; bench/gpu_standby.sh writes
# the same in bash): the key under which it publishes and attaches its weights.
REFENGINE_WEIGHTS_KEY = {"arch": "LlamaForCausalLM", "dtype": "BF16", "engine": "fastrestart-refengine 0.1.0",
                         "tp_size": "1", "tp_rank": "0"}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def ctl(sock, *args, timeout=60, binary="fastrestartctl"):
    """fastrestartctl --socket SOCK ARGS...: its stdout; a RuntimeError naming the command when it fails."""
    r = subprocess.run([binary, "--socket", sock, *args], capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"fastrestartctl {' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def readies(text):
    """How many starts fastrestartd's log text reports ready."""
    return text.count("READY: path")


def read_log(path):
    with open(path, errors="replace") as f:
        return f.read()


def nvidia_smi(*query):
    """nvidia-smi QUERY... --format=csv,noheader,nounits: its stdout; None where it cannot run."""
    try:
        return subprocess.run(["nvidia-smi", *query, "--format=csv,noheader,nounits"], capture_output=True,
                              text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machine_cpu():
    """The machine of a CPU run, for its raw file: the CPU model, its count, the kernel."""
    model = None
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), None)
    except OSError:
        pass
    return {"kind": "cpu", "cpu": model, "cpus": os.cpu_count(), "kernel": os.uname().release}


def add_daemon_args(ap):
    """The options naming the running fastrestartd and its engine."""
    ap.add_argument("--socket", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)


def toml_text(doc):
    """TOML for DOC: its scalar and list keys first, then each dict value as a [table] (nested ones as
    [table.sub]). Values are strings, numbers, booleans and lists of them, which JSON spells as TOML does;
    a key whose value is None is left out."""
    def table(name, keys):
        plain = [f"{k} = {json.dumps(v)}" for k, v in keys.items() if v is not None and not isinstance(v, dict)]
        head = [f"[{name}]"] if name else []
        subs = [table(f"{name}.{k}" if name else k, v) for k, v in keys.items() if isinstance(v, dict)]
        return "\n".join(head + plain + [t for t in subs if t])
    return table("", doc) + "\n"


def supervisor_config(d, model, command, flags, port, weights, **tables):
    """fastrestartd's config for one benchmark run (docs/config.md), as TOML: engine MODEL (COMMAND, FLAGS)
    on 127.0.0.1:PORT, WEIGHTS the [weights] table (its socket_dir defaults to d/run), its control socket
    control_socket(d), its state under d/state, no HTTP listener, and the short backoff every benchmark
    uses (kills are the bench's, never a crash loop). TABLES add to or override a table's keys
    ({"engine": {"listen": "front"}, "standby": {"level": "warmed"}}); `top` holds top-level keys ({"gpus": ["0"]})."""
    doc = dict(tables.pop("top", {}))
    doc.update({
        "model": {"name": model},
        "engine": {"kind": "generic", "command": command, "flags": flags, "host": "127.0.0.1", "port": port,
                   "stop_grace_s": 5},
        "weights": dict({"socket_dir": os.path.join(d, "run")}, **weights),
        "readiness": {"model": model, "poll_interval_s": 0.02, "startup_timeout_s": 120},
        "restart": {"backoff_initial_s": 0.01, "backoff_max_s": 0.05, "crash_loop_limit": 1000},
        "control": {"socket": control_socket(d), "state_dir": os.path.join(d, "state")},
        "http": {"listen": "none"},
    })
    for name, keys in tables.items():
        doc.setdefault(name, {}).update(keys)
    return toml_text(doc)


def control_socket(d):
    """The control socket of the run whose files are under d (supervisor_config)."""
    return os.path.join(d, "ctl", "s.ctl")


def fastrestartd_argv(config, binary="fastrestartd", extra=()):
    """fastrestartd's command line on CONFIG (EXTRA: more of its options): how every bench starts it."""
    return [binary, "--config", config, *extra]


def exec_fastrestartd(config, logpath, extra=(), binary="fastrestartd"):
    """Becomes fastrestartd on CONFIG (the same pid: a shell that starts this in the background holds
    fastrestartd's pid in $!), its stdout and stderr in LOGPATH (truncated), as `fastrestartd ... >LOG 2>&1`
    would; the signals Python ignores for itself (SIGPIPE, SIGXFSZ) back to their defaults first."""
    fd = os.open(logpath, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    argv = fastrestartd_argv(config, binary, extra)
    os.execvp(argv[0], argv)


class Fastrestartd:
    """One fastrestartd that a bench starts on a config it wrote: DIR/fastrestart.toml, its output (the
    engine's included) in LOG (default DIR/fastrestartd.log), driven through its control socket SOCK. The
    one launcher of the Python benches (e2e_restart.py, socket_restart.py, standby_cycles.py --launch)."""

    def __init__(self, d, config_text, sock, log_path=None, fastrestartd="fastrestartd", fastrestartctl="fastrestartctl"):
        os.makedirs(d, exist_ok=True)
        self.dir, self.sock = d, sock
        self.bin, self.ctl_bin = fastrestartd, fastrestartctl
        self.config = os.path.join(d, "fastrestart.toml")
        with open(self.config, "w") as f:
            f.write(config_text)
        self.logpath = log_path or os.path.join(d, "fastrestartd.log")
        self.proc = None
        self._logf = None

    def check(self):
        """fastrestartd --check: None when the config is valid, else its message."""
        r = subprocess.run([self.bin, "--check", "--config", self.config], capture_output=True, text=True, timeout=60)
        return None if r.returncode == 0 else (r.stderr or r.stdout).strip()

    def start(self):
        self._logf = open(self.logpath, "w")
        self.proc = subprocess.Popen(fastrestartd_argv(self.config, self.bin), stdout=self._logf, stderr=subprocess.STDOUT)
        return self

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def exited(self):
        """fastrestartd's exit status once it has exited, else None."""
        return self.proc.poll() if self.proc else None

    def ctl(self, *args, timeout=60):
        return ctl(self.sock, *args, timeout=timeout, binary=self.ctl_bin)

    def status(self):
        return json.loads(self.ctl("status", "--json"))

    def try_status(self):
        """status, or None while the control socket does not answer (starting, stopping)."""
        try:
            return self.status()
        except (RuntimeError, subprocess.TimeoutExpired, ValueError):
            return None

    def text(self):
        return read_log(self.logpath)

    def readies(self):
        return readies(self.text())

    def wait(self, pred, what, timeout, between=None):
        """Until pred(status) holds: that status. fastrestartd's exit ends the wait at once (naming its log);
        between(): called on every poll that did not hold (it may raise to end the wait)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.exited() is not None:
                raise RuntimeError(f"fastrestartd exited {self.exited()} (waiting for {what}); its log: {self.logpath}")
            st = self.try_status()
            if st is not None and pred(st):
                return st
            if between is not None:
                between()
            time.sleep(0.01)
        raise RuntimeError(f"no {what} within {timeout:.0f} s; its log: {self.logpath}")

    def wait_ready(self, n, timeout):
        """Until READY #n in the log: then fastrestartd's status."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.readies() >= n:
                return self.status()
            if self.exited() is not None:
                raise RuntimeError(f"fastrestartd exited {self.exited()}; its log: {self.logpath}")
            time.sleep(0.01)
        raise RuntimeError(f"no READY #{n} within {timeout} s; its log: {self.logpath}")

    def stop(self, grace=60):
        """SIGTERM (the ordered stop), SIGKILL after GRACE s; its exit status."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._logf is not None:
            self._logf.close()
            self._logf = None
        return self.proc.returncode if self.proc else None


# Where each program lies in a build tree (a folder holding the programs, such as the GPU bundle's bin/, has
# them at its top).
PROGRAMS = {"fastrestartd": "src/supervisor", "fastrestartctl": "src/supervisor",
            "fastrestart-tinyengine": "src/tinyengine", "fastrestart-weightd": "src/daemon",
            "fastrestart-front": "src/front"}


def find_programs(bin_dir, names):
    """{name: path} of each program: BIN_DIR as a build tree, else BIN_DIR's top, else PATH; None where none."""
    found = {}
    for name in names:
        found[name] = None
        for p in ((os.path.join(bin_dir, PROGRAMS[name], name), os.path.join(bin_dir, name)) if bin_dir else ()):
            if os.access(p, os.X_OK):
                found[name] = os.path.abspath(p)
                break
        else:
            found[name] = shutil.which(name)
    return found


def completion_body(model, max_tokens=1):
    """The request the kill clock's client sends: one greedy completion of the oracle prompt."""
    return json.dumps({"model": model, "prompt": PROMPT, "max_tokens": max_tokens, "temperature": 0}).encode()


class Request(collections.namedtuple("Request", "sent ended outcome first_byte")):
    """One request of a Prober client, on time.monotonic(): sent (before the connect), ended (the answer
    read to its end, or the failure), outcome, and first_byte: when the answer began to arrive (a streamed
    answer: its first SSE `data:` event; any other answer: its status line and headers), None where no
    answer began (refused, a connection that broke first, a timeout)."""
    __slots__ = ()


class Prober:
    """CLIENTS threads sending BODY to POST /v1/completions on 127.0.0.1:PORT back to back, a new connection
    per request; every request recorded as a Request (sent, ended, outcome, first_byte) on time.monotonic():
    outcome ok, refused (connect failed), reset (the connection broke), timeout, http_<code>, os_<errno>, or
    no_event (a 200 event stream that ended without a `data:` event). After a failure a client waits PAUSE
    s before its next request (a client that retries at once would count its own loop).

    STREAM: the body gets "stream": true and the answer is read as server-sent events: first_byte is the
    first `data:` event, the moment the engine began answering rather than the end of the answer. An engine
    that does not stream answers one JSON body: first_byte is then its status line, which such an engine
    sends after the whole generation."""

    def __init__(self, port, body, clients=1, timeout=60.0, pause=0.01, stream=False):
        if stream:
            b = json.loads(body)
            b["stream"] = True
            body = json.dumps(b).encode()
        self.port, self.body, self.timeout, self.pause, self.stream = port, body, timeout, pause, stream
        self.records, self.lock, self.halt = [], threading.Lock(), threading.Event()
        self.threads = [threading.Thread(target=self.client, daemon=True) for _ in range(clients)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def finish(self):
        """Stops the clients (each after its request in flight): the records (Request), by send time."""
        self.halt.set()
        for t in self.threads:
            t.join(self.timeout + 5)
        with self.lock:
            return sorted(self.records, key=lambda r: (r.sent, r.ended))

    def read_events(self, r):
        """Reads an event stream to its end: when its first `data:` line arrived (None: there was none)."""
        first = None
        while True:
            line = r.readline()
            if not line:
                return first
            if first is None and line.startswith(b"data:"):
                first = time.monotonic()

    def one(self, got):
        """One request: its outcome; got[0]: when its answer began (Request.first_byte)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
        try:
            try:
                conn.connect()
            except ConnectionRefusedError:
                return "refused"
            conn.request("POST", "/v1/completions", body=self.body, headers={"Content-Type": "application/json"})
            r = conn.getresponse()
            got[0] = time.monotonic()  # the status line and headers are read
            if self.stream and r.status == 200 and (r.getheader("Content-Type") or "").startswith("text/event-stream"):
                got[0] = self.read_events(r)
                if got[0] is None:
                    return "no_event"
            else:
                r.read()
            return "ok" if r.status == 200 else f"http_{r.status}"
        except socket.timeout:
            return "timeout"
        except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected, http.client.IncompleteRead,
                ConnectionAbortedError):
            return "reset"
        except OSError as e:
            return f"os_{e.errno}"
        finally:
            conn.close()

    def client(self):
        while not self.halt.is_set():
            got = [None]
            t0 = time.monotonic()
            outcome = self.one(got)
            t1 = time.monotonic()
            with self.lock:
                self.records.append(Request(t0, t1, outcome, got[0]))
            if outcome != "ok":
                time.sleep(self.pause)

    def answered_since(self, t):
        """An ok request sent at or after t has ended (the first answered request after a kill at t)."""
        with self.lock:
            return any(r.outcome == "ok" and r.sent >= t for r in self.records)

    def wait_answered_since(self, t, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.answered_since(t):
                return True
            time.sleep(0.005)
        return False


def first_answers(records, t_kill, end=float("inf")):
    """From a client's records (Request: sent, ended, outcome, first_byte): kill -> the first answered
    request sent after the kill (kill_to_first_answer_s: its answer's end, and when it was sent:
    first_answer_sent_after_s), kill -> the first byte of an answer to a request sent after the kill
    (kill_to_first_byte_s: the earliest first_byte of those answered requests, the moment the engine began
    answering; first_byte_sent_after_s: when that request was sent), and kill -> the first answer at all,
    whenever its request was sent (kill_to_first_success_s: a request queued before the kill may be
    answered by the next engine). Requests ending at or after END belong to the next kill."""
    ok = [r for r in records if r[2] == "ok" and t_kill < r[1] < end]
    after = [r for r in ok if r[0] >= t_kill]
    out = {"kill_to_first_answer_s": None, "first_answer_sent_after_s": None, "kill_to_first_byte_s": None,
           "first_byte_sent_after_s": None, "kill_to_first_success_s": None}
    if after:
        first = min(after, key=lambda r: r[1])
        out.update(kill_to_first_answer_s=round(first[1] - t_kill, 4),
                   first_answer_sent_after_s=round(first[0] - t_kill, 4))
    began = [r for r in after if r.first_byte is not None]
    if began:
        first = min(began, key=lambda r: r.first_byte)
        out.update(kill_to_first_byte_s=round(first.first_byte - t_kill, 4),
                   first_byte_sent_after_s=round(first.sent - t_kill, 4))
    if ok:
        out["kill_to_first_success_s"] = round(min(r[1] for r in ok) - t_kill, 4)
    return out


def ready_vs_first_byte(rec):
    """Adds ready_minus_first_byte_s to a kill's record where it has both kill_to_ready_s and
    kill_to_first_byte_s: READY minus the moment the engine began answering a request sent after the kill
    (positive: READY came after it). Returns rec."""
    ready, byte = rec.get("kill_to_ready_s"), rec.get("kill_to_first_byte_s")
    if isinstance(ready, (int, float)) and isinstance(byte, (int, float)):
        rec["ready_minus_first_byte_s"] = round(ready - byte, 4)
    return rec


class KillClock:
    """One kill -9 of an engine process, timed from the kill(2) call on this bench's time.monotonic().

    ready(status) reads fastrestartd's stamps of the engine's reap (`last_exit.died_at_s`) and of the next
    READY (`last_start.ready_at_s`), which are on the same clock (CLOCK_MONOTONIC), into record():
      kill_to_ready_s         kill(2) -> READY (the headline)
      kill_to_reap_s          kill(2) -> fastrestartd's waitpid of the dead engine (the kernel's teardown of it)
      reap_to_ready_s         the reap -> READY (status last_start.since_previous_exit_s; the figure older
                              runs reported as "death to READY")
      reap_to_release_s, release_to_ready_s   a standby's release (status standby.last_release)
      kill_to_ready_seen_s    kill(2) -> this bench seeing READY in the log (its polls and a status call
                              included: an upper bound)
    answers(records) adds a client's figures (first_answers): kill -> the first answered request, kill -> the
    first byte of an answer (kill_to_first_byte_s: the engine began answering), and with both clocks,
    ready_minus_first_byte_s: READY minus that first byte, the distance of fastrestartd's READY from the
    first request the engine could answer (positive: READY came after it).
    A fastrestartd without `ready_at_s` (older than the kill clock): READY = died_at_s + since_previous_exit_s.
    A stamp that cannot be on this clock (before the kill, or minutes after it) leaves kill_to_ready_s out and
    says so in `clock_error`."""

    def __init__(self, pid, engine_pid=None):
        """PID: the process to kill; ENGINE_PID: the engine whose exit fastrestartd reaps, when PID is one of
        its workers (a tensor-parallel rank)."""
        self.pid = pid
        self.engine_pid = engine_pid or pid
        self.t_kill = None
        self.rec = {"pid": pid}

    def kill(self):
        self.rec["kill_unix_s"] = round(time.time(), 6)
        self.t_kill = time.monotonic()
        os.kill(self.pid, signal.SIGKILL)
        self.rec["kill_monotonic_s"] = round(self.t_kill, 6)
        return self

    def ready(self, st, seen_at=None):
        """Fills the record from fastrestartd's status at the READY after the kill; seen_at: when the bench
        saw that READY (time.monotonic())."""
        r, t = self.rec, self.t_kill
        if seen_at is not None:
            r["kill_to_ready_seen_s"] = round(seen_at - t, 4)
        ls, le = st.get("last_start") or {}, st.get("last_exit") or {}
        r["path"] = ls.get("path")
        r["exec_to_ready_s"] = ls.get("time_to_ready_s")
        r["reap_to_ready_s"] = ls.get("since_previous_exit_s")
        died = le.get("died_at_s") if le.get("pid") == self.engine_pid else None
        ready_at = ls.get("ready_at_s")
        if ready_at is None and died is not None and r["reap_to_ready_s"] is not None:
            ready_at = died + r["reap_to_ready_s"]
        rel = (st.get("standby") or {}).get("last_release") or {}
        if ls.get("path") == "standby" and rel:
            r["reap_to_release_s"] = rel.get("death_to_release_s")
            r["release_to_ready_s"] = rel.get("release_to_ready_s")
        if died is None or ready_at is None:
            r["clock_error"] = (f"status has no reap stamp of pid {self.engine_pid} (last_exit: {le.get('pid')}) "
                                "or no READY stamp: kill_to_ready_s left out")
            return r
        r["kill_to_reap_s"] = round(died - t, 4)
        r["kill_to_ready_s"] = round(ready_at - t, 4)
        if not 0 <= died - t < 600:
            r["clock_error"] = f"the reap stamp is {died - t:.3f} s from the kill: not this clock; kill_to_ready_s left out"
            del r["kill_to_ready_s"]
        return ready_vs_first_byte(r)

    def answers(self, records, end=float("inf")):
        """Fills kill -> the first answered request and the first byte of an answer from a client's records
        (first_answers), and READY minus that first byte (ready_vs_first_byte)."""
        self.rec.update(first_answers(records, self.t_kill, end))
        return ready_vs_first_byte(self.rec)

    def record(self):
        return self.rec


# Per kill in kill_clock_summary's "first_byte_per_kill": when the engine began answering against READY.
FIRST_BYTE_KEYS = ("kill_to_first_byte_s", "kill_to_ready_s", "ready_minus_first_byte_s")


def kill_clock_summary(ks):
    """Median, max and min of each kill-clock figure over the kills ks (records of KillClock), n per figure;
    and first_byte_per_kill: per kill (in order) kill -> first byte, kill -> READY and READY minus first
    byte (None where a kill lacks one), when any kill has a first byte."""
    out = {}
    for key in ("kill_to_ready_s", "kill_to_first_answer_s", "kill_to_first_byte_s", "ready_minus_first_byte_s",
                "kill_to_first_success_s", "kill_to_reap_s", "reap_to_ready_s", "reap_to_release_s",
                "kv_arena_wait_s", "kv_arena_swap_in_s", "release_to_ready_s", "kill_to_ready_seen_s"):
        v = [k[key] for k in ks if isinstance(k.get(key), (int, float))]
        if v:
            out[key] = {"n": len(v), "median": round(statistics.median(v), 4), "max": round(max(v), 4),
                        "min": round(min(v), 4)}
    if "kill_to_first_byte_s" in out:
        out["first_byte_per_kill"] = [{key: k.get(key) for key in FIRST_BYTE_KEYS} for k in ks]
    return out


def first_byte_line(s):
    """One line of a kill-clock summary s (kill_clock_summary) for a bench's text summary: per kill, kill ->
    first byte / kill -> READY / READY minus first byte, then their medians; None without first bytes."""
    per = s.get("first_byte_per_kill")
    if not per:
        return None

    def f(x, sign=""):
        return "-" if x is None else f"{x:{sign}.3f}"
    kills = ", ".join(f"{f(k['kill_to_first_byte_s'])}/{f(k['kill_to_ready_s'])}/{f(k['ready_minus_first_byte_s'], '+')}"
                      for k in per)
    med = {key: (s.get(key) or {}).get("median") for key in FIRST_BYTE_KEYS}
    return (f"kill->first byte / kill->READY / READY-first byte, s, per kill: {kills}; median "
            f"{f(med['kill_to_first_byte_s'])}/{f(med['kill_to_ready_s'])}/{f(med['ready_minus_first_byte_s'], '+')}")


class Driver:
    """One run against a running fastrestartd: `res` (with "kills" and "errors") is written to --out.

    A subclass sets `label` (the prefix of its log lines) and defines run() and summarize()."""

    log_tail_chars = 600  # of fastrestartd's log, quoted when it exits during the run
    stop_on_load_failures = False  # wait_ready ends the run when the engine failed to load twice

    def __init__(self, a, res):
        self.a = a
        self.res = res
        self.ready_seen_at = None  # when wait_ready saw its READY line

    def save(self):
        with open(self.a.out, "w") as f:
            json.dump(self.res, f, indent=1)

    def ctl(self, *args):
        return ctl(self.a.socket, *args)

    def status(self):
        return json.loads(self.ctl("status", "--json"))

    def text(self):
        return read_log(self.a.log)

    def readies(self):
        return readies(self.text())

    def alive(self):
        if self.a.pid is None:
            return
        try:
            os.kill(self.a.pid, 0)
        except ProcessLookupError:
            tail = self.text()[-self.log_tail_chars:]
            raise RuntimeError(f"fastrestartd (pid {self.a.pid}) exited; its log ends: {tail!r}") from None

    def wait_ready(self, n, timeout):
        """Until READY #n (then fastrestartd's status); with stop_on_load_failures, an engine that failed to
        load twice meanwhile ends the run at once (fastrestartd would go on restarting it until the run's
        limit), naming the failure."""
        deadline = time.monotonic() + timeout
        failed0 = self.text().count("load failed:") if self.stop_on_load_failures else 0
        while time.monotonic() < deadline:
            text = self.text()
            if readies(text) >= n:
                self.ready_seen_at = time.monotonic()
                return self.status()
            if self.stop_on_load_failures and text.count("load failed:") >= failed0 + 2:
                last = [line for line in text.splitlines() if "load failed:" in line][-1]
                raise RuntimeError(f"the engine failed to load twice before READY #{n}; the last: {last.strip()}")
            self.alive()
            time.sleep(0.01)
        raise RuntimeError(f"no READY #{n} within {timeout} s")

    def http(self, path, body=None):
        url = f"http://127.0.0.1:{self.a.port}{path}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data, {"Content-Type": "application/json"} if data else {})
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.load(r)

    def kill_and_wait(self, pid, k, engine_pid=None):
        """kill -9 PID (the kill clock: KillClock; ENGINE_PID: the engine, when PID is one of its workers), wait
        for the next READY, and with --clients the first answered request after the kill; the kill clock's
        record into k. Returns fastrestartd's status at that READY."""
        prober = None
        if getattr(self.a, "clients", 0):
            prober = Prober(self.a.port, completion_body(self.a.model, getattr(self.a, "client_tokens", 1)),
                            clients=self.a.clients, stream=getattr(self.a, "stream", False)).start()
            prober.wait_answered_since(time.monotonic(), 60)  # the engine answers before the kill
        n = self.readies()
        c = KillClock(pid, engine_pid).kill()
        try:
            st = self.wait_ready(n + 1, self.a.ready_timeout)
            c.ready(st, self.ready_seen_at)
            if prober is not None and not prober.wait_answered_since(c.t_kill, self.a.ready_timeout):
                k["answer_error"] = f"no request answered within {self.a.ready_timeout} s of the READY"
        finally:
            if prober is not None:
                c.answers(prober.finish())
            k.update(c.record())
        return st

    def cycles(self, items, one):
        """one(item, k) for each item, k = {"i": its number} appended to res["kills"] and saved after each;
        the first exception is recorded in k and res["errors"] and ends the loop. Then summarize() and save;
        0 when no error was recorded, else 1."""
        for i, item in enumerate(items):
            k = {"i": i + 1}
            try:
                one(item, k)
            except Exception as e:  # keep what was measured; the summary shows the error
                k["error"] = f"{type(e).__name__}: {e}"
                self.res["errors"].append(k["error"])
                log(f"{self.label} kill #{i + 1}: {k['error']}")
                self.res["kills"].append(k)
                self.save()
                break
            self.res["kills"].append(k)
            self.save()
        self.summarize()
        self.save()
        return 0 if not self.res["errors"] else 1

    def main(self):
        """run(); an exception is recorded in res["errors"] with the summary of what was measured (exit 1)."""
        try:
            return self.run()
        except Exception as e:
            self.res["errors"].append(f"{type(e).__name__}: {e}")
            self.summarize()
            self.save()
            log(f"{self.label}: {type(e).__name__}: {e}")
            return 1


def restart_summary(ks):
    """The summary of the kills ks: n, the paths, and per kill-clock figure its n, median, max and min
    (kill_clock_summary)."""
    s = {"n": len(ks), "paths": sorted({str(k.get("path")) for k in ks})}
    s.update(kill_clock_summary(ks))
    return s


def add_clock_args(ap):
    """--clients: the kill clock's client (Prober) threads, 0 for none; --stream: their requests streamed;
    --client-tokens: the tokens each of their requests asks for."""
    ap.add_argument("--clients", type=int, default=1,
                    help="clients sending requests across each kill (kill -> first answered request); 0: none")
    ap.add_argument("--stream", action="store_true",
                    help='the clients send "stream": true (kill -> first byte: their first SSE event)')
    ap.add_argument("--client-tokens", type=int, default=1,
                    help="max_tokens of each client request (fastrestartd's readiness request asks for 1)")


def main(argv):
    """The launcher and the kill clock for shell benches (bench/lib.sh, bench/gpu_snapshot.sh, ...):
      fastrestartd_run.py exec CONFIG LOG [ARGS...]
                                               becomes fastrestartd --config CONFIG [ARGS...], its output in
                                               LOG (run it with & : $! is fastrestartd's pid)
      fastrestartd_run.py kill PID             kill -9 PID; prints the kill's time.monotonic() and time.time()
      fastrestartd_run.py clock T_KILL PID     reads fastrestartd's status --json (stdin) at the READY after
                                               that kill; prints KillClock's record as JSON"""
    if len(argv) >= 4 and argv[1] == "exec":
        exec_fastrestartd(argv[2], argv[3], argv[4:])
    if len(argv) == 3 and argv[1] == "kill":
        c = KillClock(int(argv[2])).kill()
        print(c.rec["kill_monotonic_s"], c.rec["kill_unix_s"])
        return 0
    if len(argv) == 4 and argv[1] == "clock":
        c = KillClock(int(argv[3]))
        c.t_kill = float(argv[2])
        c.rec["kill_monotonic_s"] = c.t_kill
        print(json.dumps(c.ready(json.load(sys.stdin))))
        return 0
    print(main.__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
