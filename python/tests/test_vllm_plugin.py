"""The vLLM loader plugin (fastrestart_vllm) against a real fastrestart-weightd, through the vLLM
reproduction in fake_vllm/ (NOT vLLM: see fake_vllm/vllm/__init__.py for what it mirrors and why).

Each engine start is a real process (fake_vllm/serve.py, `vllm serve` reduced to loading the model and one
forward pass) that finds the plugin through its installed entry point: setUpClass pip-installs python/
(pyproject.toml) into a temporary directory, as a user would.

CI: numpy tensors, host backend. GPU (python/tests/gpu_vllm_plugin.sh): FR_TEST_DEVICE=cuda, torch tensors,
the CUDA backend.

    cd python/tests && PYTHONPATH=<build>/python FR_WEIGHTD_BIN=<build>/src/daemon/fastrestart-weightd \
        /usr/bin/python3 -m unittest -v test_vllm_plugin          (ctest: python_vllm_plugin)
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.dirname(HERE)
FAKE = os.path.join(HERE, "fake_vllm")
sys.path.insert(0, FAKE)

import backend  # noqa: E402
from fastrestart_vllm import cache_key, options, result_line  # noqa: E402
from weightd_support import (NO_GATE, Weightd, read_gate_message, read_text, spawn_engine, stop_processes,  # noqa: E402
                             write_safetensors)

WEIGHTD = os.environ.get("FR_WEIGHTD_BIN", "")
DEVICE = os.environ.get("FR_TEST_DEVICE", "cpu")  # cpu (host backend) or cuda (GPU 0, CUDA backend)
HIDDEN, VOCAB, LAYERS = 16, 32, 2


def make_model(folder, seed=1):
    """A TinyForCausalLM checkpoint: config.json, two shards and their index."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"architectures": ["TinyForCausalLM"], "hidden_size": HIDDEN, "vocab_size": VOCAB,
                   "num_layers": LAYERS, "max_position": 8, "tie_word_embeddings": True}, f)
    rng = np.random.default_rng(seed)
    t = {"model.embed_tokens.weight": rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32),
         "model.norm.weight": rng.standard_normal(HIDDEN).astype(np.float32)}
    for i in range(LAYERS):
        for part in ("gate_proj", "up_proj", "down_proj"):
            t["model.layers.%d.mlp.%s.weight" % (i, part)] = (rng.standard_normal((HIDDEN, HIDDEN)) * 0.3).astype(np.float32)
        t["model.layers.%d.mlp.gate.e_score_correction_bias" % i] = rng.standard_normal(HIDDEN).astype(np.float32)
    names = sorted(t)
    shards = {"model-00001-of-00002.safetensors": names[:4], "model-00002-of-00002.safetensors": names[4:]}
    weight_map = {}
    for shard, keys in shards.items():
        write_safetensors(os.path.join(folder, shard), {k: t[k] for k in keys})
        weight_map.update({k: shard for k in keys})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": weight_map}, f)
    return [os.path.join(folder, s) for s in sorted(shards)]


class Start:
    """One engine start: exit code, the JSON summary, stderr, and the parsed result line (or None)."""

    def __init__(self, proc):
        self.rc, self.err = proc.returncode, proc.stderr
        self.out = json.loads(proc.stdout) if proc.returncode == 0 and proc.stdout.strip() else None
        lines = [result_line.parse_line(x) for x in proc.stderr.splitlines()]
        lines = [x for x in lines if x is not None]
        self.line = lines[0] if len(lines) == 1 else None
        self.lines = lines


