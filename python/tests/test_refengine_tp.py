"""The reference engine's tensor parallelism (docs/refengine.md, "Tensor parallel"), on a machine without torch.

Two halves:
- refengine_tp's functions as they are: the devices and memory budgets of the ranks from the flags and
  fastrestartd's environment (FASTRESTART_DEVICES, FASTRESTART_GPU_MEMORY_UTILIZATION), the config checks,
  the sharding of the checkpoint's tensors;
- the engine as real processes with fake_torch/ in place of torch (anything on CUDA fails, naming the
  call): the startup errors, and rank 0 starting its workers, which stay GPU-free until rank 0's pre_gpu
  gate lets them go, die with rank 0 (SIGKILL included), and whose death ends rank 0 at once, naming the
  rank. The parts that park at the gate need the binding's standby module (else they skip).

With real torch and GPUs the sharded forward, the attach agreement and bitwise logits run in
bench/gpu_tp.sh (scripts/gpu-run.sh tp).

Run: PYTHONPATH=<build>/python python3 -m unittest -v test_refengine_tp   (ctest python_refengine_tp)
"""

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
REFENGINE = os.path.join(HERE, "..", "refengine")
ENGINE = os.path.join(REFENGINE, "fastrestart_refengine.py")
FAKE = os.path.join(HERE, "fake_torch")
sys.path.insert(0, REFENGINE)
import refengine_tp as tp  # noqa: E402
from weightd_support import CUDA_TOUCHED, NO_GATE, fake_model_dir, read_text, spawn_engine, stop_processes  # noqa: E402

# Llama-3.1-8B's head counts and widths (bench/gen_llama_checkpoint.py --shape 8b)
LLAMA = {"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", "vocab_size": 128256,
         "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8}


def flags(n=1, device="cuda:0", share=False, util=0.9):
    return argparse.Namespace(tensor_parallel_size=n, device=device, share_device=share, gpu_memory_utilization=util)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid):
    """True while pid runs (a zombie counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def alive_after(pid, timeout=60):
    """alive(pid) once it has ended, or after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive(pid)


class PlanTest(unittest.TestCase):
    def test_devices_come_from_fastrestartd_one_per_rank(self):
        env = {tp.DEVICES_ENV: "cuda:0, cuda:1", tp.MEMORY_ENV: "0.8,0.5"}
        self.assertEqual(tp.plan(flags(2), env), [{"device": "cuda:0", "memory_utilization": 0.8},
                                                  {"device": "cuda:1", "memory_utilization": 0.5}])

    def test_without_fastrestartd_rank_r_is_cuda_r_and_one_rank_is_device(self):
        self.assertEqual([r["device"] for r in tp.plan(flags(3), {})], ["cuda:0", "cuda:1", "cuda:2"])
        self.assertEqual(tp.plan(flags(1, device="cuda:3", util=0.7), {}),
                         [{"device": "cuda:3", "memory_utilization": 0.7}])
        # one rank under fastrestartd: its first GPU
        self.assertEqual(tp.plan(flags(1), {tp.DEVICES_ENV: "cuda:2,cuda:5"})[0]["device"], "cuda:2")

    def test_share_device_puts_every_rank_on_the_first(self):
        env = {tp.DEVICES_ENV: "cuda:1", tp.MEMORY_ENV: "0.6"}
        self.assertEqual(tp.plan(flags(2, share=True), env), [{"device": "cuda:1", "memory_utilization": 0.6}] * 2)
        self.assertEqual([r["device"] for r in tp.plan(flags(2, device="cuda:4", share=True), {})], ["cuda:4"] * 2)

    def test_more_ranks_than_gpus_is_an_error_naming_both(self):
        with self.assertRaises(SystemExit) as e:
            tp.plan(flags(4), {tp.DEVICES_ENV: "cuda:0,cuda:1"})
        self.assertIn("--tensor-parallel-size 4 needs 4 GPUs", str(e.exception))
        self.assertIn("names 2", str(e.exception))

    def test_bad_device_and_fraction_entries_are_named(self):
        for value, entry in (("cuda:0,", "entry 1 ('')"), ("host", "entry 0 ('host')"), ("cuda:x", "entry 0")):
            with self.assertRaises(SystemExit) as e:
                tp.plan(flags(1), {tp.DEVICES_ENV: value})
            self.assertIn(tp.DEVICES_ENV, str(e.exception))
            self.assertIn(entry, str(e.exception))
        for value, why in (("0.9,1.5", "entry 1 ('1.5')"), ("x", "entry 0 ('x')"), ("0.9", "names 1 GPUs")):
            with self.assertRaises(SystemExit) as e:
                tp.plan(flags(2), {tp.DEVICES_ENV: "cuda:0,cuda:1", tp.MEMORY_ENV: value})
            self.assertIn(tp.MEMORY_ENV, str(e.exception))
            self.assertIn(why, str(e.exception))

    def test_rank_of_this_process(self):
        self.assertEqual(tp.this_rank({"RANK": "3"}), 0)  # RANK alone is not our worker mode
        self.assertEqual(tp.this_rank({tp.PARENT_ENV: "1", "RANK": "3"}), 3)
        with self.assertRaises(SystemExit):
            tp.this_rank({tp.PARENT_ENV: "1"})


