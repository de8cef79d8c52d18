#!/usr/bin/env python3
"""The kill clock of the benchmarks (bench/fastrestartd_run.py) against a real fastrestartd supervising the
tiny engine over a host weight daemon: a kill -9 timed from the kill(2), fastrestartd's reap and READY stamps
on the bench's clock, the first answered request of a client sending across the kill and the first byte of
its answer (plain and streamed), and READY against that first byte.

    kill_clock_test.py FASTRESTARTD FASTRESTARTCTL FASTRESTART-WEIGHTD FASTRESTART-TINYENGINE

The assertions are orderings that follow from cause and effect on one clock (the reap before the READY,
the READY stamped before the bench reads it in the log), not durations.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench"))
import fastrestartd_run as fr  # noqa: E402
import standby_cycles  # noqa: E402

PROGS = {}


class KillClock(unittest.TestCase):
    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="fr-kill-clock-")
        ckpt = os.path.join(self.work, "model")
        subprocess.run([PROGS["fastrestart-tinyengine"], "gen", "--out", ckpt, "--size", "8M"], check=True,
                       stdout=subprocess.DEVNULL)
        a = argparse.Namespace(path="warm", model="t", startup_delay=0.0, kv_arena_bytes=0)
        self.port = fr.free_port()
        d = os.path.join(self.work, "sup")
        self.sup = fr.Fastrestartd(d, standby_cycles.tiny_config(a, d, self.port, ckpt, PROGS),
                                   fr.control_socket(d), fastrestartd=PROGS["fastrestartd"],
                                   fastrestartctl=PROGS["fastrestartctl"]).start()

    def tearDown(self):
        self.sup.stop(30)
        shutil.rmtree(self.work, ignore_errors=True)

    def test_a_kill_is_timed_from_the_kill_on_fastrestartds_stamps(self):
        st = self.sup.wait_ready(1, 120)
        pid = st["engine"]["pid"]
        prober = fr.Prober(self.port, fr.completion_body("t"), clients=2).start()
        try:
            self.assertTrue(prober.wait_answered_since(time.monotonic(), 60), "the engine answers before the kill")
            clock = fr.KillClock(pid).kill()
            st = self.sup.wait_ready(2, 120)
            seen = time.monotonic()
            self.assertTrue(prober.wait_answered_since(clock.t_kill, 60), "a request sent after the kill is answered")
        finally:
            records = prober.finish()
        rec = clock.ready(st, seen)
        clock.answers(records)
        # fastrestartd's READY stamp, on the clock of its reap stamp
        self.assertIn("ready_at_s", st["last_start"])
        self.assertEqual(st["last_exit"]["pid"], pid)
        self.assertNotIn("clock_error", rec)
        self.assertEqual(rec["path"], "warm")
        # the reap follows the kill, the READY follows the reap, and the bench reads READY after it is stamped
        self.assertGreaterEqual(rec["kill_to_reap_s"], 0)
        self.assertGreaterEqual(rec["kill_to_ready_s"], rec["kill_to_reap_s"])
        self.assertLessEqual(rec["kill_to_ready_s"], rec["kill_to_ready_seen_s"])
        self.assertAlmostEqual(rec["kill_to_ready_s"], rec["kill_to_reap_s"] + rec["reap_to_ready_s"], places=3)
        # the first answer to a request sent after the kill; the first answer at all comes no later
        self.assertIsNotNone(rec["kill_to_first_answer_s"])
        self.assertGreaterEqual(rec["first_answer_sent_after_s"], 0)
        self.assertLessEqual(rec["kill_to_first_success_s"], rec["kill_to_first_answer_s"])
        self.assertEqual(rec["kill_monotonic_s"], round(clock.t_kill, 6))
        # every answer began arriving between its send and its end; the engine began answering no later than
        # the first answer ended, and READY minus that first byte is the difference of the two on one clock
        self.check_first_bytes(records)
        self.assertIsNotNone(rec["kill_to_first_byte_s"])
        self.assertGreaterEqual(rec["first_byte_sent_after_s"], 0)
        self.assertLessEqual(rec["kill_to_first_byte_s"], rec["kill_to_first_answer_s"])
        self.assertAlmostEqual(rec["ready_minus_first_byte_s"], rec["kill_to_ready_s"] - rec["kill_to_first_byte_s"],
                               places=3)
        # the summary's per-kill row and its text line carry the same figures
        s = fr.kill_clock_summary([rec])
        self.assertEqual(s["first_byte_per_kill"], [{k: rec[k] for k in fr.FIRST_BYTE_KEYS}])
        self.assertEqual(s["ready_minus_first_byte_s"]["median"], rec["ready_minus_first_byte_s"])
        self.assertIn(f"{rec['ready_minus_first_byte_s']:+.3f}", fr.first_byte_line(s))

    def check_first_bytes(self, records):
        ok = [r for r in records if r.outcome == "ok"]
        self.assertTrue(ok)
        for r in ok:
            self.assertIsNotNone(r.first_byte, r)
            self.assertLessEqual(r.sent, r.first_byte)
            self.assertLessEqual(r.first_byte, r.ended)
        for r in records:
            if r.outcome == "refused":
                self.assertIsNone(r.first_byte, r)

    def test_a_reap_stamp_of_another_process_is_not_taken_for_this_kill(self):
        st = self.sup.wait_ready(1, 120)
        clock = fr.KillClock(st["engine"]["pid"])
        clock.t_kill = time.monotonic()
        # no kill: the status's last exit (none yet) is not of this pid
        rec = clock.ready(self.sup.status())
        self.assertIn("clock_error", rec)
        self.assertNotIn("kill_to_ready_s", rec)


DELAY = 0.05  # the tiny engine's --fault-token-delay: it sleeps this long per token before answering


class FirstByte(unittest.TestCase):
    """The Prober's first byte against the tiny engine alone, which sends a streamed answer's events one by
    one, each after a token delay, and a plain answer after all of them (docs/tinyengine.md, "Streaming").
    The bounds below are those sleeps: lower bounds that follow from them, not durations."""

    def setUp(self):
        self.work = tempfile.mkdtemp(prefix="fr-first-byte-")
        ckpt = os.path.join(self.work, "model")
        subprocess.run([PROGS["fastrestart-tinyengine"], "gen", "--out", ckpt, "--size", "8M"], check=True,
                       stdout=subprocess.DEVNULL)
        self.port = fr.free_port()
        self.engine = subprocess.Popen([PROGS["fastrestart-tinyengine"], "serve", ckpt, "--host", "127.0.0.1", "--port",
                                        str(self.port), "--served-model-name", "t", "--fault-token-delay", str(DELAY)],
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def tearDown(self):
        self.engine.kill()
        self.engine.wait()
        shutil.rmtree(self.work, ignore_errors=True)

    def requests(self, stream):
        prober = fr.Prober(self.port, fr.completion_body("t", max_tokens=4), stream=stream).start()
        try:
            t = time.monotonic()
            self.assertTrue(prober.wait_answered_since(t, 60), "a request is answered")
        finally:
            records = prober.finish()
        return prober, [r for r in records if r.outcome == "ok"]

    def test_a_streamed_answer_begins_at_its_first_event(self):
        prober, ok = self.requests(stream=True)
        self.assertEqual(json.loads(prober.body)["stream"], True)
        self.assertTrue(ok)
        for r in ok:
            # the first of 4 events is written after one token delay, the other 3 each after another: the
            # first byte is that event (not the status line before it), and the answer goes on after it.
            # Only lower bounds from the send hold on a loaded machine: a late read of the first event
            # shortens the gap after it (the later events are already buffered).
            self.assertGreaterEqual(r.first_byte - r.sent, DELAY)
            self.assertGreaterEqual(r.ended - r.sent, 4 * DELAY)
            self.assertGreater(r.ended, r.first_byte)

    def test_a_plain_answer_begins_at_its_status_line(self):
        prober, ok = self.requests(stream=False)
        self.assertNotIn("stream", json.loads(prober.body))
        self.assertTrue(ok)
        for r in ok:
            # the status line follows the 4 tokens' delays
            self.assertGreaterEqual(r.first_byte - r.sent, 4 * DELAY)
            self.assertLessEqual(r.first_byte, r.ended)
        # with no request sent after it, a kill has no first byte, and READY minus it is left out
        rec = fr.ready_vs_first_byte(dict(fr.first_answers(ok, time.monotonic()), kill_to_ready_s=0.1))
        self.assertIsNone(rec["kill_to_first_byte_s"])
        self.assertNotIn("ready_minus_first_byte_s", rec)
        self.assertIsNone(fr.first_byte_line(fr.kill_clock_summary([rec])))


if __name__ == "__main__":
    for name, path in zip(("fastrestartd", "fastrestartctl", "fastrestart-weightd", "fastrestart-tinyengine"), sys.argv[1:5]):
        PROGS[name] = path
    del sys.argv[1:5]
    unittest.main()
