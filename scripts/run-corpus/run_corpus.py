"""Runs corpus cases under `vramscope run --prove` (candidates in its own order until one removes the failure), then confirms the first
recommendation with a separate full run of the program under it (no vramscope), and writes
OUT_DIR/results-<first case>.json with every re-run's outcome (issue 32; docs/run-validation.md).

    python3 scripts/run-corpus/run_corpus.py VRAMSCOPE OUT_DIR CASE [CASE …]

Cases, their caps and the changes a user would declare are in cases.json beside this file.
"""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The cases and their programs (another file for the dry-run test, test_run_corpus.py).
CASES_FILE = os.environ.get("CORPUS_CASES", os.path.join(HERE, "cases.json"))
PROGRAMS = os.path.dirname(os.path.abspath(CASES_FILE))
RUNS_DIR = os.environ.get("CORPUS_RUNS_DIR", "/tmp/corpus-runs")
DEADLINE_SECONDS = float(os.environ.get("CORPUS_DEADLINE_SECONDS", "540"))
STARTED = time.time()
# A re-run's raised cap, as vramscope writes the change: the hook's variable, then the fraction.
RAISED_CAP = "VRAMSCOPE_RUN_MEMORY_FRACTION="


def time_left():
    """Seconds until this call must stop starting work (CORPUS_DEADLINE_SECONDS)."""
    return DEADLINE_SECONDS - (time.time() - STARTED)


def findings_of(report):
    if "findings" in report:
        return report["findings"]
    return report.get("diagnosis", {}).get("findings", [])


def substitute(command, flag, value):
    out = list(command)
    for i, word in enumerate(out):
        if word == flag and i + 1 < len(out):
            out[i + 1] = value
            return out
        if word.startswith(flag + "="):
            out[i] = f"{flag}={value}"
            return out
    return out + [flag, value]


def device_total_gib():
    done = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits",
                           "-i", "0"], capture_output=True, text=True)
    return float(done.stdout.split()[0]) / 1024.0


def apply_change(change, command, cap_flag=None):
    """The command and environment of a change as vramscope writes it: NAME=VALUE or --flag value.
    A raised cap (VRAMSCOPE_RUN_MEMORY_FRACTION=F, which only the hook applies) becomes what a
    user edits, the program's own cap: its `cap_flag` set to F x the card."""
    env = dict(os.environ)
    if change.startswith(RAISED_CAP) and cap_flag:
        fraction = float(change[len(RAISED_CAP):])
        return substitute(command, cap_flag, str(round(fraction * device_total_gib(), 3))), env
    m = re.fullmatch(r"([A-Z_][A-Z0-9_]*)=(.*)", change)
    if m:
        env[m.group(1)] = m.group(2)
        return command, env
    flag, _, value = change.partition(" ")
    return substitute(command, flag, value), env


def final_json(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.startswith('{"done"')]


def gpu_processes():
    """(pid, MiB) of every process holding GPU memory, from nvidia-smi; none where it is absent."""
    try:
        done = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    found = []
    for line in done.stdout.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 2 and fields[0].isdigit():
            found.append((int(fields[0]), fields[1]))
    return found


def clear_card():
    """Every run must have the card to itself (its ballast takes all free memory but its cap): a
    process left by an earlier run (a timed-out job's children outlive its kill) is waited for,
    then killed. Returns what was found, for the result, so that a run beside one is visible."""
    deadline = time.time() + float(os.environ.get("CORPUS_CLEAR_WAIT_SECONDS", "20"))
    left = gpu_processes()
    while left and time.time() < deadline:
        time.sleep(2)
        left = gpu_processes()
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if left:
        time.sleep(3)
    return [{"pid": pid, "used_mib": mib, "killed": True} for pid, mib in left]


