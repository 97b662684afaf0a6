"""What both orchestrators share: timestamped progress, job processes with timeouts (each in its
own process group, killed by its own id), nvidia-smi CSV loggers, the archive.

Nothing here imports torch; every GPU touch happens in a job process (jobs.py).
"""
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
JOBS_PY = os.path.join(HERE, "jobs.py")
JOBS_PY_REL = os.path.relpath(JOBS_PY, REPO)

T_START = time.time()
_LOG_FILE = None


def set_log_file(path):
    global _LOG_FILE
    _LOG_FILE = open(path, "a", buffering=1)


def say(msg):
    """One progress line with UTC wall time and seconds since start, to stdout and the run log."""
    line = f"{time.strftime('%H:%M:%S', time.gmtime())} +{time.time() - T_START:6.1f}s  {msg}"
    print(line, flush=True)
    if _LOG_FILE:
        _LOG_FILE.write(line + "\n")


def elapsed():
    return time.time() - T_START


class Deadline:
    """The time budget of a whole script: runs are not started past it, running ones are cut."""

    def __init__(self, seconds):
        self.end = T_START + seconds

    def left(self):
        return self.end - time.time()


def python_exe():
    return os.environ.get("CASES2_PYTHON", sys.executable)


def job_argv(job, result, params=None, cap_bytes=None, card_bytes=None, batch_scale=1.0,
             seq_scale=1.0, fix=False, history=0, snapshot_dir=None, name=None, wait_go=False,
             duration_s=0.0):
    argv = [python_exe(), JOBS_PY, job, "--result", result]
    if params:
        argv += ["--params-json", json.dumps(params, sort_keys=True)]
    if cap_bytes:
        argv += ["--cap-bytes", str(int(cap_bytes))]
    if card_bytes:
        argv += ["--card-bytes", str(int(card_bytes))]
    if batch_scale != 1.0:
        argv += ["--batch-scale", f"{batch_scale:g}"]
    if seq_scale != 1.0:
        argv += ["--seq-scale", f"{seq_scale:g}"]
    if fix:
        argv.append("--fix")
    if snapshot_dir:
        argv += ["--snapshot-dir", snapshot_dir, "--name", name, "--history", str(int(history))]
    if wait_go:
        argv.append("--wait-go")
    if duration_s:
        argv += ["--duration-s", f"{duration_s:g}"]
    return argv


def command_line(argv, conf):
    """The command as a person would type it from the repository root (paths of scratch files
    shown as placeholders)."""
    shown = []
    skip_next = None
    for i, a in enumerate(argv):
        if skip_next == i:
            continue
        if i == 0:
            shown.append("python3")
        elif a == JOBS_PY:
            shown.append(JOBS_PY_REL)
        elif a in ("--result", "--snapshot-dir") and i + 1 < len(argv):
            shown += [a, "<result.json>" if a == "--result" else "<dir>"]
            skip_next = i + 1
        elif a == "--wait-go":
            continue
        else:
            shown.append(shlex.quote(a))
    prefix = f"PYTORCH_CUDA_ALLOC_CONF={shlex.quote(conf)} " if conf else ""
    return prefix + " ".join(shown)


class Job:
    """One job process: stdout and stderr to its log, stdin kept for the 'go' line."""

    def __init__(self, argv, log_path, conf="", extra_env=None):
        env = dict(os.environ)
        env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
        if conf:
            env["PYTORCH_CUDA_ALLOC_CONF"] = conf
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env.update(extra_env or {})
        self.argv = argv
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=self.log,
                                     stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                     start_new_session=True)
        self.started = time.time()
        self.go_at = None
        self.ended = None
        self.rc = None
        self.timed_out = False

    @property
    def pid(self):
        return self.proc.pid

    def go(self):
        self.go_at = time.time()
        try:
            self.proc.stdin.write(b"go\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def close_stdin(self):
        try:
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass

    def poll(self):
        if self.rc is None:
            rc = self.proc.poll()
            if rc is not None:
                self.rc = rc
                self.ended = time.time()
                self.log.close()
        return self.rc

    def kill(self):
        """Kills this job's own process group (it was started in a new session)."""
        self.close_stdin()
        if self.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self.poll()

    def wait(self, timeout_s):
        """Waits up to timeout_s seconds; kills the job past that. Returns the exit code."""
        end = time.time() + max(0.0, timeout_s)
        while self.poll() is None:
            if time.time() >= end:
                self.timed_out = True
                self.kill()
                break
            time.sleep(0.02)
        return self.rc

    def run_s(self):
        start = self.go_at or self.started
        return round((self.ended or time.time()) - start, 2)


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def tail(path, n_chars=600):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n_chars:]
    except OSError:
        return ""


GPU_FIELDS_FULL = ("timestamp,index,name,uuid,pci.bus_id,driver_version,memory.total,"
                   "memory.reserved,memory.used,memory.free,utilization.gpu,utilization.memory,"
                   "temperature.gpu,power.draw,clocks.sm,clocks.mem")
GPU_FIELDS_MIN = "timestamp,index,name,uuid,memory.total,memory.used,memory.free"
APP_FIELDS_FULL = "timestamp,gpu_uuid,gpu_bus_id,pid,process_name,used_memory"
APP_FIELDS_MIN = "timestamp,gpu_uuid,pid,process_name,used_memory"


def smi_ok(args):
    try:
        r = subprocess.run(["nvidia-smi"] + args, capture_output=True, text=True, timeout=20)
        return r.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class SmiFields:
    """The nvidia-smi query fields this driver accepts (the full set, else a minimal one)."""

    def __init__(self):
        self.gpu = GPU_FIELDS_FULL if smi_ok([f"--query-gpu={GPU_FIELDS_FULL}", "--format=csv"]) \
            else GPU_FIELDS_MIN
        self.apps = APP_FIELDS_FULL if smi_ok([f"--query-compute-apps={APP_FIELDS_FULL}",
                                               "--format=csv"]) else APP_FIELDS_MIN


class SmiLoggers:
    """nvidia-smi's own CSV logging (-lms) of the GPU and of its compute processes, to two files."""

    def __init__(self, fields, gpu_csv, apps_csv, interval_ms=250):
        self.procs = []
        self.files = []
        for query, path in ((f"--query-gpu={fields.gpu}", gpu_csv),
                            (f"--query-compute-apps={fields.apps}", apps_csv)):
            f = open(path, "w")
            self.files.append(f)
            try:
                self.procs.append(subprocess.Popen(
                    ["nvidia-smi", query, "--format=csv", "-lms", str(interval_ms)],
                    stdout=f, stderr=subprocess.STDOUT, start_new_session=True))
            except OSError as e:
                f.write(f"nvidia-smi could not start: {e}\n")

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=5)
        for f in self.files:
            f.close()


def nvidia_smi_info():
    """The machine as nvidia-smi sees it (name, driver, memory), for the truth files."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name,uuid,driver_version,memory.total",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    lines = r.stdout.strip().splitlines()
    fields = [x.strip() for x in lines[0].split(",")] if lines else []
    return dict(zip(("gpu", "uuid", "driver", "memory_total"), fields))


def pack(work_dir, archive):
    """work_dir as one .tar.xz (the device returns at most 8 files from $OUT)."""
    tmp = archive + ".tmp"
    with tarfile.open(tmp, "w:xz", preset=6) as tar:
        tar.add(work_dir, arcname=os.path.basename(work_dir.rstrip("/")))
    os.replace(tmp, archive)
    return os.path.getsize(archive)


def human_bytes(n):
    if n is None:
        return "-"
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.2f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n:.2f} GiB"
