"""Tests of vramscope run's sitecustomize hook, with a fake ``torch`` package (no PyTorch, no GPU).

Run: ``python3 -m unittest discover -s assets/python/vramscope_run``

Each test starts child Python processes with ``PYTHONPATH=<this folder>:<fake torch>[:<another
sitecustomize>]``, exactly as ``vramscope run`` starts the user's command, and looks at what they
print and write. The fake torch mimics the parts of ``torch.cuda`` the hook relies on
(``_lazy_call`` queues until ``_lazy_init``, which runs the queue with ``_initialized`` still
False and turns an exception into ``DeferredCudaCallError``) and records every call.
"""

import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))

FAKE_TORCH = {
    "torch/__init__.py": """
        # A stand-in for torch: just what vramscope_run_hook touches.
        from torch import _C
        from torch import cuda
        from torch import optim
    """,
    "torch/optim/__init__.py": """
        from torch.optim import optimizer
        from torch.optim.optimizer import Optimizer
    """,
    "torch/optim/optimizer.py": """
        import os

        _global_step_post_hooks = []


        def register_optimizer_step_post_hook(hook):
            if os.environ.get("FAKE_TORCH_FAIL_STEP_HOOK") == "1":
                raise RuntimeError("fake register failure")
            _global_step_post_hooks.append(hook)


        class Optimizer:
            # As torch.optim.Optimizer's profile_hook_step wrapper: global post-hooks get
            # (optimizer, args, kwargs) after every step.
            def step(self, *args, **kwargs):
                for hook in _global_step_post_hooks:
                    hook(self, args, kwargs)
    """,
    "torch/_C.py": """
        import torch


        def _cuda_attach_out_of_memory_observer(observer):
            cuda = torch.cuda
            # The real one calls lazyInitDevice(CUDA) first (torch/csrc/cuda/Module.cpp).
            cuda.calls.append(("attach_observer", cuda._initialized or cuda._initializing()))
            if cuda._fail("OBSERVER"):
                raise RuntimeError("fake attachOutOfMemoryObserver failure")
            cuda.observers.append(observer)


        def _cuda_isHistoryEnabled():
            kwargs = torch.cuda.record_kwargs
            return bool(kwargs) and kwargs[-1]["enabled"] is not None


        def _fake_oom(device, alloc, device_allocated, device_free):
            # What the caching allocator does when cudaMalloc fails; an observer's exception
            # propagates, as the real binding turns it into a C++ error.
            for observer in torch.cuda.observers:
                observer(device, alloc, device_allocated, device_free)
    """,
    "torch/cuda/__init__.py": """
        import json
        import os
        import threading

        _initialized = False
        _tls = threading.local()
        _queued_calls = []
        init_calls = 0
        calls = []  # (name, cuda initialised or initialising at the call)
        record_kwargs = []
        observers = []
        _stats = {}


        class DeferredCudaCallError(Exception):
            pass


        def _fail(what):
            return os.environ.get("FAKE_TORCH_FAIL_" + what) == "1"


        def _initializing():
            return hasattr(_tls, "is_initializing")


        def is_initialized():
            return _initialized


        def _lazy_call(callable, **kwargs):
            if is_initialized():
                callable()
            else:
                _queued_calls.append((callable, "traceback"))


        def _lazy_init():
            # As torch/cuda/__init__.py: queued calls run after _cuda_init with
            # _tls.is_initializing set and _initialized still False.
            global _initialized, init_calls
            if _initialized or _initializing():
                return
            init_calls += 1
            _tls.is_initializing = True
            try:
                for queued_call, _ in _queued_calls:
                    try:
                        queued_call()
                    except Exception as e:
                        raise DeferredCudaCallError("CUDA call failed lazily: %s" % e) from e
            finally:
                del _tls.is_initializing
            _initialized = True


        def init():
            _lazy_init()


        def device_count():
            return int(os.environ.get("FAKE_TORCH_DEVICES", "1"))


        fractions = []  # what reached the allocator


        def set_per_process_memory_fraction(fraction, device=None):
            fractions.append(fraction)


        def _fake_alloc(count, nbytes, device=0):
            # The program allocating: counters as the caching allocator keeps them.
            _lazy_init()
            s = _stats.setdefault(device, {})
            s["allocation.all.allocated"] = s.get("allocation.all.allocated", 0) + count
            s["allocated_bytes.all.current"] = s.get("allocated_bytes.all.current", 0) + nbytes
            s["reserved_bytes.all.current"] = s.get("reserved_bytes.all.current", 0) + 2 * nbytes
            s["reserved_bytes.all.peak"] = s["reserved_bytes.all.current"]
            s["num_ooms"] = 0
            s["num_alloc_retries"] = 1


        def _state():
            # a copy: later calls must not change what was returned earlier
            return json.loads(json.dumps({
                "init_calls": init_calls,
                "initialized": _initialized,
                "queued": len(_queued_calls),
                "calls": calls,
                "record_kwargs": record_kwargs,
                "observers": len(observers),
            }))


        from torch.cuda import memory
        from torch.cuda.memory import memory_stats
        memory.set_per_process_memory_fraction = set_per_process_memory_fraction
    """,
    "torch/cuda/memory.py": """
        import json
        import os
        import sys

        import torch


        def memory_stats(device=None):
            cuda = torch.cuda
            if not cuda.is_initialized():
                return {}  # as memory_stats_as_nested_dict
            if device is None:
                device = 0  # the calling thread's current device: 0 for a new thread
            return dict(cuda._stats.get(device, {}))


        def _record_memory_history(
            enabled="all", context="all", stacks="all", max_entries=sys.maxsize, device=None
        ):
            cuda = torch.cuda
            # The real one calls lazyInitCUDA first (torch/csrc/cuda/memory_snapshot.cpp).
            cuda.calls.append(("record_history", cuda._initialized or cuda._initializing()))
            cuda.record_kwargs.append(
                {"enabled": enabled, "context": context, "stacks": stacks, "max_entries": max_entries}
            )
            if cuda._fail("RECORD"):
                raise RuntimeError("fake recordHistory failure\\nwith a second line")


        class _AtomicityProbe:
            # Pickled inside the snapshot: records what the output folders held while the
            # snapshot was being written, and unpickles as that listing (a str).
            def __reduce__(self):
                run_dir = os.environ["VRAMSCOPE_RUN_DIR"]
                listing = {}
                for sub in ("snapshots", "progress"):
                    folder = os.path.join(run_dir, sub)
                    listing[sub] = sorted(os.listdir(folder)) if os.path.isdir(folder) else []
                return (str, (json.dumps(listing),))


        def _snapshot(device=None):
            cuda = torch.cuda
            cuda.calls.append(("snapshot", cuda._initialized or cuda._initializing()))
            if cuda._fail("SNAPSHOT"):
                raise RuntimeError("fake snapshot failure")
            return {
                "segments": [{"device": 0, "address": 1 << 40, "total_size": 2 << 20, "blocks": []}],
                "device_traces": [[{"action": "oom", "size": 1 << 30}]],
                "probe": _AtomicityProbe(),
            }
    """,
}