def full_run(command, change, timeout, cap_flag=None):
    """The program to its end under one change, without vramscope: the truth of that change."""
    run_command, env = apply_change(change, command, cap_flag)
    left_before = clear_card()
    t = time.time()
    # Its own process group, so that a timeout stops a multi-process job's children too.
    process = subprocess.Popen(run_command, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        return {"change": change, "command": run_command[1:], "exit": None, "timed_out": True,
                "seconds": round(time.time() - t, 1)}
    return {"change": change, "command": run_command[1:], "exit": process.returncode,
            **({"left_before": left_before} if left_before else {}),
            "seconds": round(time.time() - t, 1), "final": final_json(stdout),
            "out_of_memory": "out of memory" in stderr,
            "stderr_tail": stderr[-400:] if process.returncode else ""}


def doctor(vramscope, folder, keep):
    """What `vramscope diagnose` says of the original run's evidence alone (timeline, log, OOM
    snapshots; no re-runs): the diagnosis a user gets before --prove (issue 35's fresh batch)."""
    cli = [vramscope, "diagnose", "--json"]
    timeline = os.path.join(folder, "timeline.vramcap")
    if os.path.exists(timeline):
        cli += ["--capture", timeline]
    snapshots = sorted(glob.glob(os.path.join(folder, "snapshots", "*oom*.pickle")))
    if snapshots:
        cli += ["--snapshot", *snapshots]
    log = os.path.join(folder, "output.log")
    if os.path.exists(log):
        cli += ["--log", log]
    done = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    with open(os.path.join(keep, "doctor.json"), "w") as f:
        f.write(done.stdout)
    try:
        return json.loads(done.stdout)
    except ValueError:
        return {"error": done.stderr[-1000:]}


def alloc_conf_changes(recommendations):
    """`PYTORCH_CUDA_ALLOC_CONF=…` of each recommendation's action, in order."""
    out = []
    for r in recommendations:
        for line in (r.get("action") or "").splitlines():
            line = line.strip()
            if line.startswith("export PYTORCH_CUDA_ALLOC_CONF="):
                out.append(line[len("export "):])
    return out


def kept_snapshots(paths):
    """The OOM snapshots worth bringing back, at most two: each process's last (the failure
    that ended it; earlier ones were recovered from, e.g. cuDNN retrying with a smaller
    workspace), then the first of all."""
    def order(path):
        m = re.search(r"pid(\d+)-oom-(\d+)", os.path.basename(path))
        return (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    paths = sorted(paths, key=order)
    last = {}
    for path in paths:
        last[order(path)[0]] = path
    kept = list(last.values())[:2]
    if paths and paths[0] not in kept and len(kept) < 2:
        kept.append(paths[0])
    return kept


def proven_change(first, proof):
    """The change a proven first recommendation names: "Run with CHANGE", or a raised cap
    ("Raise the job's memory cap to F of the GPU", or "Lift … to the whole GPU (fraction F)"),
    which is the re-run that removed the failure under VRAMSCOPE_RUN_MEMORY_FRACTION=F."""
    if not first or first.get("id") != "proven-by-run":
        return None
    title = first.get("title", "")
    if title.startswith("Run with "):
        return title[len("Run with "):]
    for row in proof:
        change = row.get("change", "")
        if (row.get("outcome") == "removed" and change.startswith(RAISED_CAP)
                and change[len(RAISED_CAP):] in title):
            return change
    return None


def run_case(vramscope, out, case):
    command = [sys.executable, os.path.join(PROGRAMS, case["script"]), *case["args"],
               "--cap-gib", str(case["cap_gib"])]
    runs = RUNS_DIR
    cli = [vramscope, "run", "--prove", "--out", runs, "--name", case["case"]]
    left_before = clear_card()
    for vary in case.get("vary", []):
        cli += ["--vary=" + vary]
    for vary in case.get("vary_arg", []):
        cli += ["--vary-arg=" + vary]
    started = time.time()
    done = subprocess.run(cli + ["--", *command], capture_output=True, text=True,
                          timeout=max(30.0, min(400.0, time_left())))
    with open(os.path.join(out, case["case"] + ".vramscope.log"), "w") as f:
        f.write(done.stdout[-20000:] + "\n--- stderr ---\n" + done.stderr[-20000:])
    folders = sorted(glob.glob(os.path.join(runs, "*-" + case["case"])))
    result = {"case": case["case"], "cap_gib": case["cap_gib"], "command": command[1:],
              "exit": done.returncode,
              "seconds": round(time.time() - started, 1)}
    if left_before:
        result["left_before"] = left_before
    if not folders:
        result["error"] = "no run folder"
        return result
    folder = folders[-1]
    keep = os.path.join(out, case["case"])
    os.makedirs(keep, exist_ok=True)
    for name in ["run.json", "report.json", "report.html", "output.log", "timeline.vramcap"]:
        if os.path.exists(os.path.join(folder, name)):
            subprocess.run(["cp", os.path.join(folder, name), keep])
    for snapshot in kept_snapshots(glob.glob(os.path.join(folder, "snapshots", "*oom*.pickle"))):
        if os.path.getsize(snapshot) < 48 << 20:
            subprocess.run(["sh", "-c", f"xz -c '{snapshot}' > '{keep}/{os.path.basename(snapshot)}.xz'"])
    with open(os.path.join(folder, "run.json")) as f:
        manifest = json.load(f)
    result["proof"] = manifest.get("proof", [])
    # The end of each re-run's output: why a re-run ended as it did is read there.
    for row in result["proof"]:
        log = os.path.join(folder, row.get("folder", ""), "output.log")
        if row.get("folder") and os.path.exists(log):
            with open(log, errors="replace") as f:
                row["output_tail"] = f.read()[-3000:]
    result["not_recorded"] = manifest.get("not_recorded", [])
    report = {}
    if os.path.exists(os.path.join(folder, "report.json")):
        with open(os.path.join(folder, "report.json")) as f:
            report = json.load(f)
    findings = findings_of(report)
    result["findings"] = [{"category": x.get("category"), "severity": x.get("severity"),
                           "title": x.get("title"),
                           "recommendations": [{"id": r.get("id"), "title": r.get("title"),
                                                "action": r.get("action"),
                                                "verification": r.get("verification")}
                                               for r in x.get("recommendations", [])[:3]]}
                          for x in findings[:4]]
    first = findings[0]["recommendations"][0] if findings and findings[0].get("recommendations") else None
    result["first_recommendation"] = first and {"id": first.get("id"), "title": first.get("title")}
    change = proven_change(first, result["proof"])
    if change:
        result["confirmation"] = full_run(command, change,
                                          max(20.0, min(300.0, time_left() + 30.0)),
                                          case.get("cap_flag"))
    # Issue 35: the diagnosis before any re-run, and the truth of the changes it and the user
    # name that --prove did not get to (it stops at the first that works): one full run each.
    diagnosis = doctor(vramscope, folder, keep)
    findings = findings_of(diagnosis)
    result["doctor"] = [{"category": x.get("category"), "title": x.get("title"),
                         "recommendations": [{"id": r.get("id"), "title": r.get("title"),
                                              "action": r.get("action")}
                                             for r in x.get("recommendations", [])[:3]]}
                        for x in findings[:3]]
    result["doctor_memory"] = [{"snapshot": m.get("snapshot"),
                                "at_failure": (m.get("at_failure") or {}).get("categories"),
                                "at_peak": (m.get("at_peak") or {}).get("categories"),
                                "failing_request": m.get("failing_request")}
                               for m in diagnosis.get("memory_categories", [])[:2]]
    tried = {p.get("change") for p in result["proof"]}
    if "confirmation" in result:
        tried.add(result["confirmation"]["change"])
    wanted = alloc_conf_changes(findings[0].get("recommendations", [])[:2]) if findings else []
    for vary in case.get("vary_arg", []):  # the first value a user declared for each switch
        flag, _, values = vary.partition("=")
        wanted.append(f"{flag} {values.split(',')[0]}")
    result["truth_runs"] = []
    for change in wanted:
        if change in tried or time_left() < 60:
            continue
        tried.add(change)
        result["truth_runs"].append(full_run(command, change, max(20.0, min(300.0, time_left())),
                                             case.get("cap_flag")))
    return result


def main():
    vramscope, out, names = sys.argv[1], sys.argv[2], sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    with open(CASES_FILE) as f:
        cases = {c["case"]: c for c in json.load(f)}
    # Caps from calibrate.py: this call's own calibration, else the one committed beside.
    for path in [os.path.join(out, "calibration.json"), os.path.join(PROGRAMS, "calibration.json")]:
        if os.path.exists(path):
            with open(path) as f:
                for name, calibration in json.load(f).items():
                    if name in cases and "cap_gib" in calibration:
                        cases[name].setdefault("cap_gib", calibration["cap_gib"])
    # One case after another, never two at once: each program's ballast (gpu_size.py) takes all
    # free memory but its cap when it starts, so a second program beside it would get what the
    # first left and see the first's ballast as another process (2026-12-08: four calls void).
    results = []
    for name in names:
        if time_left() < 20:
            results.append({"case": name, "error": "not run: the device call's time ran out"})
        elif "cap_gib" not in cases.get(name, {}):
            results.append({"case": name, "error": "no cap: its calibration failed"})
        else:
            try:
                results.append(run_case(vramscope, out, cases[name]))
            except Exception as error:  # one case's failure must not lose the others' results
                results.append({"case": name, "error": repr(error)})
        print(json.dumps(results[-1])[:1500], flush=True)
        # After every case, whether it ran or not: a call cut short keeps what it learned.
        with open(os.path.join(out, f"results-{names[0]}.json"), "w") as f:
            json.dump(results, f, indent=1)


main()