@unittest.skipUnless(WEIGHTD and os.access(WEIGHTD, os.X_OK), "FR_WEIGHTD_BIN is not set to fastrestart-weightd")
class PluginTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.site = tempfile.mkdtemp(prefix="fr-vllm-site-")
        src = os.path.join(cls.site, "src")
        os.makedirs(src)
        shutil.copy(os.path.join(PYTHON_DIR, "pyproject.toml"), src)
        shutil.copytree(os.path.join(PYTHON_DIR, "fastrestart_vllm"), os.path.join(src, "fastrestart_vllm"))
        lib = os.path.join(cls.site, "lib")
        try:
            import setuptools  # noqa: F401 -- pip builds the wheel with it (no build isolation: no network)
        except ImportError:
            # A Python without setuptools (seen on GPU machines): lay out what pip would install, from the
            # same pyproject.toml, so the entry point is still what vLLM discovers.
            cls.install_by_hand(src, lib)
            return
        pip = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                              "--no-index", "--disable-pip-version-check", "--target", lib, src],
                             capture_output=True, text=True)
        if pip.returncode != 0:
            raise RuntimeError("pip install of python/ failed:\n" + pip.stdout + pip.stderr)

    @staticmethod
    def install_by_hand(src, lib):
        shutil.copytree(os.path.join(src, "fastrestart_vllm"), os.path.join(lib, "fastrestart_vllm"))
        # the .dist-info the deb/rpm install, from the same pyproject.toml (python/dist_info.py)
        subprocess.run([sys.executable, os.path.join(PYTHON_DIR, "dist_info.py"), os.path.join(src, "pyproject.toml"), lib],
                       check=True, capture_output=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.site, ignore_errors=True)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fr-vllm-")
        self.run_dir = os.path.join(self.tmp, "run")
        self.model = os.path.join(self.tmp, "model")
        self.shards = make_model(self.model)
        self.daemon = None

    def tearDown(self):
        self.stop_daemon()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # ---- helpers ----

    def start_daemon(self):
        backend = "cuda" if DEVICE == "cuda" else "host"
        self.daemon = Weightd(WEIGHTD, self.run_dir, os.path.join(self.tmp, "weightd.log"), backend).start(self)

    def stop_daemon(self):
        if self.daemon is not None:
            self.daemon.stop()
            self.daemon = None

    def serve(self, *args, extra=None, env=None, fmt="fastrestart", model=None):
        cfg = {"socket_dir": self.run_dir, "connect_timeout_s": 0.5}
        cfg.update(extra or {})
        argv = [sys.executable, os.path.join(FAKE, "serve.py"), model or self.model, "--device", DEVICE,
                "--load-format", fmt, "--model-loader-extra-config", json.dumps(cfg)] + list(args)
        e = dict(os.environ)
        e["PYTHONPATH"] = os.pathsep.join([os.path.join(self.site, "lib"), e.get("PYTHONPATH", "")])
        e.update(env or {})
        return Start(subprocess.run(argv, capture_output=True, text=True, env=e, timeout=300))

    def assert_started(self, s, result, publish=None):
        self.assertEqual(s.rc, 0, s.err)
        self.assertIsNotNone(s.line, "want exactly one result line:\n" + s.err)
        self.assertEqual(s.line["result"], result, s.err)
        if publish is not None:
            self.assertEqual(s.line["publish"], publish, s.err)
        return s

    # ---- warm and cold ----

    def test_cold_publishes_then_next_start_attaches_the_same_weights(self):
        self.start_daemon()
        cold = self.assert_started(self.serve("--quantization", "toy"), "miss", "ok")
        self.assertEqual(cold.line["reason"], "no entries")
        self.assertRegex(cold.line["key"], "^[0-9a-f]{16}$")
        self.assertEqual(cold.out["checkpoint_reads"], 2)

        warm = self.assert_started(self.serve("--quantization", "toy"), "hit", "-")
        self.assertEqual(warm.line["key"], cold.line["key"])
        self.assertEqual(warm.line["tensors"], cold.line["tensors"])
        self.assertEqual(warm.out["checkpoint_reads"], 0)          # nothing read from disk
        self.assertEqual(warm.out["logits"], cold.out["logits"])    # bit-identical results
        self.assertEqual(warm.out["scale_float"], cold.out["scale_float"])  # Python-side state rebuilt
        self.assertTrue(warm.out["tied"])                           # lm_head is the embedding, still
        self.assertEqual(cold.line["adopt"], "ok", cold.err)          # the first life serves the daemon's copy
        self.assertNotEqual(cold.line["adopt_ms"], "-")
        self.assertEqual(warm.line["adopt"], "-")
        if backend.NAME == "numpy":
            self.assertFalse(warm.out["embed_writeable"])           # zero_copy: the read-only mapping
            self.assertFalse(cold.out["embed_writeable"])           # adopted after the publish: the same mapping
        for f in ("device", "tp", "pp", "dp", "mode", "attach_ms", "total_ms"):
            self.assertNotEqual(warm.line[f], "-", f)
        self.assertEqual(warm.line["tp"], "0/1")

    def test_a_hit_rebinds_references_held_by_value_and_sets_what_load_weights_set(self):
        """Each layer's Router holds its bias by value (as DeepSeek's MoE router does): binding replaces the
        parameter, so without the rebind sweep the router keeps the meta placeholder and the first forward
        pass after `result=hit` crashes. load_weights() set has_own_embed_tokens on the cold model (an EAGLE
        draft's ownership flag); a hit never runs load_weights, so the entry must carry it."""
        self.start_daemon()
        cold = self.assert_started(self.serve(), "miss", "ok")
        self.assertTrue(cold.out["has_own_embed_tokens"])
        self.assertFalse(cold.out["has_own_lm_head"])  # tied: the checkpoint has no lm_head.weight
        warm = self.assert_started(self.serve(), "hit")
        self.assertEqual(warm.out["logits"], cold.out["logits"])
        self.assertTrue(warm.out["has_own_embed_tokens"], "the attribute load_weights set was not restored")
        self.assertFalse(warm.out["has_own_lm_head"])

    def test_copy_mode_hit_owns_its_weights(self):
        self.start_daemon()
        self.assert_started(self.serve(), "miss", "ok")
        warm = self.assert_started(self.serve(extra={"mode": "copy"}), "hit")
        self.assertEqual(warm.line["mode"], "copy")
        if backend.NAME == "numpy":
            self.assertTrue(warm.out["embed_writeable"])

    def test_in_place_weight_update_is_refused_after_a_zero_copy_hit(self):
        self.start_daemon()
        # copy mode: the cold start keeps its own memory (no adoption), so an update is allowed
        cold = self.assert_started(self.serve("--reload-weights", extra={"mode": "copy"}), "miss", "ok")
        self.assertEqual(cold.line["adopt"], "-")
        if backend.NAME == "numpy":
            self.assertTrue(cold.out["embed_writeable"])
        s = self.serve("--reload-weights")
        self.assertEqual(s.rc, 1)
        self.assertEqual(s.line["result"], "hit")
        self.assertIn("read-only memory (mode zero_copy)", s.err)
        warm = self.assert_started(self.serve("--reload-weights", extra={"mode": "copy"}), "hit")
        self.assertEqual(warm.out["logits"], cold.out["logits"])

    def test_a_zero_copy_cold_start_adopts_the_copy_it_published_and_refuses_an_update(self):
        """One copy of the weights from the first life: after its publish the cold start binds the daemon's
        copy in place of its own (read-only from then on, as after a hit), answering the same."""
        self.start_daemon()
        adopted = self.assert_started(self.serve(), "miss", "ok")
        self.assertEqual(adopted.line["adopt"], "ok", adopted.err)
        own = self.assert_started(self.serve(extra={"mode": "copy"}), "hit")  # the daemon's bytes, copied
        self.assertEqual(adopted.out["logits"], own.out["logits"])
        if backend.NAME == "numpy":
            self.assertFalse(adopted.out["embed_writeable"])
            self.assertTrue(own.out["embed_writeable"])
        self.stop_daemon()
        shutil.rmtree(self.run_dir)
        self.start_daemon()  # a new daemon: the next cold start misses again, and its update is refused
        s = self.serve("--reload-weights")
        self.assertEqual(s.rc, 1, s.err)
        self.assertEqual((s.line["result"], s.line["publish"], s.line["adopt"]), ("miss", "ok", "ok"), s.err)
        self.assertIn("read-only memory (mode zero_copy)", s.err)

    def test_verify_hit(self):
        self.start_daemon()
        cold = self.assert_started(self.serve(), "miss", "ok")
        warm = self.assert_started(self.serve(extra={"verify": True}), "hit")
        self.assertEqual(warm.out["logits"], cold.out["logits"])

    # ---- misses and their reasons ----

    def test_no_daemon_falls_back_to_disk_with_the_reason(self):
        s = self.assert_started(self.serve(extra={"connect_timeout_s": 0.2}), "fallback", "skipped")
        self.assertIn(self.run_dir, s.line["reason"])
        self.assertEqual(s.line["key"], "-")
        self.assertEqual(s.out["checkpoint_reads"], 2)

    def test_changed_settings_or_files_are_misses_naming_the_field(self):
        self.start_daemon()
        self.assert_started(self.serve(), "miss", "ok")
        s = self.assert_started(self.serve("--dtype", "float64"), "miss", "ok")
        self.assertIn("config.dtype", s.line["reason"])
        s = self.assert_started(self.serve("--tensor-parallel-size", "2", "--tp-rank", "1"), "miss")
        self.assertIn("config.tp_rank", s.line["reason"])
        s = self.assert_started(self.serve("--quantization", "toy"), "miss")
        self.assertIn("config.quantization", s.line["reason"])
        # A shard rewritten in place (same bytes, same layout: vLLM's header fingerprint would still match).
        with open(self.shards[1], "rb") as f:
            data = f.read()
        time.sleep(0.01)
        with open(self.shards[1], "wb") as f:
            f.write(data)
        s = self.assert_started(self.serve(), "miss")
        self.assertRegex(s.line["reason"], r"files\[\d+\]\.(ctime_ns|mtime_ns)")

    def test_fallback_off_fails_loudly_with_the_reason(self):
        s = self.serve(extra={"fallback": False, "connect_timeout_s": 0.2})
        self.assertEqual(s.rc, 1)
        self.assertEqual(s.line["result"], "fail", s.err)
        self.assertIn("fallback is off", s.line["reason"])
        self.assertIn(self.run_dir, s.line["reason"])
        self.assertIn("fallback is off", s.err.splitlines()[-1])   # the exception the engine dies with
        self.start_daemon()
        s = self.serve(extra={"fallback": False})
        self.assertEqual(s.rc, 1)
        self.assertEqual((s.line["result"], s.line["reason"]), ("fail", "fallback is off: no entries"))

    def test_a_file_replaced_during_the_cold_load_is_not_published(self):
        self.start_daemon()
        first = os.path.basename(sorted(self.shards)[0])
        s = self.assert_started(self.serve(env={"FAKE_VLLM_REPLACE_AFTER_READ": first}), "miss", "failed")
        self.assertIn(first, s.line["reason"])
        self.assertIn("ino differs", s.line["reason"])
        # Nothing stale was stored: the next start misses, loads the files as they are and publishes them.
        again = self.assert_started(self.serve(), "miss", "ok")
        self.assertEqual(again.line["reason"], "no entries")
        self.assert_started(self.serve(), "hit", "-")

    def test_a_checkpoint_symlink_retargeted_during_the_cold_load_is_not_published(self):
        # `current -> model` is rolled to `current -> next` after vLLM read the first shard: it reads the
        # other shard from the next version, so the old version's identities must not get these bytes.
        self.start_daemon()
        nxt = os.path.join(self.tmp, "next")
        make_model(nxt, seed=2)
        current = os.path.join(self.tmp, "current")
        os.symlink(self.model, current)
        first = os.path.basename(sorted(self.shards)[0])
        s = self.assert_started(self.serve(model=current, env={"FAKE_VLLM_RETARGET_AFTER_READ": "%s:%s:%s" % (first, current, nxt)}),
                                "miss", "skipped")
        self.assertIn("retargeted", s.line["reason"])
        # Nothing was stored under the first version: a start on its own files misses, loads, publishes.
        again = self.assert_started(self.serve(), "miss", "ok")
        self.assertEqual(again.line["reason"], "no entries")

    def test_socket_dir_defaults_to_fastrestart_socket_dir(self):
        self.start_daemon()
        self.assert_started(self.serve(extra={"socket_dir": None}, env={"FASTRESTART_SOCKET_DIR": self.run_dir}),
                            "miss", "ok")

    def test_method_without_pre_processed_support_is_loaded_but_not_published(self):
        self.start_daemon()
        s = self.assert_started(self.serve("--quantization", "toy_nopre"), "miss", "skipped")
        self.assertIn("supports_pre_processed_weights", s.line["reason"])
        s = self.assert_started(self.serve("--quantization", "toy_nopre"), "miss", "skipped")
        self.assertTrue(s.line["reason"].startswith("no entries"), s.line["reason"])

    def test_an_entry_that_does_not_fit_falls_back_to_disk(self):
        """An entry under the plugin's exact key that this plugin did not publish: the warm path fails,
        the engine loads from disk, and the line says why."""
        self.start_daemon()
        import fastrestart
        from vllm.config import CacheConfig, HfConfig, ModelConfig, ParallelConfig
        import types
        mc = ModelConfig(model=self.model, dtype=backend.dtype("float32"), hf_config=HfConfig.from_model(self.model))
        vc = types.SimpleNamespace(parallel_config=ParallelConfig(), cache_config=CacheConfig())
        import vllm
        ranks = dict(tp_size=1, tp_rank=0, pp_size=1, pp_rank=0, dp_size=1, dp_rank=0)
        config = cache_key.key_config(vc, mc, ranks, "", vllm.__version__)
        files = cache_key.checkpoint_files(mc, None)
        if DEVICE == "cuda":
            import torch
            tensors, device = {"w": torch.ones(4, device="cuda:0")}, "cuda:0"
        else:
            tensors, device = {"w": np.ones(4, np.float32)}, "host"
        fastrestart.publish(fastrestart.identify(files, config), tensors, socket_dir=self.run_dir, device=device)
        s = self.assert_started(self.serve(), "fallback", "skipped")
        self.assertIn("warm path failed: BindError", s.line["reason"])
        self.assertEqual(s.out["checkpoint_reads"], 2)

    # ---- configuration ----

    def test_bad_extra_config_is_rejected_naming_the_key(self):
        for extra, want in (({"fallbak": False}, "'fallbak'"),
                            ({"mode": "fast"}, "model_loader_extra_config.mode"),
                            ({"connect_timeout_s": "5"}, "model_loader_extra_config.connect_timeout_s"),
                            ({"verify": 1}, "model_loader_extra_config.verify"),
                            ({"socket_dir": "relative/run"}, "model_loader_extra_config.socket_dir")):
            s = self.serve(extra=extra)
            self.assertEqual(s.rc, 1, extra)
            self.assertIn(want, s.err, extra)
            self.assertEqual(s.lines, [], "nothing was loaded, so no result line")

    def test_plugin_comes_from_the_entry_point(self):
        s = self.serve(env={"VLLM_PLUGINS": "some_other_plugin"})
        self.assertEqual(s.rc, 1)
        self.assertIn("Load format `fastrestart` is not supported", s.err)
        self.assert_started(self.serve(env={"VLLM_PLUGINS": "fastrestart"}, extra={"connect_timeout_s": 0.1}),
                            "fallback")



