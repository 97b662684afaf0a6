"""Dry run of the run corpus's device scripts (calibrate.py, run_corpus.py, smoke_cpu.py) with no GPU, no torch
and no vramscope: a fake job and a fake `vramscope` stand in, so that a mistake in the scripts'
control flow, arguments or result files shows here, not in a device call (device time is scarce).
Numbers from the fakes are made up and mean nothing; what is checked is what the scripts do with
them.

    python3 -B scripts/run-corpus/test_run_corpus.py      # also run by tests/all/run_validation.rs
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

# A job that "runs out of memory" above a batch of 100 unless told to stop being greedy, and
# prints the done-line the corpus programs print.
FAKE_JOB = """
    import argparse, json, os, sys
    p = argparse.ArgumentParser()
    p.add_argument("--cap-gib", type=float, default=0.0)
    p.add_argument("--batch-size", type=int, default=200)
    p.add_argument("--beside-others", default="")  # a marker file: absent, the first run's
    p.add_argument("--then", default="fail")       # fate beside others: fail, or retry
    a = p.parse_args()
    retries = 0
    if a.beside_others and not os.path.exists(a.beside_others):
        open(a.beside_others, "w").close()
        if a.then == "fail":
            sys.stderr.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 9 GiB.\\n")
            sys.exit(1)
        retries, a.batch_size = 1, a.batch_size // 2  # the retry freed cache: a lower peak
    if a.batch_size > 100:
        sys.stderr.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB.\\n")
        sys.exit(1)
    print(json.dumps({"done": True, "peak_allocated_bytes": a.batch_size << 20,
                      "peak_reserved_bytes": a.batch_size << 21, "alloc_retries": retries,
                      "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")}))
"""

# `vramscope run --prove ... -- CMD` and `vramscope diagnose --json ...`, as far as the scripts
# read them: a run folder with run.json (the proof), report.json, an OOM snapshot, the output.
FAKE_VRAMSCOPE = """
    import json, os, subprocess, sys
    args = sys.argv[1:]
    if args[0] == "diagnose":
        assert "--json" in args and "--snapshot" in args and "--log" in args, args
        print(json.dumps({"findings": [{"category": "capacity", "title": "Out of memory",
            "recommendations": [
                {"id": "reduce-batch-size", "title": "Reduce the batch size", "action": "batch_size //= 2"},
                {"id": "expandable-segments", "title": "Expandable segments",
                 "action": "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"}]}],
            "memory_categories": [{"snapshot": "s.pickle",
                "at_failure": {"categories": {"activations": 7, "parameters": 1}},
                "at_peak": {"categories": {"activations": 7, "parameters": 1}},
                "failing_request": {"category": "activations", "in_optimizer_step": False}}]}))
        sys.exit(0)
    assert args[0] == "run" and "--prove" in args, args
    out = args[args.index("--out") + 1]
    name = args[args.index("--name") + 1]
    command = args[args.index("--") + 1:]
    varies = [a.split("=", 1)[1] for a in args if a.startswith("--vary-arg=")]
    folder = os.path.join(out, "20261207T000000Z-" + name)
    os.makedirs(os.path.join(folder, "snapshots"), exist_ok=True)
    original = subprocess.run(command, capture_output=True, text=True)
    with open(os.path.join(folder, "output.log"), "w") as f:
        f.write(original.stdout + original.stderr)
    with open(os.path.join(folder, "snapshots", "pid1-oom-1.pickle"), "wb") as f:
        f.write(b"not a real snapshot")
    with open(os.path.join(folder, "timeline.vramcap"), "wb") as f:
        f.write(b"VRAMCAP")
    proof = [{"change": "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64", "outcome": "ran_out"}]
    for vary in varies:
        flag, values = vary.split("=", 1)
        proof.append({"change": flag + " " + values.split(",")[0], "outcome": "removed"})
    with open(os.path.join(folder, "run.json"), "w") as f:
        json.dump({"proof": proof, "not_recorded": []}, f)
    with open(os.path.join(folder, "report.json"), "w") as f:
        json.dump({"findings": [{"category": "capacity", "severity": "info",
            "title": "Proven by a real run", "recommendations": [
                {"id": "proven-by-run", "title": "Run with " + proof[-1]["change"],
                 "action": "run the job with " + proof[-1]["change"]}]}]}, f)
    sys.exit(original.returncode)
