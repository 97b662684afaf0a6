#!/usr/bin/env python3
"""Tests of the cases2 scripts that need no GPU: the registry and its candidate grid, the
bisection of scale factors, process timeouts, and dry runs of both entry-point scripts (smoke
mode) against the fake torch / nvidia-smi / vramscope in mock/. A dry run checks control flow,
argument handling, file naming, truth files and archives; its numbers are the mock's, not real.

    python3 scripts/cases2/test_cases2.py
"""
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cases as C  # noqa: E402
from common import Job, command_line, job_argv  # noqa: E402


def mock_env(out):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.join(HERE, "mock")
    env["PATH"] = os.path.join(HERE, "mock", "bin") + os.pathsep + env["PATH"]
    env["VRAMSCOPE"] = os.path.join(HERE, "mock", "bin", "vramscope")
    env["OUT"] = out
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def members(archive):
    with tarfile.open(archive, "r:xz") as tar:
        return {m.name: m for m in tar.getmembers()}, tar


def load_json(archive, name):
    with tarfile.open(archive, "r:xz") as tar:
        return json.load(tar.extractfile(name))


class Registry(unittest.TestCase):
    def test_registry_is_well_formed(self):
        C.validate_registry()
        self.assertGreaterEqual(len(C.CASES) + len(C.LIVE_CASES), 20)
        kinds = {c["expected"] for c in C.CASES.values() if c["kind"] == "oom"}
        for needed in (C.CAPACITY, C.FRAGMENTATION, C.MEMORY_CAP, C.OTHER_PROCESS, C.LEAK):
            self.assertIn(needed, kinds)

    def test_max_split_values_surround_the_request(self):
        self.assertEqual(C.max_split_values(1536 * C.MiB, "around"), [512, 1024, 2048, 4096])
        self.assertEqual(C.max_split_values(1536 * C.MiB, "p"), [1024])
        # 36 MiB: 16 is below what PyTorch accepts (> 20), so it is left out.
        self.assertEqual(C.max_split_values(36 * C.MiB, "around"), [32, 64, 128])
        self.assertEqual(C.max_split_values(None, "around"), [])

    def test_candidates_are_real_knobs_with_structured_changes(self):
        case = C.CASES["cap_growth"]
        cands = {c["id"]: c for c in C.candidates("cap_growth", case, 36 * C.MiB)}
        # The baseline setting stays on when another is added.
        self.assertEqual(cands["max_split_size_mb_32"]["conf"],
                         "expandable_segments:True,max_split_size_mb:32")
        self.assertEqual(cands["cap_x8"]["cap_bytes"], 32 * C.GiB)
        self.assertIsNone(cands["no_cap"]["cap_bytes"])
        self.assertEqual(cands["no_cap"]["change"], {"kind": "cap", "factor": None,
                                                    "cap_bytes": None})
        self.assertEqual(cands["batch_x0.5"]["change"],
                         {"kind": "scale", "knob": "batch", "factor": 0.5})
        self.assertTrue(cands["fix_fix-leak"]["fix"])
        rounds = [c["round"] for c in C.candidates("cap_growth", case, 36 * C.MiB)]
        self.assertEqual(rounds, sorted(rounds), "round A runs before round B")
        other = {c["id"]: c for c in C.candidates("other_process_big",
                                                  C.CASES["other_process_big"], GiB)}
        self.assertFalse(other["other_process_gone"]["hog"])
        self.assertTrue(other["expandable_segments"]["hog"])

    def test_smoke_keeps_one_candidate_per_case_and_covers_every_kind_of_knob(self):
        kinds = set()
        for name, case in C.CASES.items():
            cands = C.candidates(name, case, 256 * C.MiB, smoke=True)
            self.assertLessEqual(len(cands), 1, name)
            kinds |= {c["change"]["kind"] for c in cands}
        self.assertEqual(kinds, {"alloc-conf", "cap", "scale", "code-fix"})

    def test_scale_bisection(self):
        self.assertEqual(C.scale_plan({}), (0.5, None))
        self.assertEqual(C.scale_plan({0.5: "completed"}), (0.75, None))
        self.assertEqual(C.scale_plan({0.5: "completed", 0.75: "oom"}), (0.25, "completed"))
        self.assertIsNone(C.scale_plan({0.5: "completed", 0.75: "oom", 0.25: "completed"}))
        self.assertEqual(C.scale_plan({0.5: "oom"}), (0.25, None))
        self.assertEqual(C.scale_plan({0.5: "oom", 0.25: "oom"}), (0.75, "oom"))
        # A broken run implies nothing about the others.
        self.assertEqual(C.scale_plan({0.5: "error"}), (0.25, None))
        self.assertIsNone(C.scale_plan({0.5: "error", 0.25: "oom"}))


