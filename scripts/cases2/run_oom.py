#!/usr/bin/env python3
"""Builds the OOM (and no-OOM snapshot) cases of the second real-case corpus and re-runs every
failed case, for real and each in a fresh process, under a grid of candidate fixes.

    python3 scripts/cases2/run_oom.py --work DIR --archive OUT.tar.xz [--smoke] [--cases a,b]

Order of work (each stage within the script's time budget, --deadline-s):
 1. the original run of every case, one at a time (nothing else on the GPU, so the OOM message,
    the snapshot and the nvidia-smi logs see only this job, and another process where the case
    has one); cases with another process re-run their candidates right away, in the same
    session of that other process;
 2. the re-runs of capped cases, many at once (each is held under its cap, so they cannot
    disturb each other while their caps fit in the card together);
 3. the re-runs of whole-card cases, one at a time: round A (the fixes most likely to be
    recommended first) of every case, then round B; batch/sequence factors are bisected (0.5,
    then 0.75 or 0.25) with monotonic reasoning recorded as implied, not as run.
The next exclusive job is started while the current one runs (it imports torch and waits for
'go' on stdin), so imports cost no GPU time. Every job has a timeout; a failing case never stops
the others. At the end: <case>.truth.json per case, summary.md, and one .tar.xz of it all.
"""
import argparse
import json
import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cases as C  # noqa: E402
from common import (Deadline, Job, SmiFields, SmiLoggers, command_line, human_bytes,  # noqa: E402
                    job_argv, nvidia_smi_info, pack, read_json, say, set_log_file, tail)

GiB = C.GiB
MiB = C.MiB
MIN_START_S = 6.0  # no new run starts with less time left than this


def case_params(case, smoke):
    params = dict(case["params"])
    if smoke:
        params.update(case["smoke_params"])
    return params


def case_cap(case, smoke):
    if smoke:
        return case.get("smoke_cap_bytes", case.get("cap_bytes"))
    return case.get("cap_bytes")


def hog_params(case, smoke):
    if "hog_leave_free_bytes" not in case and "hog_bytes_fraction" not in case:
        return None
    if smoke:
        return {"bytes": C.SMOKE_HOG_BYTES}
    if "hog_bytes_fraction" in case:
        return {"fraction_of_total": case["hog_bytes_fraction"]}
    return {"leave_free_bytes": case["hog_leave_free_bytes"]}


class Spec:
    """One run of one case: the original (with artifacts) or a candidate re-run."""

    def __init__(self, runner, name, cand, original):
        case = C.CASES[name]
        smoke = runner.smoke
        self.name = name
        self.cand = cand
        self.original = original
        self.id = "original" if original else cand["id"]
        self.key = f"{name}/{self.id}"
        self.case = case
        params = case_params(case, smoke)
        if not original:
            params.update(runner.resolved.get(name, {}))
        self.params = params
        self.conf = C.merge_conf(case.get("base_conf"), None) if original else cand["conf"]
        self.cap_bytes = case_cap(case, smoke) if original else cand["cap_bytes"]
        self.card_bytes = (case.get("smoke_card_bytes", C.SMOKE_CARD_BYTES)
                           if smoke and case["whole_card"] else None)
        self.hog = hog_params(case, smoke) if (original or cand["hog"]) else None
        self.batch_scale = 1.0 if original else cand["batch_scale"]
        self.seq_scale = 1.0 if original else cand["seq_scale"]
        self.fix = False if original else cand["fix"]
        self.timeout_s = 30.0 if smoke else float(case["timeout_s"])
        history = min(case["history"], 500) if smoke else case["history"]
        if original:
            self.log_path = os.path.join(runner.corpus, f"{name}.log")
            self.result_path = os.path.join(runner.scratch, f"{name}.original.json")
            snap = {"history": history, "snapshot_dir": runner.corpus, "name": name}
            self.smi = (os.path.join(runner.corpus, f"{name}.smi-gpu.csv"),
                        os.path.join(runner.corpus, f"{name}.smi-apps.csv"))
        else:
            rdir = os.path.join(runner.corpus, "reruns", name)
            os.makedirs(rdir, exist_ok=True)
            self.log_path = os.path.join(rdir, f"{self.id}.log")
            self.result_path = os.path.join(runner.scratch, f"{name}.{self.id}.json")
            snap = {}
            self.smi = None
        self.argv = job_argv(case["job"], self.result_path, params=params, cap_bytes=self.cap_bytes,
                             card_bytes=self.card_bytes, batch_scale=self.batch_scale,
                             seq_scale=self.seq_scale, fix=self.fix,
                             wait_go=original or (case["whole_card"] and not smoke), **snap)
        mem_need = case.get("need_bytes", 0)
        self.mem_bytes = (min(self.cap_bytes, mem_need) if self.cap_bytes else mem_need) + GiB

    def command(self):
        return command_line(self.argv, self.conf)