class InstalledPluginCase(unittest.TestCase):
    """The plugin installed through its entry point, as PluginTest does it, for the test cases below; and for
    each test a model in a temporary directory of its own (self.tmp, named after tmp_prefix)."""

    tmp_prefix = "fr-vllm-"
    setUpClass = classmethod(PluginTest.setUpClass.__func__)
    tearDownClass = classmethod(PluginTest.tearDownClass.__func__)
    install_by_hand = staticmethod(PluginTest.install_by_hand)

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix=self.tmp_prefix)
        self.model = os.path.join(self.tmp, "model")
        make_model(self.model)


@unittest.skipIf(bool(NO_GATE), NO_GATE)
class StandbyTest(InstalledPluginCase):
    """docs/vllm.md "Standby engines": with vLLM's process structure (serve.py --processes: API server,
    engine core, worker, each loading the plugins), the first process parks in register(), before the
    engine core (and so any CUDA) exists; the processes started after the release pass their gate."""

    tmp_prefix = "fr-vllm-sb-"

    def tearDown(self):
        if getattr(self, "proc", None) is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_standby(self, level="pre_gpu"):
        import socket
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ, FASTRESTART_STANDBY_FD=str(theirs.fileno()), FASTRESTART_STANDBY_LEVEL=level)
        env["PYTHONPATH"] = os.pathsep.join([os.path.join(self.site, "lib"), env.get("PYTHONPATH", "")])
        self.err = os.path.join(self.tmp, "stderr.log")
        with open(self.err, "wb") as err:
            p = subprocess.Popen([sys.executable, os.path.join(FAKE, "serve.py"), self.model, "--device", DEVICE,
                                  "--load-format", "auto", "--processes"], stdout=subprocess.PIPE, stderr=err,
                                 env=env, pass_fds=(theirs.fileno(),))
        theirs.close()
        ours.settimeout(120)
        self.proc = p
        return p, ours

    def stderr(self):
        return read_text(self.err)

    def parked(self, sock):
        return read_gate_message(self, sock, lambda: "no parked message:\n" + self.stderr())

    def test_the_first_process_parks_before_the_engine_core_starts(self):
        p, sock = self.start_standby()
        with sock:
            self.assertEqual(self.parked(sock), {"op": "parked", "v": 1, "level": "pre_gpu", "pid": p.pid})
            err = self.stderr()
            self.assertIn("fastrestart-standby: parked at pre_gpu (pid %d)" % p.pid, err)
            self.assertNotIn("role=", err)               # still loading its plugins: no engine core yet,
            self.assertNotIn("init_device", err)         # so no process that could touch CUDA
            sock.sendall(b'{"op":"release"}\n')
            out, _ = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, self.stderr())
        err = self.stderr()
        self.assertEqual(err.count("fastrestart-standby: parked at pre_gpu"), 1, err)
        self.assertEqual(err.count("fastrestart-standby: released at pre_gpu"), 1, err)
        # the release removed the variables; the processes started after it passed their gate at once
        self.assertIn("role=api_server pid=%d standby_fd=-" % p.pid, err)
        self.assertRegex(err, r"role=engine_core pid=\d+ standby_fd=-")
        self.assertRegex(err, r"role=worker pid=\d+ standby_fd=-")
        self.assertLess(err.index("released at pre_gpu"), err.index("init_device"))
        self.assertTrue(json.loads(out)["logits"])      # the worker loaded the model and ran it

    def test_exit_while_parked_ends_the_engine_with_status_0_before_anything_starts(self):
        p, sock = self.start_standby()
        with sock:
            self.parked(sock)
            sock.sendall(b'{"op":"exit"}\n')
            p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0)
        self.assertNotIn("role=engine_core", self.stderr())

    def test_a_warmed_standby_without_a_kv_arena_is_refused_instead_of_serving(self):
        p, sock = self.start_standby("warmed")
        with sock:
            p.communicate(timeout=60)
            sock.settimeout(5)
            self.assertEqual(sock.recv(4096), b"")       # it never parked
        self.assertNotEqual(p.returncode, 0)
        err = self.stderr()
        self.assertIn("FASTRESTART_STANDBY_LEVEL=warmed needs the KV cache in an arena", err)
        self.assertNotIn("role=engine_core", err)


