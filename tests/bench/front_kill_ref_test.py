#!/usr/bin/env python3
"""bench/front_kill_ref.py (clients across kill -9 through fastrestart-front and straight to fastrestartd's
port) on the CPU with the tiny engine: the real fastrestartd, front, host weight daemon and a `warmed`
standby; and the bench's verdict on results that break the front's promise.

    front_kill_ref_test.py BUILD_DIR
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(os.path.dirname(os.path.dirname(HERE)), "bench")
sys.path.insert(0, BENCH)
import front_kill_ref  # noqa: E402

BUILD = None


class FirstDiff(unittest.TestCase):
    def test_the_first_differing_token_or_the_shorter_length(self):
        self.assertIsNone(front_kill_ref.first_diff(["a", "b"], ["a", "b"]))
        self.assertEqual(front_kill_ref.first_diff(["a", "x", "c"], ["a", "b", "c"]), 1)
        self.assertEqual(front_kill_ref.first_diff(["a"], ["a", "b"]), 1)


class Verdict(unittest.TestCase):
    def result(self, engine, failed=0, differ=0, ok=True, equal=True):
        return {"args": {"engine": engine}, "modes": {
            "front": {"load": [{"clients": 64, "failed": failed, "failed_by": {"503": failed}, "differ": differ}],
                      "batch1": [{"ok": ok, "tokens_equal": equal}]},
            "supervisor": {"load": [{"clients": 64, "failed": 40, "failed_by": {}, "differ": 0}]}}}

    def test_a_clean_result_has_none_whatever_the_direct_path_lost(self):
        self.assertEqual(front_kill_ref.violations(self.result("ref")), [])

    def test_a_failure_through_the_front_or_another_continued_token_is_one(self):
        self.assertIn("1 failed", front_kill_ref.violations(self.result("ref", failed=1))[0])
        self.assertIn("other tokens", front_kill_ref.violations(self.result("ref", equal=False))[0])
        self.assertIn("failed", front_kill_ref.violations(self.result("tiny", ok=False))[0])

    def test_a_differing_answer_breaks_only_the_bit_exact_engine(self):
        self.assertEqual(front_kill_ref.violations(self.result("ref", differ=3)), [])
        self.assertIn("differ", front_kill_ref.violations(self.result("tiny", differ=3))[0])


class TinyThroughTheFront(unittest.TestCase):
    def test_no_request_through_the_front_fails_across_kills(self):
        out = tempfile.mkdtemp(prefix="front-kill-ref-test-")
        self.addCleanup(shutil.rmtree, out, True)
        p = subprocess.run([sys.executable, os.path.join(BENCH, "front_kill_ref.py"), "--engine", "tiny", "--bin", BUILD,
                            "--clients", "16", "--kills", "1", "--single-kills", "2", "--settle-s", "1", "--out", out],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240,
                           start_new_session=True)
        self.assertEqual(p.returncode, 0, p.stdout[-3000:])
        res = json.load(open(glob.glob(os.path.join(out, "front_kill_ref-*.json"))[0]))
        self.assertEqual(res["violations"], [])
        front, direct = res["modes"]["front"], res["modes"]["supervisor"]
        self.assertEqual([k["path"] for r in front["load"] for k in r["kills"]], ["standby"])
        self.assertGreater(front["load"][0]["requests"], 16)
        self.assertEqual(len(front["batch1"]), 2)
        for b in front["batch1"]:
            self.assertTrue(b["ok"] and b["tokens_equal"], b)
            # the oracle is the second uninterrupted stream; the tiny engine answers the first alike
            self.assertEqual(b["fresh_vs_cached"], {"equal": True}, b)
            self.assertEqual(b["fresh_tokens"], b["want_tokens"])
            self.assertGreater(len(b["want_tokens"]), 0)
            self.assertGreater(b["uninterrupted_s"], 0)
            self.assertEqual(b["path"], "standby")
            self.assertIsNotNone(b["extra_minus_gap_s"])
        self.assertEqual(len(direct["load"][0]["kills"]), 1)
        self.assertNotIn("batch1", direct)
        self.assertEqual(front["stop_exit"], 0)


if __name__ == "__main__":
    BUILD = os.path.abspath(sys.argv.pop(1))
    unittest.main()