class ShardingTest(unittest.TestCase):
    def write(self, config):
        d = tempfile.mkdtemp(prefix="fr-reftp-")
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f)
        return d

    def test_llama_8b_divides_by_1_2_4_8(self):
        d = self.write(LLAMA)
        for n in (1, 2, 4, 8):
            tp.check_shardable(d, n)

    def test_a_count_that_does_not_divide_is_named(self):
        d = self.write(LLAMA)
        with self.assertRaises(SystemExit) as e:
            tp.check_shardable(d, 16)  # 32 heads, 8 key/value heads
        self.assertIn("num_key_value_heads = 8 does not divide by --tensor-parallel-size 16", str(e.exception))
        self.assertIn(os.path.join(d, "config.json"), str(e.exception))
        with self.assertRaises(SystemExit) as e:
            tp.check_shardable(d, 3)
        self.assertIn("num_attention_heads = 32", str(e.exception))
        with self.assertRaises(SystemExit) as e:
            tp.check_shardable(self.write(dict(LLAMA, intermediate_size=14338)), 4)
        self.assertIn("intermediate_size = 14338", str(e.exception))

    def test_missing_fields_and_biases_are_refused(self):
        with self.assertRaises(SystemExit) as e:
            tp.check_shardable(self.write({k: v for k, v in LLAMA.items() if k != "hidden_size"}), 2)
        self.assertIn("hidden_size", str(e.exception))
        with self.assertRaises(SystemExit) as e:
            tp.check_shardable(self.write(dict(LLAMA, attention_bias=True)), 2)
        self.assertIn("attention_bias", str(e.exception))
        # key/value heads default to the attention heads, as in transformers
        tp.check_shardable(self.write({k: v for k, v in LLAMA.items() if k != "num_key_value_heads"}), 32)

    def test_column_row_and_replicated_tensors(self):
        p = "model.layers.7."
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            self.assertEqual(tp.shard_dim(p + name + ".weight"), 0, name)
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            self.assertEqual(tp.shard_dim(p + name + ".weight"), 1, name)
        for name in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight", p + "input_layernorm.weight",
                     p + "post_attention_layernorm.weight", p + "self_attn.rotary_emb.inv_freq"):
            self.assertIsNone(tp.shard_dim(name), name)
        self.assertEqual(tp.shard_range("x", 14336, 0, 1, 2), (7168, 14336))
        with self.assertRaises(SystemExit):
            tp.shard_range("x", 10, 1, 0, 3)