class Runner:
    def __init__(self, args):
        self.args = args
        self.smoke = args.smoke
        self.deadline = Deadline(args.deadline_s)
        self.work = os.path.abspath(args.work)
        self.corpus = os.path.join(self.work, "cases2-smoke" if self.smoke else "cases2")
        self.scratch = os.path.join(self.work, "scratch")
        for d in (self.corpus, self.scratch):
            shutil.rmtree(d, ignore_errors=True)
            os.makedirs(d)
        set_log_file(os.path.join(self.corpus, "run-oom.log"))
        self.names = [n for n in C.CASES if not args.cases or n in args.cases.split(",")]
        self.records = {}   # name -> {"original": rec, "reruns": [rec, ...]}
        self.resolved = {}  # name -> parameters resolved by the original run
        self.prepared = {}  # key -> Job started early (waiting for 'go')
        self.hog = None     # (params json, Job)
        self.hog_info = None
        self.all_jobs = []
        self.smi_fields = None
        self.total_bytes = None

    # ------------------------------------------------------------------ processes
    def spawn(self, spec):
        job = Job(spec.argv, spec.log_path, conf=spec.conf)
        self.all_jobs.append(job)
        return job

    def prepare(self, spec):
        """Starts spec's process early: it imports torch and waits for 'go'."""
        if spec is not None and spec.key not in self.prepared and "--wait-go" in spec.argv:
            self.prepared[spec.key] = self.spawn(spec)

    def ensure_hog(self, params):
        key = json.dumps(params, sort_keys=True) if params else None
        if self.hog and self.hog[0] == key:
            return True
        if self.hog:
            say(f"    other process (pid {self.hog[1].pid}) stops")
            self.hog[1].close_stdin()
            self.hog[1].wait(15)
            self.hog = None
        if not params:
            return True
        result = os.path.join(self.scratch, f"hog.{len(self.all_jobs)}.json")
        log = os.path.join(self.scratch, f"hog.{len(self.all_jobs)}.log")
        job = Job(job_argv("hog", result, params=params), log)
        self.all_jobs.append(job)
        end = time.time() + 90
        while time.time() < end and job.poll() is None:
            text = tail(log, 4000)
            if "HOG READY" in text and text.split("HOG READY", 1)[1].count("\n"):
                words = text.split("HOG READY", 1)[1].split()
                self.hog = (key, job)
                self.hog_info = {"pid": int(words[1]), "held_bytes": int(words[3])}
                say(f"    other process (pid {job.pid}) holds {human_bytes(int(words[3]))}")
                return True
            time.sleep(0.05)
        say(f"    !! the other process did not get ready: {tail(log)!r}")
        job.kill()
        return False

    def cleanup(self):
        for job in self.all_jobs:
            job.close_stdin()
            job.kill()

    # ------------------------------------------------------------------ one run
    def run_exclusive(self, spec, next_spec=None):
        job = self.prepared.pop(spec.key, None)
        if self.deadline.left() < MIN_START_S:
            if job:
                job.kill()
            return self.record(spec, None, note="not run: the time budget was used up")
        if not self.ensure_hog(spec.hog):
            if job:
                job.kill()
            return self.record(spec, None, note="not run: the other process could not start")
        if job is None:
            job = self.spawn(spec)
        loggers = None
        pause = 0.1 if self.smoke else 0.3
        if spec.smi:
            loggers = SmiLoggers(self.smi_fields, *spec.smi)
            time.sleep(pause)
        job.go()
        self.prepare(next_spec)
        job.wait(min(spec.timeout_s, max(3.0, self.deadline.left())))
        if loggers:
            time.sleep(pause)
            loggers.stop()
        return self.record(spec, job)

    def record(self, spec, job, note=None, implied=None):
        result = read_json(spec.result_path) if job else None
        rec = {
            "id": spec.id,
            "command": spec.command(),
            "alloc_conf": spec.conf,
            "cap_bytes": spec.cap_bytes,
            "batch_scale": spec.batch_scale,
            "seq_scale": spec.seq_scale,
            "fix": spec.fix,
            "other_process": bool(spec.hog),
        }
        if spec.card_bytes:
            rec["smoke_card_bytes"] = spec.card_bytes
        if spec.hog and job is not None and self.hog_info:
            rec["other_process_pid"] = self.hog_info["pid"]
            rec["other_process_held_bytes"] = self.hog_info["held_bytes"]
        if not spec.original:
            rec["round"] = spec.cand["round"]
            rec["change"] = spec.cand["change"]
        if job is None:
            rec["outcome"] = "not-run"
            if implied:
                rec["implied_outcome"] = implied
        elif result is None:
            rec["outcome"] = "timeout" if job.timed_out else "crash"
            rec["exit_code"] = job.rc
            rec["log_tail"] = tail(spec.log_path)
        else:
            rec["outcome"] = result["outcome"]
            rec["exit_code"] = job.rc
            for key in ("error", "phase", "steps_completed", "peak_allocated_bytes",
                        "peak_reserved_bytes", "num_ooms", "num_alloc_retries", "pid"):
                rec[key] = result.get(key)
            rec["oom_requested_bytes"] = (result.get("oom") or {}).get("requested_bytes")
            rec["wall_s"] = job.run_s()
            rec["init_s"] = result.get("init_s")
            rec["import_s"] = result.get("import_s")
            if result["outcome"] == "error":
                rec["log_tail"] = tail(spec.log_path)
        if note:
            rec["note"] = note
        if spec.original:
            rec["result"] = result
        entry = self.records.setdefault(spec.name, {"original": None, "reruns": []})
        if spec.original:
            entry["original"] = rec
            if result:
                self.resolved[spec.name] = result.get("resolved") or {}
                if not self.total_bytes:
                    self.total_bytes = result["device"]["total_bytes"]
        else:
            entry["reruns"].append(rec)
        what = "original" if spec.original else f"{spec.id:<34}"
        extra = ""
        if rec.get("oom_requested_bytes"):
            extra = f" (request {human_bytes(rec['oom_requested_bytes'])}, {rec.get('phase')})"
        elif rec["outcome"] == "completed":
            extra = f" (peak reserved {human_bytes(rec.get('peak_reserved_bytes'))})"
        if rec.get("implied_outcome"):
            extra = f" (implied {rec['implied_outcome']}: {note})"
        elif note and rec["outcome"] == "not-run":
            extra = f" ({note})"
        if rec["outcome"] in ("error", "crash", "timeout"):
            extra += f"\n        log tail: {rec.get('log_tail', '')[-300:]!r}"
        say(f"  {spec.name:<22} {what} -> {rec['outcome']}{extra}"
            + (f" [{rec['wall_s']} s]" if rec.get("wall_s") is not None else ""))
        return rec

    # ------------------------------------------------------------------ stages
    def candidates_of(self, name):
        rec = self.records.get(name, {}).get("original")
        case = C.CASES[name]
        if case["kind"] != "oom" or not rec or rec["outcome"] != "oom":
            return []
        return C.candidates(name, case, rec.get("oom_requested_bytes"), smoke=self.smoke)

    def scale_group(self, name, group_cands, steps):
        """Runs up to `steps` steps of the bisection of one scale group of one case (every
        factor directly when the group is not the full 0.5 / 0.75 / 0.25 set, as in smoke)."""
        by_factor = {c["change"]["factor"]: c for c in group_cands}
        done = {}
        for r in self.records[name]["reruns"]:
            for f, c in by_factor.items():
                if r["id"] == c["id"]:
                    done[f] = r.get("implied_outcome") or r["outcome"]
        for _ in range(steps):
            if self.deadline.left() < MIN_START_S:
                return
            if sorted(by_factor) == [0.25, 0.5, 0.75]:
                plan = C.scale_plan(done)
            else:
                plan = next(((f, None) for f in sorted(by_factor, reverse=True) if f not in done), None)
            if plan is None:
                return
            factor, implied = plan
            spec = Spec(self, name, by_factor[factor], False)
            if implied:
                basis = ("0.5 completed, a smaller factor needs less" if implied == "completed"
                         else "0.5 ran out of memory, a larger factor needs more")
                rec = self.record(spec, None, note=f"not run: {basis}", implied=implied)
            else:
                rec = self.run_exclusive(spec)
            done[factor] = rec.get("implied_outcome") or rec["outcome"]

    def run_cands(self, name, cands, group_steps):
        """Runs the candidates without a group in order, then bisects their scale groups."""
        everything = self.candidates_of(name)
        specs = [Spec(self, name, c, False) for c in cands if not c["group"]]
        for i, spec in enumerate(specs):
            self.run_exclusive(spec, specs[i + 1] if i + 1 < len(specs) else None)
        for group in sorted({c["group"] for c in cands if c["group"]}):
            self.scale_group(name, [c for c in everything if c["group"] == group], group_steps)

    def originals(self):
        say(f"== 1. original runs ({len(self.names)} cases, one at a time)")
        specs = [Spec(self, n, None, True) for n in self.names]
        for i, spec in enumerate(specs):
            nxt = specs[i + 1] if i + 1 < len(specs) else None
            if spec.hog:
                # The other process's session: the original, then every candidate that keeps
                # it, then those without it.
                self.run_exclusive(spec)
                cands = self.candidates_of(spec.name)
                self.run_cands(spec.name, [c for c in cands if c["hog"]], 3)
                self.run_cands(spec.name, [c for c in cands if not c["hog"]], 3)
                self.ensure_hog(None)
                self.prepare(nxt)
            else:
                self.run_exclusive(spec, nxt)
        self.ensure_hog(None)

    def concurrent(self):
        specs = []
        for name in self.names:
            if not C.CASES[name]["whole_card"]:
                specs += [Spec(self, name, c, False) for c in self.candidates_of(name)]
        self.run_parallel(specs, "2. re-runs of capped cases")

    def run_parallel(self, specs, title):
        """Runs specs side by side, as many as fit in the card (each under its cap)."""
        if not specs:
            return
        total = self.total_bytes or 139 * GiB
        budget = max(4 * GiB, total - 10 * GiB)
        parallel = self.args.parallel
        say(f"== {title}: {len(specs)} runs, up to {parallel} at once within {human_bytes(budget)}")
        pending = list(specs)
        running = []
        while pending or running:
            while pending and len(running) < parallel:
                if self.deadline.left() < MIN_START_S:
                    for spec in pending:
                        self.record(spec, None, note="not run: the time budget was used up")
                    pending = []
                    break
                used = sum(s.mem_bytes for s, _ in running)
                fit = next((s for s in pending if used + s.mem_bytes <= budget), None)
                if fit is None:
                    break
                pending.remove(fit)
                running.append((fit, self.spawn(fit)))
            for spec, job in list(running):
                over = time.time() - job.started > spec.timeout_s + 20
                if job.poll() is not None or over or self.deadline.left() < 0:
                    if job.poll() is None:
                        job.timed_out = True
                        job.kill()
                    running.remove((spec, job))
                    self.record(spec, job)
            time.sleep(0.05)

    def exclusive_reruns(self):
        names = [n for n in self.names
                 if C.CASES[n]["whole_card"] and not hog_params(C.CASES[n], self.smoke)]
        if self.smoke:
            # Smoke runs hold every whole-card job under a small virtual card, so they may run
            # side by side (the one-at-a-time path is the originals' own).
            self.run_parallel([Spec(self, n, c, False) for n in names for c in self.candidates_of(n)],
                              "3. smoke re-runs of whole-card cases")
            return
        say(f"== 3. re-runs of whole-card cases, one at a time ({len(names)} cases)")
        for rnd, steps in (("A", 1), ("B", 2)):
            say(f"-- round {rnd}")
            for name in names:
                self.run_cands(name, [c for c in self.candidates_of(name) if c["round"] == rnd],
                               steps)

    # ------------------------------------------------------------------ output
    def truth(self, name):
        case = C.CASES[name]
        entry = self.records.get(name, {"original": None, "reruns": []})
        orig = entry["original"] or {}
        result = orig.pop("result", None) or {}
        memstats = {}
        artifacts = {"log": f"{name}.log"}
        for snap in result.get("snapshots", []):
            base = snap["file"][:-len(".pickle")]
            stats = read_json(os.path.join(self.corpus, base + ".memstats.json"))
            if stats is not None:
                os.remove(os.path.join(self.corpus, base + ".memstats.json"))
            if snap["tag"] is None:
                artifacts["snapshot"] = snap["file"]
                artifacts["snapshot_at"] = {k: snap[k] for k in ("phase", "steps_completed", "t_s")}
                memstats = stats or {}
            else:
                artifacts.setdefault("extra_snapshots", []).append(
                    {"file": snap["file"], "tag": snap["tag"], "phase": snap["phase"],
                     "steps_completed": snap["steps_completed"], "t_s": snap["t_s"],
                     "memory_stats": stats or {}})
        history = min(case["history"], 500) if self.smoke else case["history"]
        artifacts["snapshot_has_history"] = history > 0
        artifacts["history_max_entries"] = history
        artifacts["history_settings"] = ({"enabled": "all", "context": "all", "stacks": "python"}
                                         if history else None)
        artifacts["smi_gpu_csv"] = f"{name}.smi-gpu.csv"
        artifacts["smi_apps_csv"] = f"{name}.smi-apps.csv"
        artifacts["rerun_logs"] = f"reruns/{name}/"
        reruns = entry["reruns"]
        removed = [r["id"] for r in reruns if r["outcome"] == "completed"]
        still = [r["id"] for r in reruns if r["outcome"] == "oom"]
        return {
            "schema": "vramscope.case-truth/2",
            "case": name,
            "corpus": "cases2-smoke" if self.smoke else "cases2",
            "smoke": self.smoke,
            "kind": case["kind"],
            "expected": {"primary_category": case["expected"],
                         "original_outcome": "oom" if case["kind"] == "oom" else "completed"},
            "description": case["description"],
            "construction": case["construction"],
            "job": {"script": "scripts/cases2/jobs.py", "name": case["job"],
                    "params": {**case_params(case, self.smoke), **self.resolved.get(name, {})},
                    "resolved_at_run_time": self.resolved.get(name, {})},
            "baseline": {"alloc_conf": C.merge_conf(case.get("base_conf"), None),
                         "cap_bytes": case_cap(case, self.smoke),
                         "other_process": hog_params(case, self.smoke),
                         "batch_scale": 1.0, "seq_scale": 1.0},
            "device": result.get("device"),
            "machine": self.machine,
            "original": orig,
            "artifacts": artifacts,
            "memory_stats_at_snapshot": memstats,
            "reruns": reruns,
            "removed_the_failure": removed,
            "still_out_of_memory": still,
        }

    def write_outputs(self):
        rows = []
        for name in self.names:
            t = self.truth(name)
            with open(os.path.join(self.corpus, f"{name}.truth.json"), "w") as f:
                json.dump(t, f, indent=1, sort_keys=False)
            o = t["original"]
            ok = o.get("outcome") == t["expected"]["original_outcome"]
            rows.append((name, t["expected"]["primary_category"], o.get("outcome", "-"),
                         "yes" if ok else "NO", human_bytes(o.get("oom_requested_bytes")),
                         ", ".join(t["removed_the_failure"]) or "-",
                         ", ".join(t["still_out_of_memory"]) or "-",
                         ", ".join(r["id"] for r in t["reruns"]
                                   if r["outcome"] not in ("completed", "oom")) or "-"))
        head = ("case", "expected", "original", "as built", "request", "removed the failure",
                "still OOM", "other (not run / implied / error)")
        lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        with open(os.path.join(self.corpus, "summary-oom.md"), "w") as f:
            f.write(f"# cases2 {'smoke ' if self.smoke else ''}run, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n")
            f.write(json.dumps(self.machine) + "\n\n" + "\n".join(lines) + "\n")
        say("== summary")
        for line in lines:
            print(line, flush=True)
        bad = [r[0] for r in rows if r[3] != "yes"]
        if bad:
            say(f"!! cases whose original run did not behave as built: {', '.join(bad)}")
        timings = [r for e in self.records.values() for r in [e["original"]] + e["reruns"]
                   if r and r.get("init_s") is not None]
        if timings:
            imp = sorted(r["import_s"] for r in timings)
            ini = sorted(r["init_s"] for r in timings)
            say(f"timings over {len(timings)} runs: import median {imp[len(imp) // 2]:.2f} s, "
                f"CUDA init median {ini[len(ini) // 2]:.2f} s")

    def run(self):
        C.validate_registry()
        say(f"cases2 OOM corpus, {'SMOKE' if self.smoke else 'full'} mode, {len(self.names)} cases, "
            f"budget {self.args.deadline_s:.0f} s, work dir {self.work}")
        self.machine = nvidia_smi_info()
        say(f"machine: {self.machine}")
        self.smi_fields = SmiFields()
        say(f"nvidia-smi fields: gpu={self.smi_fields.gpu} apps={self.smi_fields.apps}")
        try:
            self.originals()
            self.concurrent()
            self.exclusive_reruns()
        finally:
            self.cleanup()
            self.write_outputs()


def _stop(signum, frame):
    raise SystemExit(128 + signum)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default="/tmp/cases2-oom")
    ap.add_argument("--archive", help="write WORK's corpus as this .tar.xz")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, one candidate per round")
    ap.add_argument("--deadline-s", type=float, help="time budget (default 245 s, smoke 58 s)")
    ap.add_argument("--cases", help="comma-separated case names (default: all)")
    ap.add_argument("--parallel", type=int, default=12)
    args = ap.parse_args()
    if args.deadline_s is None:
        args.deadline_s = 58.0 if args.smoke else 245.0
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