GiB = C.GiB


class Processes(unittest.TestCase):
    def test_a_hanging_job_is_killed_at_its_timeout(self):
        with tempfile.TemporaryDirectory() as d:
            job = Job([sys.executable, "-c", "import time; time.sleep(60)"], os.path.join(d, "log"))
            start = time.time()
            job.wait(0.5)
            self.assertTrue(job.timed_out)
            self.assertIsNotNone(job.rc)
            self.assertLess(time.time() - start, 10)

    def test_command_line_is_what_a_person_types(self):
        argv = job_argv("mlp_train", "/tmp/x/r.json", params={"rows": 4}, cap_bytes=GiB,
                        batch_scale=0.5, wait_go=True)
        text = command_line(argv, "expandable_segments:True")
        self.assertEqual(text, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True python3 "
                               "scripts/cases2/jobs.py mlp_train --result <result.json> "
                               "--params-json '{\"rows\": 4}' --cap-bytes 1073741824 "
                               "--batch-scale 0.5")


class DryRuns(unittest.TestCase):
    """Both entry points in smoke mode against the mocks (fake numbers, real control flow)."""

    @classmethod
    def setUpClass(cls):
        cls.out = tempfile.mkdtemp(prefix="cases2-dry-")
        env = mock_env(cls.out)
        for script in ("run_oom.sh", "run_live.sh"):
            r = subprocess.run(["bash", os.path.join(HERE, script), "--smoke"], env=env,
                               capture_output=True, text=True, timeout=240)
            if r.returncode != 0:
                raise AssertionError(f"{script} failed: {r.stdout[-2000:]} {r.stderr[-2000:]}")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.out, ignore_errors=True)

    def test_oom_archive_has_a_truth_file_for_every_case(self):
        archive = os.path.join(self.out, "cases2-oom-smoke.tar.xz")
        names, _ = members(archive)
        for case in C.CASES:
            self.assertIn(f"cases2-smoke/{case}.truth.json", names)
            self.assertIn(f"cases2-smoke/{case}.log", names)
            self.assertIn(f"cases2-smoke/{case}.smi-gpu.csv", names)
            truth = load_json(archive, f"cases2-smoke/{case}.truth.json")
            self.assertEqual(truth["schema"], "vramscope.case-truth/2")
            self.assertTrue(truth["smoke"])
            self.assertEqual(truth["expected"]["primary_category"], C.CASES[case]["expected"])
            self.assertIn("command", truth["original"])
            self.assertIn(truth["original"]["outcome"], ("oom", "completed"))
            if truth["original"]["outcome"] == "oom":
                self.assertGreater(truth["original"]["oom_requested_bytes"], 0)
                self.assertIn(f"cases2-smoke/{case}.pickle", names)
            for rerun in truth["reruns"]:
                self.assertIn(rerun["change"]["kind"],
                              ("alloc-conf", "cap", "scale", "other-process-gone", "code-fix"))
                self.assertIn(rerun["outcome"], ("completed", "oom", "not-run"))
        self.assertIn("cases2-smoke/summary-oom.md", names)

    def test_other_process_cases_record_the_other_process(self):
        archive = os.path.join(self.out, "cases2-oom-smoke.tar.xz")
        truth = load_json(archive, "cases2-smoke/other_process_big.truth.json")
        self.assertGreater(truth["original"]["other_process_held_bytes"], 0)
        self.assertNotEqual(truth["original"]["other_process_pid"], truth["original"]["pid"])

    def test_live_archive_has_captures_and_smi_logs(self):
        archive = os.path.join(self.out, "cases2-live-smoke.tar.xz")
        names, _ = members(archive)
        for case in C.LIVE_CASES:
            for suffix in (".vramcap", ".smi-gpu.csv", ".smi-apps.csv", ".truth.json"):
                self.assertIn(f"cases2-live-smoke/{case}{suffix}", names)
            truth = load_json(archive, f"cases2-live-smoke/{case}.truth.json")
            self.assertEqual(truth["kind"], "live")
            self.assertTrue(all(j["outcome"] == "completed" for j in truth["jobs"]), truth["jobs"])
        two = load_json(archive, "cases2-live-smoke/live_two_procs.truth.json")
        self.assertEqual(len(two["expected"]["leaking_pids"]), 1)
        self.assertIn("cases2-live-smoke/live_fast_leak.t2s.pickle", names)

    def test_the_logs_come_back_beside_the_archives(self):
        for name in ("cases2-oom-smoke.log", "cases2-live-smoke.log"):
            with open(os.path.join(self.out, name)) as f:
                self.assertIn("== summary", f.read())


if __name__ == "__main__":
    unittest.main(verbosity=2)