class EngineProcessTest(unittest.TestCase):
    """The engine as real processes on fake_torch/."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fr-reftp-")
        self.model = os.path.join(self.tmp, "model")
        fake_model_dir(self.model, LLAMA)
        self.procs = []
        self.pids = []  # workers: not our children, killed at the end when still there

    def tearDown(self):
        stop_processes(self.procs)
        for pid in self.pids:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)

    def start(self, *extra, env=None, level=None, own_group=False):
        e = dict(os.environ)
        e["PYTHONPATH"] = os.pathsep.join([FAKE, e.get("PYTHONPATH", "")])
        for k in ("FASTRESTART_STANDBY_FD", tp.DEVICES_ENV, tp.MEMORY_ENV, tp.PARENT_ENV):
            e.pop(k, None)
        e.update(env or {})
        return spawn_engine(self, e, level, lambda out, fds: subprocess.Popen(
            [sys.executable, ENGINE, "serve", self.model, "--port", str(free_port()), "--load-format", "disk", *extra],
            stdout=out, stderr=subprocess.STDOUT, env=e, pass_fds=fds, start_new_session=own_group))

    def output(self):
        return read_text(self.log)

    def wait_for(self, text, p, timeout=120):
        """Until the log has `text` (or the engine exited: a failure naming the log)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out = self.output()
            if text in out:
                return out
            if p.poll() is not None:
                self.fail(f"the engine exited ({p.returncode}) before {text!r}:\n{out}")
            time.sleep(0.05)
        self.fail(f"no {text!r} within {timeout} s:\n{self.output()}")

    def worker_pid(self, out, rank=1):
        mark = f"tensor parallel: started rank {rank} (pid "
        pid = int(out.split(mark, 1)[1].split(")", 1)[0])
        self.pids.append(pid)
        return pid

    def start_parked_pair(self, own_group=False):
        """Rank 0 and its worker (rank 1) sharing one device over gloo, parked at pre_gpu: (rank 0's process,
        its gate socket, the worker's pid). The socket is closed when the park is not reached."""
        p, sock = self.start("--tensor-parallel-size", "2", "--share-device", "--dist-backend", "gloo",
                             level="pre_gpu", own_group=own_group)
        with contextlib.ExitStack() as on_failure:
            on_failure.enter_context(sock)
            out = self.wait_for("waiting for rank 0's go", p)
            pid = self.worker_pid(out)
            self.wait_for("standby: parked at pre_gpu", p)
            on_failure.pop_all()
        return p, sock, pid

    def exits(self, p, code, *texts):
        self.assertEqual(p.wait(120), code, self.output())
        out = self.output()
        for t in texts:
            self.assertIn(t, out)
        return out

    def test_startup_errors_are_named(self):
        p, _ = self.start("--tensor-parallel-size", "2", "--share-device")
        self.exits(p, 2, "--share-device needs --dist-backend gloo")
        p, _ = self.start("--tensor-parallel-size", "2", "--cuda-graph")
        self.exits(p, 2, "--cuda-graph is for --tensor-parallel-size 1 only")
        p, _ = self.start("--tensor-parallel-size", "0")
        self.exits(p, 2, "--tensor-parallel-size must be at least 1")
        p, _ = self.start("--tensor-parallel-size", "4", env={tp.DEVICES_ENV: "cuda:0,cuda:1"})
        out = self.exits(p, 1, "--tensor-parallel-size 4 needs 4 GPUs", "names 2")
        self.assertNotIn("started rank", out)  # refused before any worker starts
        p, _ = self.start("--tensor-parallel-size", "3")
        self.exits(p, 1, "num_attention_heads = 32 does not divide by --tensor-parallel-size 3")
        p, _ = self.start("--tensor-parallel-size", "2", env={"FASTRESTART_SNAPSHOT_SOCKET": "/nonexistent"})
        self.exits(p, 1, "snapshots are for --tensor-parallel-size 1 only")

    @unittest.skipIf(bool(NO_GATE), NO_GATE)
    def test_rank_0_starts_its_workers_with_the_rank_environment(self):
        p, sock = self.start("--tensor-parallel-size", "2", env={tp.DEVICES_ENV: "cuda:0,cuda:1"}, level="pre_gpu")
        with sock:
            out = self.wait_for("waiting for rank 0's go", p)  # parked with rank 0: alive until the release
            pid = self.worker_pid(out)
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            self.assertEqual(env[b"RANK"], b"1")
            self.assertEqual(env[b"LOCAL_RANK"], b"1")
            self.assertEqual(env[b"WORLD_SIZE"], b"2")
            self.assertEqual(env[b"MASTER_ADDR"], b"127.0.0.1")
            self.assertEqual(env[tp.PARENT_ENV.encode()], str(p.pid).encode())
            self.assertEqual(env[tp.DEVICES_ENV.encode()], b"cuda:0,cuda:1")
            for k in (b"FASTRESTART_STANDBY_FD", b"FASTRESTART_STANDBY_LEVEL"):
                self.assertNotIn(k, env)  # the gates are rank 0's
            self.assertEqual(os.getpgid(pid), os.getpgid(p.pid))  # fastrestartd signals the group
            with open(f"/proc/{pid}/stat") as f:
                self.assertEqual(int(f.read().rsplit(")", 1)[1].split()[1]), p.pid)
            sock.sendall(b'{"op":"release"}\n')
            # Released: the go comes, every rank reaches CUDA (which the fake refuses), rank 0 exits 1.
            self.assertEqual(p.wait(120), 1, self.output())

    @unittest.skipIf(bool(NO_GATE), NO_GATE)
    def test_parked_standby_keeps_its_workers_off_the_gpu_and_they_die_with_it(self):
        p, sock, pid = self.start_parked_pair()
        with sock:
            self.assertTrue(alive(pid))
            self.assertNotIn(CUDA_TOUCHED, self.output())  # neither rank 0 nor its worker touched the GPU
            p.send_signal(signal.SIGKILL)
            self.assertEqual(p.wait(60), -signal.SIGKILL)
        self.assertFalse(alive_after(pid), "rank 1 outlived rank 0's SIGKILL")

    @unittest.skipIf(bool(NO_GATE), NO_GATE)
    def test_a_worker_that_dies_ends_rank_0_at_once_naming_it(self):
        p, sock, pid = self.start_parked_pair()
        with sock:
            os.kill(pid, signal.SIGKILL)
            self.exits(p, 1, f"tensor parallel: rank 1 (pid {pid}) was killed by signal 9: exiting")

    @unittest.skipIf(bool(NO_GATE), NO_GATE)
    def test_sigterm_to_the_group_stops_rank_0_not_the_workers_first(self):
        """fastrestartd stops an engine by signalling its process group: the workers ignore SIGTERM and end
        with rank 0, so rank 0 never sees a worker die first (which would be a crash, exit 1)."""
        p, sock, pid = self.start_parked_pair(own_group=True)
        with sock:
            with open(f"/proc/{pid}/status") as f:
                ignored = int(next(line for line in f if line.startswith("SigIgn:")).split()[1], 16)
            for sig in (signal.SIGTERM, signal.SIGINT):
                self.assertTrue(ignored & (1 << (sig - 1)), f"rank 1 does not ignore {sig.name}")
            os.killpg(p.pid, signal.SIGTERM)  # as fastrestartd stops an engine
            self.assertEqual(p.wait(60), -signal.SIGTERM)  # parked: SIGTERM's default action
        self.assertFalse(alive_after(pid))
        self.assertNotIn("was killed by signal", self.output())

    @unittest.skipIf(bool(NO_GATE), NO_GATE)
    def test_release_lets_every_rank_on_to_the_gpu(self):
        p, sock, _ = self.start_parked_pair()
        with sock:
            self.assertNotIn(CUDA_TOUCHED, self.output())
            sock.sendall(b'{"op":"release"}\n')
            self.assertEqual(p.wait(120), 1)  # the fake's CUDA fails on every rank
        out = self.output()
        self.assertLess(out.find("standby: released at pre_gpu"), out.find(CUDA_TOUCHED), out)


if __name__ == "__main__":
    unittest.main()