"""


def write(path, text, executable=False):
    with open(path, "w") as f:
        f.write(textwrap.dedent(text).lstrip())
    if executable:
        os.chmod(path, 0o755)


class RunCorpusDryRun(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="run-corpus-test-")
        self.programs = os.path.join(self.tmp, "programs")
        os.makedirs(self.programs)
        write(os.path.join(self.programs, "fake_job.py"), FAKE_JOB)
        self.vramscope = os.path.join(self.tmp, "vramscope")
        write(self.vramscope, "#!" + sys.executable + "\n" + textwrap.dedent(FAKE_VRAMSCOPE),
              executable=True)
        self.cases_file = os.path.join(self.programs, "cases.json")
        with open(self.cases_file, "w") as f:
            json.dump([{"case": "greedy", "script": "fake_job.py", "args": ["--batch-size", "200"],
                        "cap_from": ["--batch-size", "50"], "vary_arg": ["--batch-size=50,25"],
                        "kind": "a fake"}], f)
        self.env = dict(os.environ, CORPUS_CASES=self.cases_file,
                        CORPUS_RUNS_DIR=os.path.join(self.tmp, "runs"),
                        CORPUS_DEADLINE_SECONDS="300")
        self.out = os.path.join(self.tmp, "out")

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def script(self, name, *args):
        done = subprocess.run([sys.executable, "-B", os.path.join(HERE, name), *args],
                              env=self.env, capture_output=True, text=True, timeout=120)
        self.assertEqual(done.returncode, 0, done.stderr)
        return done

    def test_calibration_then_a_case_with_its_confirmation_doctor_and_truth_runs(self):
        self.script("calibrate.py", self.out, "greedy")
        with open(os.path.join(self.out, "calibration.json")) as f:
            calibration = json.load(f)["greedy"]
        # The cap is 1.05 x the peak reserved of the cap_from configuration (batch 50: 100 MiB).
        self.assertEqual(calibration["args"], ["--batch-size", "50"])
        self.assertAlmostEqual(calibration["cap_gib"], round(1.05 * (100 << 20) / 2**30, 3))

        self.script("run_corpus.py", self.vramscope, self.out, "greedy")
        with open(os.path.join(self.out, "results-greedy.json")) as f:
            [case] = json.load(f)
        self.assertEqual(case["case"], "greedy")
        self.assertEqual(case["exit"], 1)  # the original ran out
        self.assertEqual(case["cap_gib"], calibration["cap_gib"])
        self.assertEqual([p["change"] for p in case["proof"]],
                         ["PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64", "--batch-size 50"])
        self.assertEqual(case["first_recommendation"]["id"], "proven-by-run")
        # The proven change, confirmed by a full run of the program under it, without vramscope.
        self.assertEqual(case["confirmation"]["change"], "--batch-size 50")
        self.assertEqual(case["confirmation"]["exit"], 0)
        self.assertIn("--batch-size", case["confirmation"]["command"])
        # The diagnosis before any re-run, and its memory categories.
        self.assertEqual(case["doctor"][0]["category"], "capacity")
        self.assertEqual(case["doctor"][0]["recommendations"][0]["id"], "reduce-batch-size")
        self.assertEqual(case["doctor_memory"][0]["at_failure"]["activations"], 7)
        # Truth runs: the doctor's allocator setting, which --prove did not try; the declared
        # switch's first value was tried already and is not run again.
        self.assertEqual([t["change"] for t in case["truth_runs"]],
                         ["PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"])
        truth = case["truth_runs"][0]
        self.assertEqual(truth["exit"], 1)
        self.assertTrue(truth["out_of_memory"])
        # What the device call brings back for each case.
        kept = sorted(os.listdir(os.path.join(self.out, "greedy")))
        self.assertEqual(kept, ["doctor.json", "output.log", "pid1-oom-1.pickle.xz", "report.json",
                                "run.json", "timeline.vramcap"])

    def test_calibrations_share_the_card_and_one_disturbed_there_is_measured_alone(self):
        marker = os.path.join(self.tmp, "marker-")
        cases = [{"case": "greedy", "script": "fake_job.py", "args": ["--batch-size", "200"],
                  "cap_from": ["--batch-size", "50"]},
                 {"case": "failed_beside", "script": "fake_job.py", "args": [],
                  "cap_from": ["--batch-size", "60", "--beside-others", marker + "a"]},
                 {"case": "retried_beside", "script": "fake_job.py", "args": [],
                  "cap_from": ["--batch-size", "70", "--beside-others", marker + "b", "--then", "retry"]}]
        with open(self.cases_file, "w") as f:
            json.dump(cases, f)
        self.env["CALIBRATE_JOBS"] = "3"
        self.script("calibrate.py", self.out)
        with open(os.path.join(self.out, "calibration.json")) as f:
            calibration = json.load(f)
        # In the cases' order; each cap from its own peak (batch b: 2b MiB reserved).
        self.assertEqual(list(calibration), ["greedy", "failed_beside", "retried_beside"])
        for name, batch in [("greedy", 50), ("failed_beside", 60), ("retried_beside", 70)]:
            self.assertAlmostEqual(calibration[name]["cap_gib"], round(1.05 * (batch << 21) / 2**30, 3))
        self.assertNotIn("failed_beside_others", calibration["greedy"])
        self.assertEqual(calibration["failed_beside"]["failed_beside_others"]["exit"], 1)
        # The first run's retry lowered its peak (35 not 70): the cap is the lone run's.
        self.assertEqual(calibration["retried_beside"]["failed_beside_others"]["peaks"][0]["alloc_retries"], 1)

    def test_the_cpu_smoke_test_runs_every_configuration_small_and_keeps_declared_values(self):
        with open(self.cases_file, "w") as f:
            json.dump([{"case": "greedy", "script": "fake_job.py", "args": ["--batch-size", "200"],
                        "cap_from": ["--batch-size", "50"], "vary_arg": ["--batch-size=150,30"],
                        "smoke_args": ["--batch-size", "20"]},
                       {"case": "graphs", "script": "fake_job.py", "args": [],
                        "smoke_skip": "CUDA graphs need a GPU"}], f)
        done = subprocess.run([sys.executable, "-B", os.path.join(HERE, "smoke_cpu.py")],
                              env=self.env, capture_output=True, text=True, timeout=120)
        lines = done.stdout.splitlines()
        # The own and cap_from configurations shrink to the smoke batch; a declared value stays
        # as declared, and 150 "runs out" in the fake: the smoke test fails.
        self.assertEqual(done.returncode, 1, done.stdout)
        self.assertEqual([line.split(" ")[1:3] for line in lines[:4]],
                         [["[own]", "ok"], ["[cap_from]", "ok"], ["[--batch-size=150]", "FAILED"],
                          ["[--batch-size=30]", "ok"]])
        self.assertIn("--batch-size 20", lines[0])
        self.assertIn("--batch-size 150", lines[2])
        self.assertEqual(lines[4], "graphs: skipped (CUDA graphs need a GPU)")

    def test_a_prove_call_takes_the_caps_committed_beside_the_cases(self):
        # `gpu_corpus.sh prove` does not calibrate: the caps come from calibration.json beside
        # cases.json (scripts/run-corpus/calibration.json), unless the call calibrated itself.
        with open(os.path.join(self.programs, "calibration.json"), "w") as f:
            json.dump({"greedy": {"cap_gib": 0.25}}, f)
        self.script("run_corpus.py", self.vramscope, self.out, "greedy")
        with open(os.path.join(self.out, "results-greedy.json")) as f:
            [case] = json.load(f)
        self.assertEqual(case["cap_gib"], 0.25)
        self.assertEqual(case["command"][-2:], ["--cap-gib", "0.25"])
        self.assertEqual(case["exit"], 1)

    def test_a_process_left_on_the_card_is_killed_and_recorded_before_a_run(self):
        # A process that outlived an earlier run (a timed-out job's child) holds GPU memory: the
        # fake nvidia-smi lists it while it lives (a zombie no longer holds memory).
        left = subprocess.Popen(["sleep", "300"])
        self.addCleanup(left.kill)
        bin_dir = os.path.join(self.tmp, "bin")
        os.makedirs(bin_dir)
        write(os.path.join(bin_dir, "nvidia-smi"), "#!" + sys.executable + "\n" + textwrap.dedent(f"""
            import sys
            if any(a.startswith("--query-compute-apps") for a in sys.argv):
                try:
                    state = open("/proc/{left.pid}/stat").read().rsplit(")", 1)[1].split()[0]
                except OSError:
                    state = "gone"
                if state not in ("Z", "gone"):
                    print("{left.pid}, 500")
            """), executable=True)
        with open(os.path.join(self.programs, "calibration.json"), "w") as f:
            json.dump({"greedy": {"cap_gib": 0.25}}, f)
        self.env.update(CORPUS_CLEAR_WAIT_SECONDS="0", PATH=bin_dir + os.pathsep + self.env["PATH"])
        self.script("run_corpus.py", self.vramscope, self.out, "greedy")
        with open(os.path.join(self.out, "results-greedy.json")) as f:
            [case] = json.load(f)
        self.assertEqual(case["left_before"], [{"pid": left.pid, "used_mib": "500", "killed": True}])
        self.assertEqual(left.wait(timeout=10), -9)
        # Later runs of the case found the card clear.
        self.assertNotIn("left_before", case["confirmation"])

    def test_a_case_without_a_cap_is_reported_not_run(self):
        self.script("run_corpus.py", self.vramscope, self.out, "greedy")
        with open(os.path.join(self.out, "results-greedy.json")) as f:
            [case] = json.load(f)
        self.assertEqual(case, {"case": "greedy", "error": "no cap: its calibration failed"})

    def functions(self):
        """The script's functions without its main(): its text up to the call."""
        path = os.path.join(HERE, "run_corpus.py")
        with open(path) as f:
            source = f.read().replace("\nmain()\n", "\n")
        module = type(sys)("run_corpus_under_test")
        module.__file__ = path
        exec(compile(source, path, "exec"), module.__dict__)
        return module

    def test_the_snapshots_kept_are_each_processs_last_then_the_first(self):
        module = self.functions()
        # 26 OOMs of one process (cuDNN recovered from 25): the last ended the job.
        paths = [f"/r/snapshots/pid7-oom-{n}.pickle" for n in [1, 10, 2, 26, 16, 25, 3]]
        self.assertEqual(module.kept_snapshots(paths),
                         ["/r/snapshots/pid7-oom-26.pickle", "/r/snapshots/pid7-oom-1.pickle"])
        two_ranks = ["/r/pid9-oom-2.pickle", "/r/pid8-oom-1.pickle", "/r/pid9-oom-1.pickle"]
        self.assertEqual(module.kept_snapshots(two_ranks), ["/r/pid8-oom-1.pickle", "/r/pid9-oom-2.pickle"])
        self.assertEqual(module.kept_snapshots([]), [])

    def test_a_proven_raised_cap_is_confirmed_by_its_rerun_change(self):
        module = self.functions()
        proof = [{"change": "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:32", "outcome": "ran_out"},
                 {"change": "VRAMSCOPE_RUN_MEMORY_FRACTION=0.032", "outcome": "removed"}]
        first = {"id": "proven-by-run", "title": "Raise the job's memory cap to 0.032 of the GPU"}
        self.assertEqual(module.proven_change(first, proof), "VRAMSCOPE_RUN_MEMORY_FRACTION=0.032")
        self.assertEqual(module.proven_change({"id": "proven-by-run", "title": "Run with --fixed 1"},
                                              proof), "--fixed 1")
        self.assertIsNone(module.proven_change({"id": "reduce-batch-size", "title": "Reduce"}, proof))
        self.assertIsNone(module.proven_change(None, proof))
        lifted = [{"change": "VRAMSCOPE_RUN_MEMORY_FRACTION=1", "outcome": "removed"}]
        first = {"id": "proven-by-run", "title": "Lift the job's memory cap to the whole GPU (fraction 1)"}
        self.assertEqual(module.proven_change(first, lifted), "VRAMSCOPE_RUN_MEMORY_FRACTION=1")

    def test_a_raised_cap_is_confirmed_through_the_programs_cap_flag(self):
        module = self.functions()
        module.device_total_gib = lambda: 80.0
        command = ["python3", "job.py", "--cap-gib", "3"]
        self.assertEqual(module.apply_change("VRAMSCOPE_RUN_MEMORY_FRACTION=0.5", command,
                                             "--cap-gib")[0],
                         ["python3", "job.py", "--cap-gib", "40.0"])
        changed, env = module.apply_change("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
                                           command)
        self.assertEqual(changed, command)
        self.assertEqual(env["PYTORCH_CUDA_ALLOC_CONF"], "expandable_segments:True")
        self.assertEqual(module.apply_change("--batch-size 8", command)[0],
                         command + ["--batch-size", "8"])


if __name__ == "__main__":
    unittest.main()
