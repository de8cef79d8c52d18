"""What the benchmark drivers of a running fastrestartd share (bench/standby_cycles.py, bench/tp_cycles.py;
bench/e2e_restart.py uses ctl() and readies(); bench/socket_restart.py log() and the reference engine's
weights key): its control socket (fastrestartctl), its log's READY lines, its engine's HTTP API,
nvidia-smi, and the loop of kill -9 cycles that saves the results after every cycle, so that a run cut
short by its timeout keeps what it measured.

The drivers import it from their own folder (python3 puts a script's folder first on sys.path).
"""
import json
import os
import signal
import statistics
import subprocess
import time
import urllib.request

PROMPT = "The capital of France is"  # the oracle prompt

# The [weights.key] of the PyTorch reference engine at TP=1 (docs/refengine.md; bench/gpu_standby.sh writes
# the same in bash): the key under which it publishes and attaches its weights.
REFENGINE_WEIGHTS_KEY = """[weights.key]
arch = "LlamaForCausalLM"
dtype = "BF16"
engine = "fastrestart-refengine 0.1.0"
tp_size = "1"
tp_rank = "0"
"""


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def ctl(socket, *args, timeout=60):
    """fastrestartctl --socket SOCKET ARGS...: its stdout; a RuntimeError naming the command when it fails."""
    r = subprocess.run(["fastrestartctl", "--socket", socket, *args], capture_output=True, text=True,
                       timeout=timeout)
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


def add_daemon_args(ap):
    """The options naming the running fastrestartd and its engine."""
    ap.add_argument("--socket", required=True)
    ap.add_argument("--log", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)


class Driver:
    """One run against a running fastrestartd: `res` (with "kills" and "errors") is written to --out.

    A subclass sets `label` (the prefix of its log lines) and defines run() and summarize()."""

    log_tail_chars = 600  # of fastrestartd's log, quoted when it exits during the run
    stop_on_load_failures = False  # wait_ready ends the run when the engine failed to load twice

    def __init__(self, a, res):
        self.a = a
        self.res = res

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

    def kill_and_wait(self, pid, k):
        """kill -9 PID, wait for the next READY; into k: kill_to_ready_seen_s and last_start's path,
        death_to_ready_s and exec_to_ready_s. Returns fastrestartd's status at that READY."""
        n = self.readies()
        t = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        st = self.wait_ready(n + 1, self.a.ready_timeout)
        k["kill_to_ready_seen_s"] = round(time.monotonic() - t, 4)
        ls = st.get("last_start") or {}
        k.update(path=ls.get("path"), death_to_ready_s=ls.get("since_previous_exit_s"),
                 exec_to_ready_s=ls.get("time_to_ready_s"))
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


def death_to_ready_summary(ks):
    """The summary's n, paths and death to READY median_s, max_s, min_s over the kills ks."""
    d = [k["death_to_ready_s"] for k in ks if k.get("death_to_ready_s") is not None]
    s = {"n": len(ks), "paths": sorted({str(k.get("path")) for k in ks})}
    if d:
        s.update(median_s=round(statistics.median(d), 4), max_s=round(max(d), 4), min_s=round(min(d), 4))
    return s