# A process that leases the KV arena (the live engine's part), says so, and holds it until killed.
ARENA_HOLDER = """
import sys, fastrestart
a = fastrestart.reserve_arena(sys.argv[2], int(sys.argv[3]), wait_s=30, socket_dir=sys.argv[1], device=sys.argv[4])
a.swap_in()
print("held", flush=True)
sys.stdin.readline()
"""


@unittest.skipIf(bool(NO_GATE), NO_GATE)
@unittest.skipUnless(WEIGHTD and os.access(WEIGHTD, os.X_OK), "FR_WEIGHTD_BIN is not set to fastrestart-weightd")
class WarmedArenaTest(InstalledPluginCase):
    """docs/vllm.md "A warmed standby over the KV arena": with vLLM's process structure (an API server, an
    engine core started as spawn starts it, the worker in the engine core as vLLM's uniproc executor puts it)
    and a real fastrestart-weightd (host backend with numpy; CUDA backend and torch on cuda:0 with
    FR_TEST_DEVICE=cuda), a warmed standby started through the launcher with
    --kv-arena parks in the engine core after its KV cache (over the arena's placeholder) and its graph
    capture, leases the arena once released, and its captured graph writes the arena."""

    tmp_prefix = "fr-vllm-warm-"
    ARENA = "kv"

    def setUp(self):
        super().setUp()
        self.procs = []
        self.run_dir = os.path.join(self.tmp, "run")
        self.arena_device = "cuda:0" if DEVICE == "cuda" else "host"
        self.daemon = Weightd(WEIGHTD, self.run_dir, os.path.join(self.tmp, "weightd.log"),
                              "cuda" if DEVICE == "cuda" else "host").start(self)

    def tearDown(self):
        stop_processes(self.procs)
        self.daemon.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def env(self, **extra):
        e = dict(os.environ, FASTRESTART_SOCKET_DIR=self.run_dir, **extra)
        e["PYTHONPATH"] = os.pathsep.join([os.path.join(self.site, "lib"), e.get("PYTHONPATH", "")])
        e.pop("FASTRESTART_STANDBY_FD", None)
        return e

    def engine(self, level=None, *more, env=None, arena=None):
        """The launcher over the reproduction with --kv-arena `arena` (self.ARENA); a standby of `level` with one
        end of a socket pair (returned, else None: weightd_support.spawn_engine). Its stderr goes to self.log."""
        env = env if env is not None else self.env()
        arena = arena or self.ARENA

        def launch(err, fds):
            return subprocess.Popen([sys.executable, os.path.join(FAKE, "launch.py"), "serve", self.model, "--device",
                                     DEVICE, "--load-format", "auto", "--processes", "--distributed-executor-backend",
                                     "uni", "--kv-arena", arena] + list(more),
                                    stdout=subprocess.PIPE, stderr=err, env=env, pass_fds=fds, text=True)
        return spawn_engine(self, env, level, launch)

    def stderr(self):
        return read_text(self.log)

    def parked_then(self, op, env=None):
        """A `warmed` standby: parked, sent `op` ("release", "exit") through its gate, run to its end.
        Returns (the process, its stdout, its stderr)."""
        p, sock = self.engine("warmed", env=env)
        with sock:
            read_gate_message(self, sock, lambda: "no parked message:\n" + self.stderr())
            sock.sendall(b'{"op":"%s"}\n' % op.encode())
            out, _ = p.communicate(timeout=60)
        return p, out, self.stderr()

    def holder(self, nbytes):
        """The live engine's part: a process holding the arena's lease until it is killed."""
        h = subprocess.Popen([sys.executable, "-c", ARENA_HOLDER, self.run_dir, self.ARENA, str(nbytes),
                              self.arena_device],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.procs.append(h)
        self.assertEqual(h.stdout.readline().strip(), "held")
        return h

    def arena_bytes(self, nbytes):
        """The arena's bytes as the next holder finds them (leased here, after every engine exited)."""
        import fastrestart
        a = fastrestart.lease_arena(self.ARENA, nbytes, wait_s=10, socket_dir=self.run_dir, device=self.arena_device)
        if DEVICE == "cuda":
            import torch
            return torch.from_dlpack(a.view(0, (nbytes,), "uint8")).cpu().numpy().tobytes()
        return bytes(a.view(0, (nbytes,), "uint8").numpy())

    def parked_over_a_held_arena_then_released(self, env=None):
        """The live engine (a holder) holds the arena, twice this engine's own budget (64 KiB); a warmed standby
        parks, the holder dies, the standby is released and serves. Checks what holds for either runner: the
        engine core parks after the profile, the KV cache sized from the arena and reserved over the
        placeholder, and the graph capture, with nothing leased; released, it leases and the KV cache IS the
        arena. Returns (stdout, stderr)."""
        import fastrestart
        import hashlib
        h = self.holder(128 << 10)
        p, sock = self.engine("warmed", env=env)
        with sock:
            parked = read_gate_message(self, sock, lambda: "no parked message:\n" + self.stderr())
            err = self.stderr()
            self.assertEqual(parked["level"], "warmed")
            # the engine core parks (a process the API server spawned), not the API server
            core = re.search(r"role=engine_core pid=(\d+) standby_fd=-", err)
            self.assertIsNotNone(core, err)
            self.assertEqual(parked["pid"], int(core.group(1)))
            self.assertNotEqual(parked["pid"], p.pid)
            # vLLM's order before the gate: profile, KV cache (over the placeholder), graph capture
            for a, b in (("step=profile", "sized from the daemon's arena (131072 bytes"),
                         ("sized from the daemon's arena", "step=kv_cache"), ("step=kv_cache", "bytes reserved at"),
                         ("bytes reserved at", "step=graph_capture"), ("step=graph_capture", "parked at warmed")):
                self.assertLess(err.index(a), err.index(b), err)
            self.assertNotIn("leased", err)                   # nothing leased while parked
            self.assertNotIn("post_kv_cache_wake_up", err)
            # What the API server passed on to the engine core it spawned: the relay, not the descriptor's
            # number, and a wait for the engine core that outlasts the park
            with open("/proc/%d/environ" % parked["pid"], "rb") as f:
                environ = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            self.assertNotIn(b"FASTRESTART_STANDBY_FD", environ)
            self.assertIn(b"FASTRESTART_STANDBY_RELAY", environ)
            self.assertEqual(environ[b"VLLM_ENGINE_READY_TIMEOUT_S"], str(30 * 86400).encode())
            held = fastrestart.find_arena(self.ARENA, socket_dir=self.run_dir, device=self.arena_device)
            self.assertEqual(held["holder_pid"], h.pid)       # still the live engine's
            h.kill()                                          # the live engine dies...
            h.wait()
            sock.sendall(b'{"op":"release"}\n')              # ...and fastrestartd releases the standby
            out, _ = p.communicate(timeout=60)
        err = self.stderr()
        self.assertEqual(p.returncode, 0, err)
        self.assertRegex(err, r"kv arena 'kv': leased \(generation \d+\)")
        self.assertRegex(err, r"released at warmed after [\d.]+ s parked; KV cache: arena")
        self.assertRegex(out, r"fastrestart-arena: leased name=kv bytes=131072 ")
        # vLLM's post-wake hook, once, after the lease and before the first request
        self.assertEqual(err.count("step=post_kv_cache_wake_up"), 1, err)
        self.assertLess(err.index("leased (generation"), err.index("step=post_kv_cache_wake_up"))
        kv = parse_lines(out)["kv"]
        self.assertTrue(kv["nonzero"], kv)
        self.assertEqual(kv["bytes"], 128 << 10)
        # The KV cache IS the arena: what the graph captured over the placeholder wrote after the release is in
        # the arena, byte for byte (each layer's buffer at its offset; 2 x 64 KiB here, no padding).
        self.assertEqual(hashlib.sha256(self.arena_bytes(kv["bytes"])[:kv["bytes"]]).hexdigest(), kv["sha256"])
        return out, err

    def test_parks_after_its_graphs_in_the_engine_core_then_leases_the_arena_and_its_graph_writes_it(self):
        _, err = self.parked_over_a_held_arena_then_released()
        self.assertIn("step=post_kv_cache_wake_up role=engine_core pid=", err)
        self.assertIn("runner=V2", err)

    def test_on_the_v1_model_runner_too(self):
        # VLLM_USE_V2_MODEL_RUNNER=0: the V1 runner, whose _allocate_kv_cache_tensors is wrapped on the instance
        # (V2's attn_utils._allocate_kv_cache is never called, so only the V1 site can have put it in the arena)
        _, err = self.parked_over_a_held_arena_then_released(env=self.env(VLLM_USE_V2_MODEL_RUNNER="0"))
        self.assertIn("runner=V1", err)
        self.assertNotIn("runner=V2", err)

    def test_the_launcher_passes_the_arena_size_and_a_too_large_arena_ends_the_start_naming_it(self):
        # The daemon holds 128 KiB under 'kv': the launcher adds --kv-cache-memory-bytes 131072, which vLLM's
        # determine_available_memory returns as the engine's own budget (no memory profile).
        h = self.holder(128 << 10)
        p, _ = self.engine()
        h.kill()
        h.wait()
        out, _ = p.communicate(timeout=60)
        err = self.stderr()
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("fastrestart-vllm: kv arena 'kv': 131072 bytes on the daemon of host: "
                      "--kv-cache-memory-bytes 131072", err)
        self.assertIn("sized from the daemon's arena (131072 bytes; this engine's own budget: 131072)", err)
        self.assertEqual(parse_lines(out)["kv"]["bytes"], 128 << 10)
        # A device whose share (total x --gpu-memory-utilization 0.9: 90000 bytes) is smaller than the arena:
        # one line naming the arena and its size, before any KV cache, and no fallback to an own one.
        p, _ = self.engine(None, env=self.env(FAKE_VLLM_DEVICE_MEMORY="100000"))
        out, _ = p.communicate(timeout=60)
        err = self.stderr()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("ArenaTooLarge: fastrestart: kv arena 'kv' on the daemon of host holds 131072 bytes, more "
                      "than this engine's whole share of its device (90000 bytes", err)
        self.assertNotIn("step=kv_cache", err)
        self.assertNotIn("fastrestart-arena:", out)

    # A device of 1 MiB whose share (--gpu-memory-utilization 0.9) is 943719 bytes, with the daemon's 128 KiB
    # arena allocated on it: 917504 bytes free, less than the share.
    SMALL_DEVICE = {"FAKE_VLLM_DEVICE_MEMORY": str(1 << 20), "FAKE_VLLM_DEVICE_USED": str(128 << 10)}
    REFUSAL = ("ValueError: Free memory on device %s (0.0/0.0 GiB) on startup is less than desired GPU memory "
               "utilization (0.9, 0.0 GiB). Decrease GPU memory utilization or reduce GPU memory used by other "
               "processes." % DEVICE)

    def test_beside_its_arena_vllm_refuses_to_start_without_the_worker_class(self):
        # vLLM's own request_memory check, as the launcher's --kv-cache-memory-bytes does not get past it
        h = self.holder(128 << 10)
        p = subprocess.run([sys.executable, os.path.join(FAKE, "serve.py"), self.model, "--device", DEVICE,
                            "--load-format", "auto", "--processes", "--distributed-executor-backend", "uni",
                            "--kv-cache-memory-bytes", str(128 << 10)],
                           capture_output=True, text=True, env=self.env(**self.SMALL_DEVICE), timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn(self.REFUSAL, p.stderr)
        self.assertIn("step=init_device", p.stderr)
        self.assertNotIn("step=load_model", p.stderr)
        self.assertIsNone(h.poll())

    def test_beside_its_arena_the_worker_class_counts_it_free_and_the_standby_parks_and_serves(self):
        out, err = self.parked_over_a_held_arena_then_released(env=self.env(**self.SMALL_DEVICE))
        self.assertIn("kv arena 'kv': its 131072 bytes on the daemon of %s counted as free memory for vLLM's "
                      "request_memory (free 917504 of 1048576 bytes measured, 1048576 with the arena)"
                      % self.arena_device, err)
        self.assertNotIn("Free memory on device", err)
        self.assertLess(err.index("counted as free memory"), err.index("step=load_model"))
        # Only the check saw the arena: the snapshot vLLM keeps and its share are its own, and vLLM's
        # request_memory is back in gpu_worker
        self.assertEqual(parse_lines(out)["memory"], {"init_free": (1 << 20) - (128 << 10), "requested": 943719,
                                                      "request_memory": "vllm.v1.worker.utils"})

    def test_an_arena_the_daemon_does_not_hold_or_of_another_name_adds_nothing(self):
        # Something else holds the 128 KiB: the daemon holds no arena 'kv' yet
        p, _ = self.engine(env=self.env(**self.SMALL_DEVICE))
        p.communicate(timeout=60)
        err = self.stderr()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("kv arena 'kv': the daemon of %s holds none; nothing counted as free memory"
                      % self.arena_device, err)
        self.assertIn(self.REFUSAL, err)
        # The daemon holds 'kv', this engine's arena is another: 'kv' is not its KV cache-to-be
        self.holder(128 << 10)
        p, _ = self.engine(env=self.env(**self.SMALL_DEVICE), arena="other")
        p.communicate(timeout=60)
        err = self.stderr()
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("kv arena 'other': the daemon of %s holds none; nothing counted as free memory"
                      % self.arena_device, err)
        self.assertIn(self.REFUSAL, err)
        self.assertNotIn("counted as free memory for vLLM's", err)

    def test_exit_while_parked_ends_the_engine_core_with_status_0_and_leases_nothing(self):
        import fastrestart
        p, out, err = self.parked_then("exit")
        # The reproduction's API server returns its engine core's exit status (vLLM's would fail its start
        # on an engine core that ended).
        self.assertEqual(p.returncode, 0, err)
        self.assertNotIn("leased", err)
        self.assertNotIn("released at warmed", err)
        self.assertNotIn("logits", out)                       # the engine core ended at its gate
        self.assertNotIn("fastrestart-arena: leased", out)
        self.assertIsNone(fastrestart.find_arena(self.ARENA, socket_dir=self.run_dir, device=self.arena_device))

    def test_sigterm_ends_the_parked_engine_core_and_the_gate_closes_with_it(self):
        import signal
        p, sock = self.engine("warmed")
        with sock:
            parked = read_gate_message(self, sock, lambda: "no parked message:\n" + self.stderr())
            os.kill(parked["pid"], signal.SIGTERM)
            # fastrestartd's end of file: the API server kept no copy of the gate once it handed it over
            self.assertEqual(sock.recv(4096), b"")
            out, _ = p.communicate(timeout=60)
        self.assertNotIn("released at warmed", self.stderr())
        self.assertNotIn("logits", out)

    def test_a_lease_that_waits_in_vain_ends_the_released_standby_instead_of_serving(self):
        h = self.holder(64 << 10)  # the live engine never exits
        _, out, err = self.parked_then("release", env=self.env(FASTRESTART_KV_ARENA_WAIT="0.3"))
        self.assertIn("the released standby could not lease KV arena 'kv'", err)
        self.assertNotIn("logits", out)                       # it never served
        self.assertIsNone(h.poll())

    def test_a_standby_without_a_daemon_parks_with_its_own_kv_cache_and_serves_from_it(self):
        self.daemon.stop()
        p, out, err = self.parked_then("release")
        self.assertEqual(p.returncode, 0, err)
        self.assertIn('fastrestart-arena: fallback reason="asking the daemon for the arena', out)
        self.assertRegex(err, r"released at warmed after [\d.]+ s parked; KV cache: own")
        self.assertTrue(parse_lines(out)["kv"]["nonzero"])

    def test_a_warmed_standby_with_another_worker_class_fails_before_its_kv_cache(self):
        import socket
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = self.env(FASTRESTART_KV_ARENA=self.ARENA, FASTRESTART_STANDBY_LEVEL="warmed")
        env["FASTRESTART_STANDBY_FD"] = str(theirs.fileno())
        p = subprocess.run([sys.executable, os.path.join(FAKE, "serve.py"), self.model, "--device", DEVICE,
                            "--load-format", "auto", "--processes", "--distributed-executor-backend", "uni"],
                           capture_output=True, text=True, env=env, pass_fds=(theirs.fileno(),), timeout=60)
        theirs.close()
        with ours:
            ours.settimeout(5)
            self.assertEqual(ours.recv(4096), b"")            # it never parked
        self.assertIn("a warmed vLLM standby needs --worker-cls fastrestart_vllm.worker.Worker (it has 'auto')",
                      p.stderr)
        self.assertNotIn("step=kv_cache", p.stderr)

    def test_a_live_engine_leases_at_once_and_without_a_daemon_falls_back_to_its_own_kv_cache(self):
        p, _ = self.engine()
        out, _ = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, self.stderr())
        self.assertRegex(out, r"fastrestart-arena: leased name=kv bytes=65536")
        self.assertIn("kv arena 'kv': leased (new, zero-filled)", self.stderr())
        self.assertEqual(parse_lines(out)["kv"]["bytes"], 65536)
        self.daemon.stop()
        p, _ = self.engine()
        out, _ = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, self.stderr())
        self.assertIn('fastrestart-arena: fallback reason="asking the daemon for the arena', out)
        self.assertTrue(parse_lines(out)["kv"]["nonzero"])   # served from its own KV cache


