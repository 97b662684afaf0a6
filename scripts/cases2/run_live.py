#!/usr/bin/env python3
"""Records the live cases of the second real-case corpus: for each case, one or two jobs run for
about a minute while `vramscope record --interval-ms 250` and nvidia-smi's own CSV logging (GPU
and compute processes, -lms 250) record beside them. One case at a time: a capture sees every
process on the GPU.

    python3 scripts/cases2/run_live.py --work DIR --archive OUT.tar.xz [--smoke]
        [--vramscope .device/bin/vramscope] [--cases a,b]

Per case: <case>.vramcap, <case>.smi-gpu.csv, <case>.smi-apps.csv, <case>.<role>.log per job,
snapshots where the job takes them (with history), <case>.inspect.txt (`vramscope inspect`),
<case>.truth.json. The next case's jobs import torch while the current case records.
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases as C  # noqa: E402
from common import (Deadline, Job, SmiFields, SmiLoggers, command_line, job_argv,  # noqa: E402
                    nvidia_smi_info, pack, read_json, say, set_log_file, tail)

RECORD_LEAD_S = 0.75  # the recorder runs this long before the jobs start
RECORD_TAIL_S = 0.75  # and this long after the last one ends


class LiveCase:
    def __init__(self, runner, name):
        self.name = name
        self.case = C.LIVE_CASES[name]
        self.runner = runner
        smoke = runner.smoke
        self.active_s = C.SMOKE_LIVE_ACTIVE_S if smoke else C.LIVE_ACTIVE_S
        jobs = self.case["smoke_jobs" if smoke else "jobs"]
        self.specs = []
        for i, j in enumerate(jobs):
            role = f"job{i + 1}" if len(jobs) > 1 else "job"
            params = dict(j["params"])
            history = params.get("history", 0)
            result = os.path.join(runner.scratch, f"{name}.{role}.json")
            log = os.path.join(runner.corpus, f"{name}.{role}.log" if len(jobs) > 1 else f"{name}.log")
            snap_name = name if len(jobs) == 1 else f"{name}.{role}"
            snap = ({"history": history, "snapshot_dir": runner.corpus, "name": snap_name}
                    if history else {})
            argv = job_argv(j["job"], result, params=params, wait_go=True,
                            duration_s=self.active_s, **snap)
            self.specs.append({"role": role, "job": j["job"], "params": params, "argv": argv,
                               "result": result, "log": log, "history": history})
        self.jobs = None

    def prepare(self):
        """Starts the jobs' processes: they import torch and wait for 'go'."""
        if self.jobs is None:
            self.jobs = [Job(s["argv"], s["log"]) for s in self.specs]
            self.runner.all_jobs += self.jobs

    def run(self, next_case):
        r = self.runner
        self.prepare()
        capture = os.path.join(r.corpus, f"{self.name}.vramcap")
        say(f"== {self.name}: {len(self.jobs)} job(s) for {self.active_s:g} s")
        loggers = SmiLoggers(r.smi_fields, os.path.join(r.corpus, f"{self.name}.smi-gpu.csv"),
                             os.path.join(r.corpus, f"{self.name}.smi-apps.csv"))
        recorder = None
        record_log = os.path.join(r.scratch, f"{self.name}.record.log")
        if r.vramscope:
            recorder = subprocess.Popen(
                [r.vramscope, "record", "--out", capture, "--interval-ms", "250", "--force",
                 "--duration", f"{self.active_s + 30:g}"],
                stdout=open(record_log, "w"), stderr=subprocess.STDOUT, start_new_session=True)
        t_record = time.time()
        time.sleep(RECORD_LEAD_S)
        t_go = time.time()
        for job in self.jobs:
            job.go()
        if next_case:
            next_case.prepare()
        for job in self.jobs:
            job.wait(max(5.0, t_go + self.active_s + 25 - time.time()))
        t_end = time.time()
        time.sleep(RECORD_TAIL_S)
        record_rc = None
        if recorder:
            os.killpg(recorder.pid, signal.SIGTERM)
            try:
                record_rc = recorder.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(recorder.pid, signal.SIGKILL)
                record_rc = recorder.wait(timeout=5)
        t_stop = time.time()
        loggers.stop()
        inspect = None
        if recorder and os.path.exists(capture):
            out = os.path.join(r.corpus, f"{self.name}.inspect.txt")
            try:
                res = subprocess.run([r.vramscope, "inspect", capture], capture_output=True,
                                     text=True, timeout=60)
                with open(out, "w") as f:
                    f.write(res.stdout + res.stderr)
                inspect = res.returncode
            except (OSError, subprocess.TimeoutExpired) as e:
                with open(out, "w") as f:
                    f.write(f"vramscope inspect failed: {e}\n")
        jobs_out = []
        for spec, job in zip(self.specs, self.jobs):
            res = read_json(spec["result"]) or {}
            jobs_out.append({
                "role": spec["role"], "job": spec["job"], "params": spec["params"],
                "command": command_line(spec["argv"], ""), "pid": res.get("pid", job.pid),
                "outcome": res.get("outcome", "timeout" if job.timed_out else "crash"),
                "exit_code": job.rc, "steps_completed": res.get("steps_completed"),
                "peak_allocated_bytes": res.get("peak_allocated_bytes"),
                "peak_reserved_bytes": res.get("peak_reserved_bytes"),
                "log": os.path.basename(spec["log"]),
                "snapshots": res.get("snapshots", []),
                "history_max_entries": spec["history"],
                "go_unix_ms": int(job.go_at * 1000) if job.go_at else None,
                "end_unix_ms": int(job.ended * 1000) if job.ended else None,
                "device": res.get("device"),
            })
            if not res:
                jobs_out[-1]["log_tail"] = tail(spec["log"])
        leaking = [j["pid"] for j in jobs_out if j["job"] == "live_leak"]
        truth = {
            "schema": "vramscope.case-truth/2",
            "case": self.name,
            "corpus": "cases2-smoke" if r.smoke else "cases2",
            "smoke": r.smoke,
            "kind": "live",
            "expected": {"primary_category": self.case["expected"],
                         "severity": self.case["expected_severity"],
                         "leaking_pids": leaking},
            "description": self.case["description"],
            "construction": "model",
            "machine": r.machine,
            "recording": {
                "vramscope": r.vramscope_version, "interval_ms": 250,
                "record_exit_code": record_rc, "inspect_exit_code": inspect,
                "record_start_unix_ms": int(t_record * 1000), "jobs_go_unix_ms": int(t_go * 1000),
                "jobs_end_unix_ms": int(t_end * 1000), "record_stop_unix_ms": int(t_stop * 1000),
                "active_s": self.active_s,
                "record_log_tail": tail(record_log, 400),
            },
            "artifacts": {
                "capture": f"{self.name}.vramcap" if os.path.exists(capture) else None,
                "smi_gpu_csv": f"{self.name}.smi-gpu.csv",
                "smi_apps_csv": f"{self.name}.smi-apps.csv",
                "inspect": f"{self.name}.inspect.txt" if inspect is not None else None,
                "snapshot_history_settings": {"enabled": "all", "context": "all",
                                              "stacks": "python"},
            },
            "jobs": jobs_out,
        }
        for j in jobs_out:
            for snap in j["snapshots"]:
                stats = os.path.join(r.corpus, snap["file"][:-len(".pickle")] + ".memstats.json")
                snap["memory_stats"] = read_json(stats) or {}
                if os.path.exists(stats):
                    os.remove(stats)
        with open(os.path.join(r.corpus, f"{self.name}.truth.json"), "w") as f:
            json.dump(truth, f, indent=1)
        size = os.path.getsize(capture) if os.path.exists(capture) else 0
        say(f"   {self.name}: jobs {[j['outcome'] for j in jobs_out]}, capture {size} bytes "
            f"(record exit {record_rc}), {t_end - t_go:.1f} s active, "
            f"{t_stop - t_record:.1f} s recorded")
        return truth


