#!/usr/bin/env python3
"""bench/check_figures.py against the repository's pages, and against copies of them with one figure or one
raw file wrong: the copies must fail, naming the line.

    check_figures_test.py SOURCE_DIR
"""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SRC = None


def run(root):
    return subprocess.run([sys.executable, os.path.join(SRC, "bench", "check_figures.py"), "--root", root],
                          capture_output=True, text=True, timeout=60)


class CheckFigures(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="fr-check-figures-")
        os.makedirs(os.path.join(self.root, "docs"))
        for f in ("README.md", "docs/benchmarks.md"):
            shutil.copy(os.path.join(SRC, f), os.path.join(self.root, f))
        shutil.copytree(os.path.join(SRC, "bench", "results"), os.path.join(self.root, "bench", "results"))

    def tearDown(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def edit(self, page, old, new):
        p = os.path.join(self.root, page)
        with open(p) as f:
            s = f.read()
        self.assertIn(old, s)
        with open(p, "w") as f:
            f.write(s.replace(old, new, 1))

    def test_the_repository_pages_match_their_raw_files(self):
        r = run(SRC)
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_readme_figure_that_is_not_its_raw_files_fails(self):
        # the arena standby's kill -> READY median, written as its reap -> READY figure
        self.edit("README.md", "| 0.36 s | 0.38 s |", "| 0.23 s | 0.38 s |")
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("README.md", r.stderr)
        self.assertIn("kc.arena.ready.median is '| 0.36 s |'", r.stderr)

    def test_a_kill_clock_row_whose_raw_file_lacks_a_kill_fails(self):
        # one kill fewer in the raw file: the count and the median in the table no longer match it
        import json
        p = os.path.join(self.root, "bench", "results", "vshape-killclock-h100-13e52d9-2026-12-06", "b-vshape-results.json")
        with open(p) as f:
            d = json.load(f)
        d["warmed_arena"]["cycles"]["kills"].pop()
        with open(p, "w") as f:
            json.dump(d, f)
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("kc.arena.n is '| 9 |'", r.stderr)

    def test_a_reap_figure_written_as_the_kill_figure_fails(self):
        # the arena's reap-based median (0.25 s) in the kill column
        self.edit("docs/benchmarks.md", "| ≤ 0.40 s (0.52) | 20 |", "| ≤ 0.25 s (0.32) | 20 |")
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("arena20.kill", r.stderr)

    def test_a_row_whose_raw_file_is_missing_fails(self):
        os.remove(os.path.join(self.root, "bench", "results", "standby-h200-2026-12-01.json"))
        r = run(self.root)
        self.assertEqual(r.returncode, 1)
        self.assertIn("raw file bench/results/standby-h200-2026-12-01.json does not exist", r.stderr)


if __name__ == "__main__":
    SRC = os.path.abspath(sys.argv.pop(1))
    unittest.main()