def parse_lines(out):
    """Every JSON object line of stdout, merged (with --processes the worker and the API server each print one)."""
    merged = {}
    for line in out.splitlines():
        if line.startswith("{"):
            merged.update(json.loads(line))
    return merged


class LaunchTest(InstalledPluginCase):
    """docs/vllm.md "The port": vLLM loads its plugins while it builds its parser, before it binds its port, so
    without the hand-down a standby parks before its bind and, released while the live engine still
    listens, fails at bind(); through fastrestart_vllm.launch it serves on the socket fastrestartd passed
    (descriptor 3, LISTEN_FDS), and a standby parks without accepting, then serves on it."""

    tmp_prefix = "fr-vllm-launch-"

    def setUp(self):
        super().setUp()
        self.procs = []

    def tearDown(self):
        stop_processes(self.procs)
        shutil.rmtree(self.tmp, ignore_errors=True)

    def env(self, **extra):
        e = dict(os.environ, **extra)
        e["PYTHONPATH"] = os.pathsep.join([os.path.join(self.site, "lib"), e.get("PYTHONPATH", "")])
        return e

    def argv(self, script, port, *more):
        serve = ["serve"] if script == "launch.py" else []  # serve.py is `vllm serve` already
        return [sys.executable, os.path.join(FAKE, script)] + serve + [self.model, "--device", DEVICE,
                "--load-format", "auto", "--port", str(port)] + list(more)

    @staticmethod
    def read(path):
        with open(path) as f:
            return f.read()

    def standby_pair(self, env):
        import socket
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env.update(FASTRESTART_STANDBY_FD=str(theirs.fileno()), FASTRESTART_STANDBY_LEVEL="pre_gpu")
        ours.settimeout(120)
        return ours, theirs

    def test_without_the_hand_down_a_standby_parks_before_its_bind_and_fails_there_once_released(self):
        from listen_support import listening_socket
        with listening_socket() as live:  # the live engine's port, listening as uvicorn's
            env = self.env()
            ours, theirs = self.standby_pair(env)
            err_path = os.path.join(self.tmp, "stderr.log")
            with ours, open(err_path, "w") as err:
                p = subprocess.Popen(self.argv("serve.py", live.getsockname()[1], "--processes"), stdout=subprocess.PIPE,
                                     stderr=err, text=True, env=env, pass_fds=(theirs.fileno(),))
                self.procs.append(p)
                theirs.close()
                # the plugins load while vLLM builds its parser: before the bind
                parked = read_gate_message(self, ours, lambda: "no parked message:\n" + self.read(err_path))
                self.assertEqual(parked["pid"], p.pid)
                self.assertNotIn("step=bind", self.read(err_path))
                ours.sendall(b'{"op":"release"}\n')
                p.communicate(timeout=120)
        stderr = self.read(err_path)
        self.assertEqual(p.returncode, 1, stderr)
        self.assertIn("OSError: [Errno %d] Address already in use" % __import__("errno").EADDRINUSE, stderr)
        self.assertIn("fastrestart-standby: released at pre_gpu", stderr)
        self.assertNotIn("role=engine_core", stderr)   # it failed at its bind, before starting anything

    def test_the_launcher_serves_on_the_passed_socket_what_waited_in_the_queue(self):
        import socket
        from listen_support import listening_socket, popen_with_socket
        with listening_socket() as ls, socket.socket() as other:
            other.bind(("127.0.0.1", 0))             # the --port vLLM is given is not the one it serves on
            early = socket.create_connection(ls.getsockname(), timeout=60)
            p = popen_with_socket(self.argv("launch.py", other.getsockname()[1]), ls, env=self.env(),
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.procs.append(p)
            out, err = p.communicate(timeout=300)
            self.assertEqual(p.returncode, 0, err)
            got = parse_lines(out)
            self.assertTrue(got["logits"])
            self.assertEqual(got["server"], {"fd": 3, "port": ls.getsockname()[1], "served": 1, "backlog": 16})
            self.assertIn("fastrestart-vllm: serving on the socket fastrestartd passed (127.0.0.1:%d, backlog 16)"
                          % ls.getsockname()[1], err)
            self.assertIn("fastrestart-vllm: patched create_server_socket in vllm.entrypoints.launchers.launcher", err)
            self.assertIn("--port %d ignored" % other.getsockname()[1], err)
            with early:
                self.assertTrue(early.recv(64).startswith(b"HTTP/1.0 200 OK"))

    def test_a_standby_through_the_launcher_parks_holding_the_socket_then_serves(self):
        import socket
        from listen_support import listening_socket, popen_with_socket
        with listening_socket() as ls:
            env = self.env()
            ours, theirs = self.standby_pair(env)
            err_path = os.path.join(self.tmp, "stderr.log")
            with ours, open(err_path, "w") as err:
                p = popen_with_socket(self.argv("launch.py", ls.getsockname()[1], "--processes"), ls, env=env,
                                      keep=(theirs.fileno(),), stdout=subprocess.PIPE, stderr=err, text=True)
                self.procs.append(p)
                theirs.close()
                parked = read_gate_message(self, ours, lambda: "no parked message:\n" + self.read(err_path))
                self.assertEqual(parked["pid"], p.pid)
                self.assertNotIn("step=bind", self.read(err_path))  # parked at its parser build
                waiting = socket.create_connection(ls.getsockname(), timeout=60)  # arrives while parked
                ours.sendall(b'{"op":"release"}\n')
                out, _ = p.communicate(timeout=300)
            stderr = self.read(err_path)
            self.assertEqual(p.returncode, 0, stderr)
            got = parse_lines(out)
            self.assertEqual(got["server"], {"fd": 3, "port": ls.getsockname()[1], "served": 1, "backlog": 16}, stderr)
            # LISTEN_* were gone before the plugins loaded: no process vLLM starts takes the socket for its own
            self.assertIn("role=api_server pid=%d standby_fd=- listen_fds=-" % p.pid, stderr)
            self.assertRegex(stderr, r"role=engine_core pid=\d+ standby_fd=- listen_fds=-")
            self.assertRegex(stderr, r"role=worker pid=\d+ standby_fd=- listen_fds=-")
            with waiting:
                self.assertTrue(waiting.recv(64).startswith(b"HTTP/1.0 200 OK"))

    def test_the_factory_is_replaced_where_vllm_calls_it_and_a_vllm_without_it_is_refused(self):
        import argparse
        from listen_support import listening_socket
        from fastrestart_vllm import launch
        from vllm.entrypoints.launchers import launcher
        original = launcher.create_server_socket
        hook = None
        with listening_socket() as ls:
            try:
                hook = launch.install(ls)  # imported already: patched at once
                self.assertEqual(hook.patched, [("vllm.entrypoints.launchers.launcher", "create_server_socket")])
                args = argparse.Namespace(host="", port=ls.getsockname()[1], uds=None)
                self.assertIs(launcher.setup_server(args)[1], ls)
                with self.assertRaisesRegex(RuntimeError, "asked for a second server socket"):
                    launcher.setup_server(args)
            finally:
                launcher.create_server_socket = original
                if hook is not None:
                    sys.meta_path.remove(hook)
            with self.assertRaisesRegex(SystemExit, "has no create_server_socket in any of .*engine.listen = "
                                        "\"engine\""):
                launch.install(ls, modules=("json", "vllm.no_such_module"))


class _Attached:
    """What fastrestart.attach hands out per tensor, for the state round trip without a daemon: a
    read-only view of the published array (the daemon's pool is sealed)."""

    def __init__(self, array):
        self.array = np.array(array, copy=True)
        self.array.flags.writeable = False
        self.nbytes, self.dtype = self.array.nbytes, str(self.array.dtype)

    def numpy(self):
        return self.array


@unittest.skipUnless(backend.NAME == "numpy", "the in-process round trip uses the numpy TensorOps")
class StateRoundTripTest(unittest.TestCase):
    """state.export_state then state.bind_state into a meta-built twin: layout details a model exercises
    only partly (3-D permutations, strided slices, buffers, aliases)."""

    def build(self, meta):
        from contextlib import nullcontext
        with backend.device("meta") if meta else nullcontext():
            m = backend.Module()
            m.a = backend.Module()
            m.b = backend.Module()
            m.a.register_parameter("w", backend.parameter(backend.empty((3, 4), np.float32)))
            m.a.register_parameter("cube", backend.parameter(backend.empty((2, 3, 4), np.float32)))
            m.a.register_buffer("cache", backend.empty((5,), np.float32), persistent=False)
            m.b.register_parameter("w", m.a.w)  # tied
        return m

    def test_round_trip_keeps_values_strides_buffers_and_ties(self):
        from fastrestart_vllm import state
        from numpy_ops import NumpyOps
        ops = NumpyOps()
        cold = self.build(meta=False)
        rng = np.random.default_rng(3)
        backend.replace_parameter(cold.a, "w", rng.standard_normal((4, 3)).astype(np.float32).T)  # transposed
        backend.replace_parameter(cold.a, "cube", rng.standard_normal((4, 2, 3)).astype(np.float32).transpose(1, 2, 0))
        cold.b.register_parameter("w", cold.a.w)
        cold.a.register_parameter("slice", backend.parameter(np.arange(20, dtype=np.int64).reshape(4, 5)[:, ::2]))
        cold.a._buffers["cache"] = np.arange(5, dtype=np.float32)
        arrays, count, nbytes, relaid = state.export_state(cold, ops, "host")
        self.assertEqual(count, 4)                       # a.w once; b.w is an alias
        self.assertEqual(relaid, ["a.slice"])
        warm = self.build(meta=True)
        state.bind_state(warm, {k: _Attached(v) for k, v in arrays.items()}, ops)
        for name in ("w", "cube", "slice", "cache"):
            want, got = getattr(cold.a, name), getattr(warm.a, name)
            np.testing.assert_array_equal(got, want, err_msg=name)
            self.assertFalse(got.flags.writeable, name)
        self.assertEqual(warm.a.w.strides, cold.a.w.strides)          # the transposed view, rebuilt
        self.assertEqual(warm.a.cube.strides, cold.a.cube.strides)
        self.assertTrue(warm.a.slice.flags.c_contiguous)              # relaid: dense after attach
        self.assertIs(warm.b.w, warm.a.w)
        self.assertIn("cache", warm.a._non_persistent_buffers_set)
        self.assertTrue(backend.is_parameter(warm.a.w))
        self.assertNotIn("cache", warm.a._parameters)


    def test_references_held_by_value_are_rebound_in_attributes_and_containers(self):
        from fastrestart_vllm import state
        from numpy_ops import NumpyOps
        ops = NumpyOps()
        cold = self.build(meta=False)
        arrays, _, _, _ = state.export_state(cold, ops, "host")
        warm = self.build(meta=True)
        old_w, old_cube = warm.a.w, warm.a.cube

        class Router:  # a plain object built with the model, holding tensors by value
            pass
        router = Router()
        router.bias, router.pair, router.table, router.seq = old_w, (old_cube, 7), {"w": old_w}, [old_cube]
        warm.a.router = router
        object.__setattr__(warm.a, "direct", old_cube)  # a plain attribute of a module (no registration)
        _, _, holders = state.bind_state(warm, {k: _Attached(v) for k, v in arrays.items()}, ops)
        self.assertIs(router.bias, warm.a.w)
        self.assertIs(router.pair[0], warm.a.cube)
        self.assertEqual(router.pair[1], 7)
        self.assertIs(router.table["w"], warm.a.w)
        self.assertIs(router.seq[0], warm.a.cube)
        self.assertIs(warm.a.__dict__["direct"], warm.a.cube)
        self.assertEqual(sorted(holders), ["a.direct", "a.router.bias", "a.router.pair[0]", "a.router.seq[0]",
                                           "a.router.table['w']"])
        self.assertNotIn("router", warm.a._parameters)

    def test_load_weights_attributes_round_trip(self):
        from fastrestart_vllm import state
        from numpy_ops import NumpyOps
        ops = NumpyOps()
        cold = self.build(meta=False)
        cold.has_own_lm_head = True
        arrays, _, _, _ = state.export_state(cold, ops, "host")
        warm = self.build(meta=True)
        warm.has_own_lm_head = False
        state.bind_state(warm, {k: _Attached(v) for k, v in arrays.items()}, ops)
        self.assertIs(warm.has_own_lm_head, True)
        self.assertFalse(hasattr(warm, "has_own_embed_tokens"), "only what the cold model had")


class ResultLineTest(unittest.TestCase):
    def test_round_trip(self):
        r = result_line.LoadReport(result="miss", key="0123456789abcdef", device="cuda:1", tp="1/2", pp="0/1",
                                   dp="0/1", mode="zero_copy", load_ms=1234.56, publish="busy",
                                   reason='files[0].ctime_ns differs: "x"\nnext line')
        line = result_line.format_line(r)
        self.assertNotIn("\n", line)
        self.assertTrue(line.startswith("fastrestart-loader: v=1 result=miss key=0123456789abcdef device=cuda:1 "))
        f = result_line.parse_line("INFO 12-01 10:00:00 [x.py:1] " + line)
        self.assertEqual((f["result"], f["load_ms"], f["attach_ms"], f["publish"], f["tp"]),
                         ("miss", "1234.6", "-", "busy", "1/2"))
        self.assertEqual(f["reason"], r.reason)
        self.assertIsNone(result_line.parse_line("fastrestart-loader is mentioned here"))
        with self.assertRaises(ValueError):
            result_line.format_line(result_line.LoadReport(result="warm"))


class OptionsTest(unittest.TestCase):
    def test_defaults_and_values(self):
        self.assertEqual(options.parse_options(None), options.Options())
        o = options.parse_options({"mode": "copy", "fallback": False, "connect_timeout_s": 1,
                                   "state_timeout_s": 2.5, "socket_dir": "/run/fr", "verify": True})
        self.assertEqual((o.mode, o.fallback, o.connect_timeout_s, o.state_timeout_s, o.socket_dir, o.verify),
                         ("copy", False, 1.0, 2.5, "/run/fr", True))

    def test_errors_name_the_key(self):
        for cfg, key in (({"state_timeout_s": -1}, "state_timeout_s"), ({"state_timeout_s": float("nan")}, "state_timeout_s"),
                         ({"fallback": "false"}, "fallback"), ({"socket_dir": ""}, "socket_dir"),
                         ({"x": 1, "mode": "copy"}, "'x'")):
            with self.assertRaisesRegex(options.OptionsError, key):
                options.parse_options(cfg)
        with self.assertRaisesRegex(options.OptionsError, "JSON object"):
            options.parse_options(["mode"])


if __name__ == "__main__":
    unittest.main()


class KvArenaArgvTest(unittest.TestCase):
    """fastrestart_vllm.launch's --kv-arena: taken out of vLLM's argv, into FASTRESTART_KV_ARENA, with the
    worker class that uses it."""

    def test_the_flag_becomes_the_variable_and_the_worker_class(self):
        from fastrestart_vllm.launch import kv_arena_argv
        for argv in (["M", "--kv-arena", "kv", "-tp", "1"], ["M", "--kv-arena=kv", "-tp", "1"],
                     ["M", "--kv_arena", "kv", "-tp", "1"]):
            env = {}
            self.assertEqual(kv_arena_argv(argv, env), ["M", "-tp", "1", "--worker-cls", "fastrestart_vllm.worker.Worker"])
            self.assertEqual(env, {"FASTRESTART_KV_ARENA": "kv"})
        env = {}
        self.assertEqual(kv_arena_argv(["M", "--kv-arena", "kv", "--", "x"], env),
                         ["M", "--worker-cls", "fastrestart_vllm.worker.Worker", "--", "x"])
        self.assertEqual(kv_arena_argv(["M", "--worker-cls=fastrestart_vllm.worker.Worker", "--kv-arena", "a"], env),
                         ["M", "--worker-cls=fastrestart_vllm.worker.Worker"])
        env = {}
        self.assertEqual(kv_arena_argv(["M", "--", "--kv-arena", "kv"], env), ["M", "--", "--kv-arena", "kv"])
        self.assertEqual(env, {})

    def test_the_size_of_the_arena_the_daemon_holds_goes_to_kv_cache_memory_bytes(self):
        from fastrestart_vllm.launch import arena_size_argv
        asked = []

        def find(name, device, socket_dir):
            asked.append((name, device, socket_dir))
            return {"name": name, "bytes": 4096} if name == "kv" else None

        env = {"FASTRESTART_SOCKET_DIR": "/run/fr"}
        self.assertEqual(arena_size_argv(["M", "--device", "cpu", "--", "x"], "kv", env, find),
                         ["M", "--device", "cpu", "--kv-cache-memory-bytes", "4096", "--", "x"])
        self.assertEqual(asked, [("kv", "host", "/run/fr")])
        self.assertEqual(arena_size_argv(["M"], "kv", {}, find), ["M", "--kv-cache-memory-bytes", "4096"])
        self.assertEqual(asked[-1], ("kv", "cuda:0", None))
        # the same size given already: unchanged; none held, or no daemon: unchanged (vLLM sizes it)
        self.assertEqual(arena_size_argv(["M", "--kv_cache_memory_bytes=4096"], "kv", {}, find),
                         ["M", "--kv_cache_memory_bytes=4096"])
        self.assertEqual(arena_size_argv(["M"], "other", {}, find), ["M"])

        def no_daemon(name, device, socket_dir):
            raise RuntimeError("no daemon")
        self.assertEqual(arena_size_argv(["M"], "kv", {}, no_daemon), ["M"])
        with self.assertRaisesRegex(SystemExit, "--kv-cache-memory-bytes 8192, but kv arena 'kv' on the daemon "
                                                "of cuda:0 holds 4096 bytes"):
            arena_size_argv(["M", "--kv-cache-memory-bytes", "8192"], "kv", {}, find)

    def test_another_worker_class_or_no_name_is_one_line(self):
        from fastrestart_vllm.launch import kv_arena_argv
        with self.assertRaisesRegex(SystemExit, "--kv-arena needs --worker-cls fastrestart_vllm.worker.Worker, not my.W"):
            kv_arena_argv(["M", "--kv-arena", "kv", "--worker-cls", "my.W"], {})
        for argv in (["M", "--kv-arena"], ["M", "--kv-arena", "--dtype"], ["M", "--kv-arena="]):
            with self.assertRaisesRegex(SystemExit, "--kv-arena needs the arena's name"):
                kv_arena_argv(argv, {})