# A sitecustomize further on the path (a distro's or a virtualenv's, say).
OTHER_SITECUSTOMIZE = """
    import sys
    sys._other_sitecustomize_runs = getattr(sys, "_other_sitecustomize_runs", 0) + 1
    MARKER = "other sitecustomize"
"""


def write_tree(root, files):
    for relative, text in files.items():
        path = os.path.join(root, relative)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text).lstrip())


class RunHookTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp(prefix="vramscope-run-test-")
        cls.fake = os.path.join(cls.root, "fake")
        write_tree(cls.fake, FAKE_TORCH)
        cls.other = os.path.join(cls.root, "other")
        write_tree(cls.other, {"sitecustomize.py": OTHER_SITECUSTOMIZE})

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root, ignore_errors=True)

    def setUp(self):
        self.work = tempfile.mkdtemp(dir=self.root)
        self.run_dir = os.path.join(self.work, "run")

    # -- helpers -----------------------------------------------------------------------------

    def run_child(self, code, path=None, env=None, expect_rc=0):
        """Runs ``code`` in a fresh interpreter as ``vramscope run`` would start it; returns
        (json printed on the last stdout line or None, stderr)."""
        child_env = {
            k: v
            for k, v in os.environ.items()
            if k not in ("PYTHONPATH", "RANK", "LOCAL_RANK") and not k.startswith("VRAMSCOPE_")
        }
        child_env["PYTHONDONTWRITEBYTECODE"] = "1"  # no __pycache__ in the asset folder
        child_env["VRAMSCOPE_RUN_DIR"] = self.run_dir
        child_env.update(env or {})
        child_env = {k: v for k, v in child_env.items() if v is not None}
        child_env["PYTHONPATH"] = os.pathsep.join(path if path is not None else [HERE, self.fake])
        result = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            cwd=self.work,
            env=child_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        self.assertEqual(result.returncode, expect_rc, result.stderr)
        lines = result.stdout.strip().splitlines()
        return (json.loads(lines[-1]) if lines else None), result.stderr

    def vramscope_lines(self, stderr):
        return [line for line in stderr.splitlines() if line.startswith("vramscope:")]

    def files(self):
        found = []
        for folder, _, names in os.walk(self.run_dir):
            for name in names:
                found.append(os.path.relpath(os.path.join(folder, name), self.run_dir))
        return sorted(found)

    def read_json(self, relative):
        with open(os.path.join(self.run_dir, relative)) as f:
            return json.load(f)

    # -- (1) processes that never import torch -----------------------------------------------

    def test_process_without_torch_is_untouched(self):
        code = """
            import json, sys
            print(json.dumps({
                "modules": sorted(sys.modules),
                "finders": [type(f).__name__ for f in sys.meta_path],
            }))
        """
        baseline, _ = self.run_child(code, path=[self.fake])
        hooked, stderr = self.run_child(code)
        self.assertEqual(stderr, "")
        self.assertIn("_TorchImportFinder", hooked["finders"])  # armed, yet inert
        self.assertNotIn("torch", hooked["modules"])
        extra = set(hooked["modules"]) - set(baseline["modules"])
        self.assertEqual(extra, {"sitecustomize", "vramscope_run_hook"})
        self.assertFalse(os.path.exists(self.run_dir), self.files())

    def test_process_importing_torch_without_cuda_writes_nothing(self):
        code = """
            import json, torch
            print(json.dumps(torch.cuda._state()))
        """
        state, stderr = self.run_child(code)
        self.assertEqual(stderr, "")
        self.assertEqual(state["init_calls"], 0)
        self.assertEqual(state["calls"], [])
        self.assertEqual(state["queued"], 1)  # waiting for the program's CUDA init
        self.assertFalse(os.path.exists(self.run_dir), self.files())

    # -- (2) recording starts with the program's CUDA init, not before ------------------------

    def test_import_queues_recording_until_cuda_init(self):
        code = """
            import json, os, sys, time, torch
            after_import = torch.cuda._state()
            loader = type(torch.__spec__.loader).__name__
            same_loader = torch.__loader__ is torch.__spec__.loader
            finders = [type(f).__name__ for f in sys.meta_path]
            torch.cuda._fake_alloc(5, 4096)            # the program's first CUDA use
            torch.cuda._fake_alloc(2, 1024, device=1)  # a second device, asked by index
            after_init = torch.cuda._state()
            name = "progress/pid%d.json" % os.getpid()
            path = os.path.join(os.environ["VRAMSCOPE_RUN_DIR"], name)
            deadline = time.time() + 10
            while not os.path.exists(path) and time.time() < deadline:
                time.sleep(0.05)
            with open(path) as f:
                progress = json.load(f)  # written by the 0.5 s thread, not at exit
            print(json.dumps({"after_import": after_import, "after_init": after_init,
                              "loader": loader, "same_loader": same_loader,
                              "finders": finders, "progress": progress, "pid": os.getpid()}))
        """
        out, stderr = self.run_child(code, env={"FAKE_TORCH_DEVICES": "2"})
        self.assertEqual(self.vramscope_lines(stderr), [])
        before = out["after_import"]
        self.assertEqual(before["init_calls"], 0)
        self.assertEqual(before["calls"], [])
        self.assertEqual(before["queued"], 1)
        # torch looks untouched afterwards: its own loader back, our finder gone
        self.assertEqual(out["loader"], "SourceFileLoader")
        self.assertTrue(out["same_loader"])
        self.assertNotIn("_TorchImportFinder", out["finders"])

        after = out["after_init"]
        self.assertEqual(after["init_calls"], 1)  # only the program's own
        # every CUDA-initialising call came from inside the program's init
        self.assertEqual(after["calls"], [["record_history", True], ["attach_observer", True]])
        self.assertEqual(after["observers"], 1)
        self.assertEqual(
            after["record_kwargs"],
            [{"enabled": "all", "context": "all", "stacks": "python", "max_entries": 100000}],
        )

        progress = out["progress"]
        self.assertEqual(progress["pid"], out["pid"])
        self.assertIsNone(progress["rank"])
        self.assertEqual(progress["num_allocs"], 7)  # 5 on device 0 + 2 on device 1
        self.assertEqual(progress["allocated_bytes_current"], 4096 + 1024)
        self.assertEqual(progress["reserved_bytes_current"], 2 * (4096 + 1024))
        self.assertEqual(progress["reserved_bytes_peak"], 2 * (4096 + 1024))
        self.assertEqual(progress["num_ooms"], 0)
        self.assertEqual(progress["num_alloc_retries"], 2)
        self.assertIsInstance(progress["time_unix_ms"], int)
        self.assertEqual(self.files(), ["progress/pid%d.json" % out["pid"]])

    def test_optimizer_steps_and_their_times_are_in_the_progress(self):
        code = """
            import json, os, time, torch
            optimizer = torch.optim.Optimizer()
            optimizer.step()  # before CUDA init: not counted (recording starts with CUDA)
            torch.cuda._fake_alloc(1, 100)
            before = time.time() * 1000
            for _ in range(3):
                optimizer.step()
                time.sleep(0.02)
            optimizer.step()
            after = time.time() * 1000
            print(json.dumps({"pid": os.getpid(), "before": before, "after": after}))
        """
        out, stderr = self.run_child(code)
        self.assertEqual(stderr, "")
        progress = self.read_json("progress/pid%d.json" % out["pid"])
        self.assertEqual(progress["optimizer_steps"], 4)
        first = progress["first_optimizer_step_unix_ms"]
        last = progress["last_optimizer_step_unix_ms"]
        self.assertTrue(out["before"] <= first < last <= out["after"], (out, progress))
        self.assertGreaterEqual(last - first, 3 * 20 - 1)  # three sleeps of 20 ms between them

    def test_no_steps_no_step_fields_and_a_failing_register_is_one_line(self):
        code = """
            import json, os, torch
            torch.cuda._fake_alloc(1, 100)
            torch.optim.Optimizer().step()
            print(json.dumps({"pid": os.getpid()}))
        """
        out, stderr = self.run_child(code, env={"FAKE_TORCH_FAIL_STEP_HOOK": "1"})
        self.assertEqual(
            self.vramscope_lines(stderr),
            ["vramscope: could not count optimizer steps: RuntimeError: fake register failure"],
        )
        progress = self.read_json("progress/pid%d.json" % out["pid"])
        self.assertEqual(progress["num_allocs"], 1)
        self.assertNotIn("optimizer_steps", progress)
        self.assertNotIn("first_optimizer_step_unix_ms", progress)

    def test_memory_fraction_is_recorded_and_raised_only_when_asked(self):
        code = """
            import json, os, torch
            from torch.cuda import set_per_process_memory_fraction
            set_per_process_memory_fraction(0.1)         # before CUDA init, as programs do
            torch.cuda.memory.set_per_process_memory_fraction(0.9)  # above the least: kept
            torch.cuda.set_per_process_memory_fraction(0.2)
            torch.cuda._fake_alloc(1, 100)
            print(json.dumps({"pid": os.getpid(), "fractions": torch.cuda.fractions,
                              "wrapped": torch.cuda.set_per_process_memory_fraction.__wrapped__.__name__}))
        """
        out, stderr = self.run_child(code)
        self.assertEqual(stderr, "")
        self.assertEqual(out["fractions"], [0.1, 0.9, 0.2])  # untouched without the option
        progress = self.read_json("progress/pid%d.json" % out["pid"])
        self.assertEqual(progress["memory_fraction"], 0.2)  # the program's last request

        out, stderr = self.run_child(code, env={"VRAMSCOPE_RUN_MEMORY_FRACTION": "0.5"})
        self.assertEqual(stderr, "")
        self.assertEqual(out["fractions"], [0.5, 0.9, 0.5])  # raised to the least, never lowered
        self.assertEqual(out["wrapped"], "set_per_process_memory_fraction")
        progress = self.read_json("progress/pid%d.json" % out["pid"])
        self.assertEqual(progress["memory_fraction"], 0.2)  # still what the program asked

        out, stderr = self.run_child(code, env={"VRAMSCOPE_RUN_MEMORY_FRACTION": "2"})
        self.assertEqual(
            self.vramscope_lines(stderr),
            ["vramscope: VRAMSCOPE_RUN_MEMORY_FRACTION='2' is not a fraction in (0, 1]; the program's own caps are kept"],
        )
        self.assertEqual(out["fractions"], [0.1, 0.9, 0.2])

    def test_exit_flushes_progress_once_more(self):
        code = """
            import json, os, torch
            torch.cuda._fake_alloc(3, 100)
            torch.cuda._fake_alloc(4, 100)  # at most microseconds later: before any tick
            print(json.dumps({"pid": os.getpid()}))
        """
        out, stderr = self.run_child(code)
        self.assertEqual(stderr, "")
        progress = self.read_json("progress/pid%d.json" % out["pid"])
        self.assertEqual(progress["num_allocs"], 7)
        self.assertEqual(self.files(), ["progress/pid%d.json" % out["pid"]])

    @unittest.skipUnless(hasattr(os, "fork"), "needs fork")
    def test_forked_child_writes_nothing_under_its_pid(self):
        # A child forked after CUDA init cannot use CUDA; its exit must not write a record.
        code = """
            import json, os, sys, torch
            torch.cuda._fake_alloc(1, 100)
            child = os.fork()
            if child == 0:
                sys.exit(0)  # runs atexit handlers in the child
            os.waitpid(child, 0)
            print(json.dumps({"pid": os.getpid(), "child": child}))
        """
        out, _ = self.run_child(code)
        self.assertEqual(self.files(), ["progress/pid%d.json" % out["pid"]])

    # -- (3) chaining ------------------------------------------------------------------------

    def test_next_sitecustomize_is_executed(self):
        code = """
            import json, sys, sitecustomize, torch
            torch.cuda._fake_alloc(1, 100)
            print(json.dumps({"runs": getattr(sys, "_other_sitecustomize_runs", 0),
                              "marker": getattr(sitecustomize, "MARKER", None),
                              "record": torch.cuda._state()["record_kwargs"]}))
        """
        out, stderr = self.run_child(code, path=[HERE, self.fake, self.other])
        self.assertEqual(stderr, "")
        self.assertEqual(out["runs"], 1)
        self.assertEqual(out["marker"], "other sitecustomize")  # it is *the* sitecustomize now
        self.assertEqual(len(out["record"]), 1)  # and our hook works beside it

    def test_errors_in_the_next_sitecustomize_are_reported_as_python_would(self):
        broken = os.path.join(self.work, "broken")
        write_tree(broken, {"sitecustomize.py": "raise ValueError('their bug')\n"})
        code = """
            import json, torch
            torch.cuda._fake_alloc(1, 100)
            print(json.dumps(torch.cuda._state()["record_kwargs"]))
        """
        record, stderr = self.run_child(code, path=[HERE, self.fake, broken])
        self.assertIn("Error in sitecustomize", stderr)  # site.py's own message
        self.assertIn("their bug", stderr)
        self.assertEqual(self.vramscope_lines(stderr), [])
        self.assertEqual(len(record), 1)  # our hook was installed before theirs ran

    def test_sitecustomize_that_reimports_itself_does_not_loop(self):
        # Some tools chain by deleting sys.modules["sitecustomize"] and importing it again,
        # which finds ours first again.
        loop = os.path.join(self.work, "loop")
        write_tree(loop, {"sitecustomize.py": """
            import sys
            sys._loop_runs = getattr(sys, "_loop_runs", 0) + 1
            del sys.modules["sitecustomize"]
            import sitecustomize
        """})
        code = """
            import json, sys
            print(json.dumps({"loop": sys._loop_runs,
                              "other": getattr(sys, "_other_sitecustomize_runs", 0)}))
        """
        out, stderr = self.run_child(code, path=[HERE, self.fake, loop, self.other])
        self.assertEqual(stderr, "")
        self.assertEqual(out, {"loop": 1, "other": 1})

    # -- (4) VRAMSCOPE_RUN_OFF ----------------------------------------------------------------

    def test_off_installs_nothing_but_still_chains(self):
        code = """
            import json, sys, torch
            finders = [type(f).__name__ for f in sys.meta_path]
            torch.cuda._fake_alloc(1, 100)
            torch._C._fake_oom(0, 1 << 30, 1 << 30, 0)
            state = torch.cuda._state()
            print(json.dumps({"finders": finders, "state": state,
                              "runs": getattr(sys, "_other_sitecustomize_runs", 0),
                              "hook_loaded": "vramscope_run_hook" in sys.modules}))
        """
        out, stderr = self.run_child(
            code, path=[HERE, self.fake, self.other], env={"VRAMSCOPE_RUN_OFF": "1"}
        )
        self.assertEqual(stderr, "")
        self.assertNotIn("_TorchImportFinder", out["finders"])
        self.assertEqual(out["state"]["calls"], [])
        self.assertEqual(out["state"]["observers"], 0)
        self.assertEqual(out["state"]["queued"], 0)
        self.assertEqual(out["runs"], 1)
        self.assertFalse(os.path.exists(self.run_dir), self.files())

    def test_without_run_dir_nothing_is_installed(self):
        code = """
            import json, torch
            torch.cuda._fake_alloc(1, 100)
            print(json.dumps(torch.cuda._state()))
        """
        state, stderr = self.run_child(code, env={"VRAMSCOPE_RUN_DIR": None})
        self.assertEqual(stderr, "")
        self.assertEqual(state["calls"], [])

    # -- (5) the OOM snapshot and record --------------------------------------------------------

    OOM_CODE = """
        import json, os, torch
        torch.cuda._fake_alloc(7, 1 << 20)
        torch._C._fake_oom(0, 3 << 30, 70 << 30, 1 << 20)
        print(json.dumps({"pid": os.getpid()}))
    """

    def test_oom_writes_snapshot_then_record(self):
        out, stderr = self.run_child(self.OOM_CODE, env={"RANK": "3", "LOCAL_RANK": "1"})
        self.assertEqual(self.vramscope_lines(stderr), [])
        name = "rank3-pid%d" % out["pid"]
        snapshot_name = name + "-oom-1.pickle"
        self.assertEqual(
            self.files(),
            ["progress/%s.json" % name, "progress/%s.oom.json" % name, "snapshots/" + snapshot_name],
        )
        path = os.path.join(self.run_dir, "snapshots", snapshot_name)
        with open(path, "rb") as f:
            self.assertEqual(f.read(2), b"\x80\x04")  # pickle protocol 4
            f.seek(0)
            snapshot = pickle.load(f)
        self.assertEqual(snapshot["device_traces"][0][0]["action"], "oom")
        # While the snapshot was written only the hidden temporary file existed, and the OOM
        # record did not exist yet: atomic, and snapshot first.
        during = json.loads(snapshot["probe"])
        self.assertEqual(during["snapshots"], ["." + name + "-oom-1.tmp"])
        self.assertNotIn(name + ".oom.json", during["progress"])

        record = self.read_json("progress/%s.oom.json" % name)
        self.assertEqual(record["pid"], out["pid"])
        self.assertEqual(record["rank"], 3)
        self.assertEqual(record["device"], 0)
        self.assertEqual(record["alloc_bytes"], 3 << 30)
        self.assertEqual(record["device_allocated"], 70 << 30)
        self.assertEqual(record["device_free"], 1 << 20)
        self.assertEqual(record["num_allocs"], 7)
        self.assertEqual(record["oom_index"], 1)
        self.assertEqual(record["snapshot"], "snapshots/" + snapshot_name)
        self.assertIsInstance(record["time_unix_ms"], int)

    def test_names_use_local_rank_then_pid_alone(self):
        out, _ = self.run_child(self.OOM_CODE, env={"LOCAL_RANK": "1"})
        self.assertIn("snapshots/rank1-pid%d-oom-1.pickle" % out["pid"], self.files())
        shutil.rmtree(self.run_dir)
        out, _ = self.run_child(self.OOM_CODE)
        self.assertIn("snapshots/pid%d-oom-1.pickle" % out["pid"], self.files())
        self.assertIsNone(self.read_json("progress/pid%d.oom.json" % out["pid"])["rank"])

    def test_second_oom_gets_its_own_snapshot(self):
        code = """
            import json, os, torch
            torch.cuda._fake_alloc(7, 1 << 20)
            torch._C._fake_oom(0, 3 << 30, 70 << 30, 1 << 20)
            torch.cuda._fake_alloc(2, 1 << 20)
            torch._C._fake_oom(0, 1 << 30, 70 << 30, 1 << 20)
            print(json.dumps({"pid": os.getpid()}))
        """
        out, _ = self.run_child(code)
        name = "pid%d" % out["pid"]
        snapshots = [f for f in self.files() if f.startswith("snapshots/")]
        self.assertEqual(
            snapshots, ["snapshots/%s-oom-1.pickle" % name, "snapshots/%s-oom-2.pickle" % name]
        )
        record = self.read_json("progress/%s.oom.json" % name)
        self.assertEqual((record["oom_index"], record["num_allocs"]), (2, 9))
        self.assertEqual(record["snapshot"], "snapshots/%s-oom-2.pickle" % name)

    def test_periodic_snapshots(self):
        code = """
            import json, os, time, torch
            torch.cuda._fake_alloc(1, 100)
            time.sleep(1.0)
            print(json.dumps({"pid": os.getpid()}))
        """
        out, stderr = self.run_child(code, env={"VRAMSCOPE_RUN_PERIODIC_S": "0.05"})
        self.assertEqual(self.vramscope_lines(stderr), [])
        prefix = "snapshots/pid%d-periodic-" % out["pid"]
        periodic = [f for f in self.files() if f.startswith("snapshots/")]
        self.assertTrue(periodic and all(f.startswith(prefix) for f in periodic), periodic)
        numbers = sorted(int(f[len(prefix):-len(".pickle")]) for f in periodic)
        self.assertLessEqual(len(numbers), 10)  # the newest ten are kept
        self.assertEqual(numbers, list(range(numbers[-1] - len(numbers) + 1, numbers[-1] + 1)))

    # -- (6) options ---------------------------------------------------------------------------

    def recorded_kwargs(self, env):
        code = """
            import json, torch
            torch.cuda._fake_alloc(1, 100)
            print(json.dumps(torch.cuda._state()["record_kwargs"]))
        """
        kwargs, stderr = self.run_child(code, env=env)
        self.assertEqual(len(kwargs), 1)
        return kwargs[0], self.vramscope_lines(stderr)

    def test_stacks_option_maps_to_record_memory_history_arguments(self):
        cases = {
            "python": {"context": "all", "stacks": "python"},
            "all": {"context": "all", "stacks": "all"},
            "none": {"context": None, "stacks": "python"},
            "ALL": {"context": "all", "stacks": "all"},
        }
        for value, expected in cases.items():
            with self.subTest(stacks=value):
                kwargs, lines = self.recorded_kwargs(
                    {"VRAMSCOPE_RUN_STACKS": value, "VRAMSCOPE_RUN_MAX_ENTRIES": "1234"}
                )
                self.assertEqual(lines, [])
                expected = dict(expected, enabled="all", max_entries=1234)
                self.assertEqual(kwargs, expected)

    def test_history_the_program_turned_on_itself_is_kept(self):
        code = """
            import json, torch
            # before any CUDA tensor: real torch initialises CUDA in C++ here, not _lazy_init
            torch.cuda.memory._record_memory_history(max_entries=7, stacks="all")
            torch.cuda._fake_alloc(1, 100)
            print(json.dumps(torch.cuda._state()))
        """
        state, stderr = self.run_child(code)
        self.assertEqual(stderr, "")
        self.assertEqual(
            state["record_kwargs"],
            [{"enabled": "all", "context": "all", "stacks": "all", "max_entries": 7}],
        )
        self.assertEqual(state["observers"], 1)

    def test_bad_options_are_reported_once_each_and_defaults_used(self):
        kwargs, lines = self.recorded_kwargs(
            {"VRAMSCOPE_RUN_STACKS": "cpp", "VRAMSCOPE_RUN_MAX_ENTRIES": "-5"}
        )
        self.assertEqual(
            kwargs, {"enabled": "all", "context": "all", "stacks": "python", "max_entries": 100000}
        )
        self.assertEqual(len(lines), 2, lines)
        self.assertTrue(any("VRAMSCOPE_RUN_STACKS" in line for line in lines), lines)
        self.assertTrue(any("VRAMSCOPE_RUN_MAX_ENTRIES" in line for line in lines), lines)

    # -- (7) failures never break the program --------------------------------------------------

    def run_program_with(self, env):
        code = """
            import json, os, torch
            torch.cuda._fake_alloc(7, 1 << 20)
            torch._C._fake_oom(0, 3 << 30, 70 << 30, 1 << 20)
            print(json.dumps({"pid": os.getpid(), "finished": True}))
        """
        out, stderr = self.run_child(code, env=env)  # asserts exit status 0
        self.assertTrue(out["finished"])
        return out, self.vramscope_lines(stderr), stderr

    def test_failing_record_history_prints_one_line_and_program_runs(self):
        out, lines, stderr = self.run_program_with({"FAKE_TORCH_FAIL_RECORD": "1"})
        self.assertEqual(len(lines), 1, stderr)
        self.assertIn("RuntimeError: fake recordHistory failure with a second line", lines[0])
        self.assertNotIn("DeferredCudaCallError", stderr)
        # the OOM observer and the progress file still work
        self.assertEqual(self.read_json("progress/pid%d.oom.json" % out["pid"])["num_allocs"], 7)

    def test_failing_observer_and_snapshot_print_one_line_each(self):
        out, lines, stderr = self.run_program_with({"FAKE_TORCH_FAIL_OBSERVER": "1"})
        self.assertEqual(len(lines), 1, stderr)
        self.assertIn("out-of-memory observer", lines[0])
        shutil.rmtree(self.run_dir)
        out, lines, stderr = self.run_program_with({"FAKE_TORCH_FAIL_SNAPSHOT": "1"})
        self.assertEqual(len(lines), 1, stderr)
        self.assertIn("fake snapshot failure", lines[0])
        record = self.read_json("progress/pid%d.oom.json" % out["pid"])
        self.assertIsNone(record["snapshot"])
        self.assertEqual(record["num_allocs"], 7)

    def test_unwritable_run_dir_prints_one_line_per_kind_and_program_runs(self):
        blocker = os.path.join(self.work, "file")
        with open(blocker, "w") as f:
            f.write("not a folder")
        code = """
            import json, time, torch
            torch.cuda._fake_alloc(1, 100)
            time.sleep(1.2)  # a couple of failing progress ticks
            torch._C._fake_oom(0, 1, 2, 3)
            print(json.dumps({"finished": True}))
        """
        out, stderr = self.run_child(code, env={"VRAMSCOPE_RUN_DIR": blocker})
        self.assertTrue(out["finished"])
        lines = self.vramscope_lines(stderr)
        self.assertEqual(len(lines), 3, stderr)  # progress, oom snapshot, oom record
        self.assertEqual(len(stderr.splitlines()), 3, stderr)

    # A full disk under the run folder: the hook's writes fail with ENOSPC after their first
    # bytes went, as on a real full disk. FAKE_ENOSPC says which: "all", or "snapshots" only
    # (the large files: a snapshot no longer fits where a small record still does).
    ENOSPC_CODE = """
        import errno, json, os, time, torch
        import vramscope_run_hook

        failing = os.environ["FAKE_ENOSPC"]
        real_open = open


        class FullDisk:
            def __init__(self, f):
                self.f = f

            def write(self, data):
                self.f.write(bytes(data[:10]))
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            def __getattr__(self, name):
                return getattr(self.f, name)

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                self.f.close()


        def full_open(path, mode="r", *args, **kwargs):
            f = real_open(path, mode, *args, **kwargs)
            in_snapshots = os.sep + "snapshots" + os.sep in path
            if "w" in mode and (failing == "all" or in_snapshots):
                return FullDisk(f)
            return f


        vramscope_run_hook.open = full_open
        torch.cuda._fake_alloc(7, 1 << 20)
        time.sleep(1.2)  # a couple of progress ticks on the full disk
        torch._C._fake_oom(0, 3 << 30, 70 << 30, 1 << 20)
        print("the job goes on after its out-of-memory error")
        print(json.dumps({"pid": os.getpid(), "finished": True}))
    """

    def test_a_full_disk_never_reaches_the_program(self):
        out, stderr = self.run_child(self.ENOSPC_CODE, env={"FAKE_ENOSPC": "all"})
        self.assertTrue(out["finished"])
        lines = self.vramscope_lines(stderr)
        # One line per kind (progress, OOM snapshot, OOM record), each naming the full disk;
        # nothing else reaches stderr: no traceback, no exception in the program.
        self.assertEqual(len(lines), 3, stderr)
        self.assertEqual(len(stderr.splitlines()), 3, stderr)
        for line in lines:
            self.assertIn("No space left on device", line)
        # Nothing half-written is left behind to be taken for evidence.
        self.assertEqual(self.files(), [])

    def test_a_snapshot_that_does_not_fit_leaves_the_records(self):
        out, stderr = self.run_child(self.ENOSPC_CODE, env={"FAKE_ENOSPC": "snapshots"})
        self.assertTrue(out["finished"])
        lines = self.vramscope_lines(stderr)
        self.assertEqual(len(lines), 1, stderr)
        self.assertIn("could not write a oom snapshot", lines[0])
        self.assertIn("No space left on device", lines[0])
        name = "pid%d" % out["pid"]
        self.assertEqual(self.files(), ["progress/%s.json" % name, "progress/%s.oom.json" % name])
        record = self.read_json("progress/%s.oom.json" % name)
        self.assertIsNone(record["snapshot"])
        self.assertEqual(record["num_allocs"], 7)

    def test_broken_hook_module_still_chains(self):
        folder = os.path.join(self.work, "broken_hook")
        os.makedirs(folder)
        shutil.copy(os.path.join(HERE, "sitecustomize.py"), folder)
        with open(os.path.join(folder, "vramscope_run_hook.py"), "w") as f:
            f.write("raise ImportError('half-installed')\n")
        code = """
            import json, sys, torch
            torch.cuda._fake_alloc(1, 100)
            print(json.dumps({"runs": getattr(sys, "_other_sitecustomize_runs", 0)}))
        """
        out, stderr = self.run_child(code, path=[folder, self.fake, self.other])
        lines = self.vramscope_lines(stderr)
        self.assertEqual(len(lines), 1, stderr)
        self.assertIn("half-installed", lines[0])
        self.assertEqual(out["runs"], 1)


if __name__ == "__main__":
    unittest.main()