class Runner:
    def __init__(self, args):
        self.args = args
        self.smoke = args.smoke
        self.deadline = Deadline(args.deadline_s)
        self.work = os.path.abspath(args.work)
        self.corpus = os.path.join(self.work, "cases2-live-smoke" if self.smoke else "cases2-live")
        self.scratch = os.path.join(self.work, "scratch")
        for d in (self.corpus, self.scratch):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        set_log_file(os.path.join(self.corpus, "run-live.log"))
        self.names = [n for n in C.LIVE_CASES if not args.cases or n in args.cases.split(",")]
        self.all_jobs = []
        self.vramscope = os.path.abspath(args.vramscope) if os.access(args.vramscope, os.X_OK) else None
        self.vramscope_version = None

    def run(self):
        C.validate_registry()
        say(f"cases2 live corpus, {'SMOKE' if self.smoke else 'full'} mode, {len(self.names)} cases, "
            f"budget {self.args.deadline_s:.0f} s")
        if self.vramscope:
            try:
                v = subprocess.run([self.vramscope, "--version"], capture_output=True, text=True,
                                   timeout=20)
                self.vramscope_version = (v.stdout + v.stderr).strip()
            except (OSError, subprocess.TimeoutExpired) as e:
                self.vramscope_version = f"--version failed: {e}"
            say(f"vramscope: {self.vramscope} ({self.vramscope_version})")
        else:
            say(f"!! no executable vramscope at {self.args.vramscope}: recording nvidia-smi only")
        self.machine = nvidia_smi_info()
        say(f"machine: {self.machine}")
        self.smi_fields = SmiFields()
        cases = [LiveCase(self, n) for n in self.names]
        rows = []
        try:
            for i, case in enumerate(cases):
                need = case.active_s + RECORD_LEAD_S + RECORD_TAIL_S + 1
                if self.deadline.left() < need:
                    say(f"!! {case.name}: not recorded, {self.deadline.left():.0f} s left of the budget")
                    rows.append((case.name, "not recorded", "-", "-"))
                    continue
                t = case.run(cases[i + 1] if i + 1 < len(cases) else None)
                cap = t["artifacts"]["capture"]
                rows.append((case.name, ", ".join(j["outcome"] for j in t["jobs"]),
                             cap or "NO CAPTURE", t["expected"]["primary_category"]))
        finally:
            for job in self.all_jobs:
                job.close_stdin()
                job.kill()
            lines = ["| case | jobs | capture | expected |", "| --- | --- | --- | --- |"]
            lines += ["| " + " | ".join(r) + " |" for r in rows]
            with open(os.path.join(self.corpus, "summary-live.md"), "w") as f:
                f.write("\n".join(lines) + "\n")
            say("== summary")
            for line in lines:
                print(line, flush=True)


def _stop(signum, frame):
    raise SystemExit(128 + signum)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/cases2-live")
    ap.add_argument("--archive")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--deadline-s", type=float, help="time budget (default 262 s, smoke 50 s)")
    ap.add_argument("--vramscope", default=os.environ.get("VRAMSCOPE", ".device/bin/vramscope"))
    ap.add_argument("--cases")
    args = ap.parse_args()
    if args.deadline_s is None:
        args.deadline_s = 50.0 if args.smoke else 262.0
    # `timeout` (or the lead) stopping this script must still kill the jobs and pack the archive.
    signal.signal(signal.SIGTERM, _stop)
    runner = Runner(args)
    try:
        runner.run()
    finally:
        if args.archive:
            size = pack(runner.corpus, args.archive)
            say(f"archive {args.archive}: {size / 1e6:.2f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
