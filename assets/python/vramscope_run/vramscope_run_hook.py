"""The logic behind ``vramscope run``'s ``sitecustomize``: record PyTorch's CUDA allocator history.

``vramscope run -- COMMAND`` starts COMMAND with this folder first on ``PYTHONPATH``, so every
Python process under it imports our ``sitecustomize``, which calls ``install()``. ``install``
only puts a tiny finder on ``sys.meta_path``; nothing else happens unless and until the process
imports ``torch``. Then, once the program itself initialises CUDA, the process

* records allocator history (``torch.cuda.memory._record_memory_history``),
* writes a snapshot the moment an allocation fails (the allocator's out-of-memory observer),
  followed by a ``<name>.oom.json`` record of that failure,
* writes ``progress/<name>.json`` every 0.5 s (allocation count, bytes, optimizer steps and the
  times of the first and last) for the orchestrator,
* optionally writes a snapshot every ``VRAMSCOPE_RUN_PERIODIC_S`` seconds.

The contract with vramscope (environment variables, file names, JSON fields) is in README.md.

How recording starts without initialising CUDA (read in PyTorch's sources, main branch, 2025):

* ``torch/cuda/__init__.py``, ``_lazy_call(callable)``: if ``is_initialized()`` it calls
  ``callable()`` now, otherwise it appends it to ``_queued_calls``.
* ``torch/cuda/__init__.py``, ``_lazy_init()``: calls ``torch._C._cuda_init()``, then, with
  ``_tls.is_initializing`` set and ``_initialization_lock`` held, runs every queued call; if one
  raises it raises ``DeferredCudaCallError`` *into the program*. ``_initialized = True`` is set only
  after the queued calls, so inside our callback ``is_initialized()`` is still False (and
  ``memory_stats`` still returns ``{}``).
* Every CUDA use from Python goes through ``_lazy_init``: tensor factories call
  ``torch::utils::device_lazy_init`` (``torch/csrc/utils/device_lazy_init.cpp``), which imports
  ``torch.cuda`` and calls ``_lazy_init``. So the queued call runs before the program's first
  CUDA allocation and history misses nothing.
* ``torch/csrc/cuda/memory_snapshot.cpp``, ``_record_memory_history``: calls
  ``at::globalContext().lazyInitCUDA()`` (``lazyInitDevice(CUDA)`` in newer versions) before
  ``CUDACachingAllocator::recordHistory``; ``torch/csrc/cuda/Module.cpp``,
  ``THCPModule_attachOutOfMemoryObserver`` does the same before ``attachOutOfMemoryObserver``.
  Calling either at import time would therefore initialise CUDA (a context on the GPU, and a
  fork-poisoned process): they must only run from the queued call. (Both also need the
  per-device allocators that exist only after init: ``recordHistory`` and
  ``attachOutOfMemoryObserver`` loop over ``device_allocator``.)
* ``torch/cuda/memory.py``, ``_record_memory_history(enabled="all", context="all",
  stacks="all", max_entries=sys.maxsize, ...)``: ``enabled`` is ``None``/``"state"``/``"all"``
  (``"all"`` keeps the alloc/free trace ring of ``max_entries`` events; with ``"state"`` the C++
  side forces ``max_entries`` to 1); ``context`` is ``None``/``"state"``/``"alloc"``/``"all"``
  (which events get a traceback; ``None`` records none -- ``RecordContext::NEVER``); ``stacks`` is
  ``"python"`` or ``"all"`` (``"all"`` adds C++ frames and warms up the unwinder). A bool
  ``enabled`` selects the legacy API.
* ``torch/cuda/memory.py``, ``memory_stats`` -> ``memory_stats_as_nested_dict``: returns ``{}``
  while ``not is_initialized()`` and otherwise reads ``torch._C._cuda_memoryStats(device)``
  (counters only, no CUDA call). Without a device it uses ``current_device()``, which is per
  thread, so the progress thread asks for each device by index.
* ``torch/csrc/cuda/Module.cpp``, the OOM observer lambda: calls the Python observer with
  ``(device, alloc, device_allocated, device_free)`` after the allocator released its lock, and
  turns an exception from it into a C++ error -- so ours must never raise.
* The ``cudaMallocAsync`` backend (``PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync``) raises
  from both ``recordHistory`` and ``attachOutOfMemoryObserver``; we report that in one line.

This module imports only ``os`` and ``sys`` at start-up: a process that never imports torch
loads nothing else of ours (sitecustomize.py itself uses ``importlib`` to chain). Everything else is imported
when torch is, and torch imports all of it anyway.
"""

import os
import sys

__all__ = ["install", "Recorder", "Options", "process_name", "process_rank"]

# Environment contract with vramscope (see README.md).
ENV_DIR = "VRAMSCOPE_RUN_DIR"
ENV_OFF = "VRAMSCOPE_RUN_OFF"
ENV_MAX_ENTRIES = "VRAMSCOPE_RUN_MAX_ENTRIES"
ENV_STACKS = "VRAMSCOPE_RUN_STACKS"
ENV_PERIODIC_S = "VRAMSCOPE_RUN_PERIODIC_S"
# --prove's raised-cap candidate: the per-process memory fraction the program sets is raised to
# at least this (a fraction in (0, 1]).
ENV_MEMORY_FRACTION = "VRAMSCOPE_RUN_MEMORY_FRACTION"

# Same default as the live-capture helper: several training steps of history, files in the tens
# of megabytes ("expect each entry to be several KB" -- _record_memory_history's docstring).
DEFAULT_MAX_ENTRIES = 100000
# Python frames only: what people read in a snapshot, and much cheaper than C++ unwinding.
DEFAULT_STACKS = "python"
# VRAMSCOPE_RUN_STACKS -> keyword arguments of torch.cuda.memory._record_memory_history (besides
# enabled="all" and max_entries). "none" still records every alloc/free event (sizes, addresses,
# streams, times) but gathers no traceback: context=None is RecordContext::NEVER, and
# stacks="python" avoids the C++ unwinder warm-up that stacks="all" does.
STACKS_ARGUMENTS = {
    "python": {"context": "all", "stacks": "python"},
    "all": {"context": "all", "stacks": "all"},
    "none": {"context": None, "stacks": "python"},
}

PROGRESS_INTERVAL_S = 0.5
# Periodic snapshots can be hundreds of megabytes each: keep the newest few, as the live-capture
# helper does. OOM snapshots are never deleted.
KEEP_PERIODIC = 10
# Protocol 4: readable by every PyTorch memory viewer (Python 3.14 defaults to 5, which older
# copies of pytorch.org/memory_viz reject).
PICKLE_PROTOCOL = 4

SNAPSHOTS_SUBDIR = "snapshots"
PROGRESS_SUBDIR = "progress"


def warn(message):
    """Prints one ``vramscope:`` line to stderr; never raises (stderr may be closed or None)."""
    try:
        text = " ".join(str(message).split())  # one line, whatever the exception text held
        stream = sys.stderr
        if stream is not None:
            stream.write("vramscope: " + text + "\n")
            stream.flush()
    except Exception:  # noqa: BLE001 - reporting must not become the failure
        pass


def describe(error):
    return "%s: %s" % (type(error).__name__, error)


# --------------------------------------------------------------------------------------------
# Start-up: the torch import hook
# --------------------------------------------------------------------------------------------

_installed_finder = None


def install(environ=None):
    """Called by our sitecustomize at interpreter start-up. Idempotent, never raises.

    Puts ``_TorchImportFinder`` first on ``sys.meta_path`` unless ``VRAMSCOPE_RUN_OFF`` is set or
    ``VRAMSCOPE_RUN_DIR`` is missing. Nothing is printed or written here, so that processes that
    never import torch are left alone; options are read (and complained about) only when torch is
    imported.
    """
    global _installed_finder
    try:
        environ = os.environ if environ is None else environ
        if _installed_finder is not None or _is_off(environ):
            return None
        run_dir = environ.get(ENV_DIR, "").strip()
        if not run_dir:
            return None
        # Absolute now: the program may chdir before it imports torch.
        finder = _TorchImportFinder(os.path.abspath(run_dir), environ)
        _installed_finder = finder
        torch_module = sys.modules.get("torch")
        if torch_module is not None:
            # A .pth file imported torch before sitecustomize ran: no import left to hook.
            finder.on_torch_imported(torch_module)
        else:
            sys.meta_path.insert(0, finder)
        return finder
    except Exception as error:  # noqa: BLE001 - never break start-up
        warn("could not install the torch import hook: " + describe(error))
        return None


def _is_off(environ):
    return environ.get(ENV_OFF, "").strip().lower() in ("1", "true", "yes", "on")


class _TorchImportFinder:
    """A ``sys.meta_path`` finder that only ever answers for the top-level ``torch`` module.

    It asks the finders after it for torch's spec and wraps that spec's loader, so that our
    ``on_torch_imported`` runs right after torch's ``__init__`` has executed. Every other import
    costs one string comparison.
    """

    def __init__(self, run_dir, environ):
        self.run_dir = run_dir
        self.environ = environ
        self._searching = set()  # thread ids inside find_spec, against re-entrant look-ups
        self.recorder = None

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torch":
            return None
        import _thread  # built in, already loaded

        me = _thread.get_ident()
        if me in self._searching:
            return None
        self._searching.add(me)
        try:
            spec = None
            for finder in list(sys.meta_path):
                if finder is self:
                    continue
                find_spec = getattr(finder, "find_spec", None)
                if find_spec is None:
                    continue
                # Errors here are the other finder's and propagate exactly as without us.
                spec = find_spec(fullname, path, target)
                if spec is not None:
                    break
        finally:
            self._searching.discard(me)
        if spec is None:
            return None
        try:
            loader = spec.loader
            if loader is not None and hasattr(loader, "exec_module"):
                spec.loader = _LoaderWrapper(loader, self.on_torch_imported)
        except Exception as error:  # noqa: BLE001 - import torch unhooked rather than break it
            warn("could not hook the torch import: " + describe(error))
        return spec

    def on_torch_imported(self, torch_module):
        """Runs once torch's module body has executed. Never raises."""
        try:
            self.remove()
            if self.recorder is not None:
                return
            self.recorder = Recorder(torch_module, self.run_dir, self.environ)
            self.recorder.arm()
        except Exception as error:  # noqa: BLE001 - see docstring
            warn("could not set up recording: " + describe(error))

    def remove(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


class _LoaderWrapper:
    """Delegates to torch's real loader and calls ``on_loaded(module)`` after ``exec_module``.

    Once torch has executed, the real loader is put back on ``torch.__spec__`` and
    ``torch.__loader__``, so nothing that inspects torch later (importlib.resources, inspect,
    pkgutil) ever sees this wrapper.
    """

    def __init__(self, loader, on_loaded):
        self._vramscope_loader = loader
        self._vramscope_on_loaded = on_loaded

    def __getattr__(self, name):
        # Only reached for names not defined here: get_code, get_source, is_package, ...
        if name.startswith("_vramscope_"):  # not set yet (copy, pickle): no endless recursion
            raise AttributeError(name)
        return getattr(self._vramscope_loader, name)

    def create_module(self, spec):
        create = getattr(self._vramscope_loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        try:
            self._vramscope_loader.exec_module(module)
        finally:
            self._restore(module)
        # Only reached when torch imported fine; a failed import propagates untouched.
        self._vramscope_on_loaded(module)

    def _restore(self, module):
        real = self._vramscope_loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = real
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = real


# --------------------------------------------------------------------------------------------
# Once torch is imported: the recorder
# --------------------------------------------------------------------------------------------


class Options:
    """The ``VRAMSCOPE_RUN_*`` options; a bad value is reported in one line and the default used."""

    def __init__(self, environ):
        self.max_entries = _parse(
            environ, ENV_MAX_ENTRIES, DEFAULT_MAX_ENTRIES, int, lambda v: v > 0, "a positive integer"
        )
        stacks = environ.get(ENV_STACKS, "").strip().lower() or DEFAULT_STACKS
        if stacks not in STACKS_ARGUMENTS:
            warn(
                "%s=%r is not python, all or none; using %s"
                % (ENV_STACKS, environ.get(ENV_STACKS), DEFAULT_STACKS)
            )
            stacks = DEFAULT_STACKS
        self.stacks = stacks
        self.periodic_s = _parse(
            environ, ENV_PERIODIC_S, 0.0, float, lambda v: v >= 0 and v == v, "seconds >= 0"
        )
        self.least_memory_fraction = _parse(
            environ,
            ENV_MEMORY_FRACTION,
            None,
            float,
            lambda v: 0 < v <= 1,
            "a fraction in (0, 1]",
            "the program's own caps are kept",
        )

    def record_history_kwargs(self):
        kwargs = {"enabled": "all", "max_entries": self.max_entries}
        kwargs.update(STACKS_ARGUMENTS[self.stacks])
        return kwargs


def _parse(environ, name, default, convert, valid, expected, default_text=None):
    raw = environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = convert(raw)
        if valid(value):
            return value
    except (ValueError, OverflowError):
        pass
    warn("%s=%r is not %s; %s" % (name, raw, expected, default_text or "using %s" % default))
    return default


def process_rank(environ=None):
    """The process's rank as a string from RANK, else LOCAL_RANK, or None. Read each time a file
    is named: some programs set them in their workers only after start-up (e.g. under
    torch.multiprocessing.spawn)."""
    environ = os.environ if environ is None else environ
    for key in ("RANK", "LOCAL_RANK"):
        value = environ.get(key, "").strip()
        if value:
            # Keep file names plain whatever a launcher put there.
            cleaned = "".join(c if (c.isalnum() or c in "._-") else "_" for c in value)
            return cleaned[:32]
    return None


def process_name(rank, pid=None):
    """``rank<R>-pid<P>``, or ``pid<P>`` when ``rank`` is None: the stem of every file this
    process writes."""
    pid = os.getpid() if pid is None else pid
    return ("rank%s-pid%d" % (rank, pid)) if rank is not None else ("pid%d" % pid)


def write_atomically(folder, file_name, write, durable):
    """Writes ``folder/file_name`` through ``folder/.file_name-without-extension.tmp`` + rename.

    A reader (vramscope's watcher, the orchestrator) therefore sees either the old file or the
    whole new one, never half a file; hidden ``.tmp`` files are ignored by vramscope's watcher.
    ``durable`` also fsyncs the data before the rename (snapshots, OOM records); progress ticks
    skip it, since they are replaced every 0.5 s anyway.
    """
    os.makedirs(folder, exist_ok=True)
    stem = os.path.splitext(file_name)[0]
    final_path = os.path.join(folder, file_name)
    tmp_path = os.path.join(folder, "." + stem + ".tmp")
    try:
        with open(tmp_path, "wb") as tmp_file:
            write(tmp_file)
            tmp_file.flush()
            if durable:
                os.fsync(tmp_file.fileno())
        os.replace(tmp_path, final_path)
    except BaseException:
        try:
            os.remove(tmp_path)
        except OSError:
            pass
        raise
    return final_path


class Recorder:
    """Per-process recording state, created when torch has been imported."""

    def __init__(self, torch_module, run_dir, environ):
        import threading

        self.torch = torch_module
        self.run_dir = run_dir
        self.environ = environ
        self.options = Options(environ)
        self.snapshots_dir = os.path.join(run_dir, SNAPSHOTS_SUBDIR)
        self.progress_dir = os.path.join(run_dir, PROGRESS_SUBDIR)
        self.armed_pid = None  # the process whose CUDA initialisation started recording
        self.history_on = False
        self.observer_attached = False
        self._lock = threading.Lock()  # one writer at a time (threads, OOM observer, atexit)
        self._stop = threading.Event()
        self._threads = []
        self._counters = {}
        self._periodic_files = []
        self._num_ooms_seen = 0
        self._reported = set()
        self._dynamo_checked = False
        # Optimizer steps: one per training iteration in nearly every training loop, so
        # vramscope can compare runs by time per iteration (``--prove``'s speed column).
        self._optimizer_steps = 0
        self._first_step_s = None
        self._last_step_s = None
        self.memory_fraction = None  # the last per-process fraction the program asked for

    # -- start ------------------------------------------------------------------------------

    def arm(self):
        """Queues ``on_cuda_initialised`` to run when the program initialises CUDA."""
        cuda = getattr(self.torch, "cuda", None) or sys.modules.get("torch.cuda")
        if cuda is None:
            return  # nothing CUDA-related to record
        self._watch_memory_fraction(cuda)
        lazy_call = getattr(cuda, "_lazy_call", None)
        if lazy_call is not None:
            # Runs now if CUDA is already initialised, else from inside torch.cuda._lazy_init.
            lazy_call(self.on_cuda_initialised)
        elif cuda.is_initialized():
            self.on_cuda_initialised()
        else:
            warn("this torch has no torch.cuda._lazy_call; not recording this process")

    def on_cuda_initialised(self):
        """The queued call. Must never raise: torch would turn that into a DeferredCudaCallError
        in the program's first CUDA call."""
        try:
            self._start()
        except Exception as error:  # noqa: BLE001 - see docstring
            warn("could not start recording: " + describe(error))

    def _start(self):
        if self.armed_pid == os.getpid():
            return
        self.armed_pid = os.getpid()
        torch = self.torch
        try:
            # A program that turned history on itself before its first CUDA tensor (which
            # initialises CUDA in C++ only, not torch.cuda's Python state) keeps its settings.
            if not self._history_already_on():
                torch.cuda.memory._record_memory_history(**self.options.record_history_kwargs())
            self.history_on = True
        except Exception as error:  # noqa: BLE001 - the OOM record and progress still help
            warn("could not turn on allocator history: " + describe(error))
        try:
            torch._C._cuda_attach_out_of_memory_observer(self.on_oom)
            self.observer_attached = True
        except Exception as error:  # noqa: BLE001 - progress still helps
            warn("could not attach the out-of-memory observer: " + describe(error))
        self._watch_optimizer_steps()
        import atexit
        import threading

        atexit.register(self.at_exit)
        targets = [("vramscope-progress", self._progress_loop)]
        if self.options.periodic_s > 0:
            targets.append(("vramscope-periodic", self._periodic_loop))
        for name, target in targets:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def _watch_memory_fraction(self, cuda):
        """Wraps ``set_per_process_memory_fraction`` (in ``torch.cuda`` and ``torch.cuda.memory``;
        the program has not run yet, so a later ``from torch.cuda import ...`` gets the wrapper):
        the fraction the program asks for is kept for the progress record (what cap refused,
        when one did), and with ``VRAMSCOPE_RUN_MEMORY_FRACTION`` raised to at least that --
        ``--prove``'s raised-cap candidate, a real run under a larger cap with no code change.
        Wrapping touches no CUDA state."""
        original = getattr(cuda, "set_per_process_memory_fraction", None)
        if original is None or getattr(original, "_vramscope_wrapped", False):
            return
        recorder = self

        def set_per_process_memory_fraction(fraction, device=None):
            recorder.memory_fraction = fraction
            least = recorder.options.least_memory_fraction
            if least is not None and isinstance(fraction, (int, float)) and fraction < least:
                fraction = least
            return original(fraction, device)

        set_per_process_memory_fraction._vramscope_wrapped = True
        set_per_process_memory_fraction.__doc__ = original.__doc__
        set_per_process_memory_fraction.__wrapped__ = original
        cuda.set_per_process_memory_fraction = set_per_process_memory_fraction
        memory = getattr(cuda, "memory", None)
        if getattr(memory, "set_per_process_memory_fraction", None) is original:
            memory.set_per_process_memory_fraction = set_per_process_memory_fraction

    def _watch_optimizer_steps(self):
        """Counts ``Optimizer.step`` calls through PyTorch's global step post-hook
        (``torch.optim.optimizer.register_optimizer_step_post_hook``, PyTorch >= 2.0). torch
        imports ``torch.optim`` itself, so nothing is imported here; a torch without the hook
        (or without optim) just leaves the step fields out, and vramscope compares speeds by
        allocations per second instead."""
        optimizer_module = getattr(getattr(self.torch, "optim", None), "optimizer", None)
        register = getattr(optimizer_module, "register_optimizer_step_post_hook", None)
        if register is None:
            return
        try:
            register(self._on_optimizer_step)
        except Exception as error:  # noqa: BLE001 - speeds fall back to allocation rates
            warn("could not count optimizer steps: " + describe(error))

    def _on_optimizer_step(self, optimizer, args, kwargs):
        # Called after every optimizer.step() of the program: keep it to a few assignments.
        import time

        now = time.time()
        if self._first_step_s is None:
            self._first_step_s = now
        self._last_step_s = now
        self._optimizer_steps += 1

    def _history_already_on(self):
        # torch._C._cuda_isHistoryEnabled: what torch/_inductor/cudagraph_trees.py checks
        # before it turns history on and off around its own use.
        is_enabled = getattr(self.torch._C, "_cuda_isHistoryEnabled", None)
        try:
            return bool(is_enabled()) if is_enabled is not None else False
        except Exception:  # noqa: BLE001 - e.g. the cudaMallocAsync backend: try ours and report
            return False

    # -- reading the allocator ----------------------------------------------------------------

    def _cuda_ready(self):
        # False inside _lazy_init (before _initialized is set) and in a child forked after CUDA
        # was initialised, where torch must not be asked anything.
        try:
            return os.getpid() == self.armed_pid and bool(self.torch.cuda.is_initialized())
        except Exception:  # noqa: BLE001
            return False

    def read_stats(self):
        """Allocator counters summed over all devices (a process normally uses one).

        Devices are asked by index because ``memory_stats()`` without one means the *calling
        thread's* current device, which for our threads is always device 0.
        """
        totals = {
            "num_allocs": 0,
            "allocated_bytes_current": 0,
            "reserved_bytes_current": 0,
            "reserved_bytes_peak": 0,
            "num_ooms": 0,
            "num_alloc_retries": 0,
        }
        keys = {
            "num_allocs": "allocation.all.allocated",
            "allocated_bytes_current": "allocated_bytes.all.current",
            "reserved_bytes_current": "reserved_bytes.all.current",
            "reserved_bytes_peak": "reserved_bytes.all.peak",
            "num_ooms": "num_ooms",
            "num_alloc_retries": "num_alloc_retries",
        }
        cuda = self.torch.cuda
        for device in range(int(cuda.device_count())):
            stats = cuda.memory_stats(device) or {}
            for field, key in keys.items():
                value = stats.get(key, 0)
                if isinstance(value, (int, float)):
                    totals[field] += int(value)
        return totals

    def _name(self):
        return process_name(process_rank(self.environ))

    def _identity(self):
        rank = process_rank(self.environ)
        rank_value = int(rank) if rank is not None and rank.isdigit() else rank
        return process_name(rank), {
            "pid": os.getpid(),
            "rank": rank_value,
            "time_unix_ms": _now_ms(),
        }

    # -- progress ----------------------------------------------------------------------------

    def write_progress(self):
        """Writes ``progress/<name>.json``. Never raises; a failure is reported once."""
        if not self._cuda_ready():
            return None
        try:
            import json

            name, record = self._identity()
            record.update(self.read_stats())
            if isinstance(self.memory_fraction, (int, float)):
                record["memory_fraction"] = float(self.memory_fraction)
            if self._optimizer_steps:
                record["optimizer_steps"] = self._optimizer_steps
                record["first_optimizer_step_unix_ms"] = round(self._first_step_s * 1000.0, 3)
                record["last_optimizer_step_unix_ms"] = round(self._last_step_s * 1000.0, 3)
            data = json.dumps(record, sort_keys=True).encode("utf-8")
            with self._lock:
                return write_atomically(
                    self.progress_dir, name + ".json", lambda f: f.write(data), durable=False
                )
        except Exception as error:  # noqa: BLE001
            self._report_once("progress", "could not write progress: " + describe(error))
            return None

    def _progress_loop(self):
        while not self._stop.wait(PROGRESS_INTERVAL_S):
            self.write_progress()

    def at_exit(self):
        # Small on purpose: one last progress record, no snapshot. (In a child forked after CUDA
        # init, write_progress does nothing: the pid check in _cuda_ready.)
        self._stop.set()
        self.write_progress()

    # -- snapshots ----------------------------------------------------------------------------

    def _next_index(self, kind):
        self._counters[kind] = self._counters.get(kind, 0) + 1
        return self._counters[kind]

    def _prepare_snapshot(self):
        # The live-capture helper found (torch 2.11, H200) that the first snapshot with history on
        # can import torch._inductor.utils, which, imported before torch._dynamo, leaves
        # torch._dynamo half initialised for the program. Import torch._dynamo first, as the
        # helper does -- but only when a snapshot is actually due, never at start-up.
        if self._dynamo_checked:
            return
        self._dynamo_checked = True
        if getattr(self.torch, "__name__", None) == "torch" and "torch._dynamo" not in sys.modules:
            try:
                import importlib

                importlib.import_module("torch._dynamo")
            except Exception:  # noqa: BLE001 - a torch without dynamo still snapshots
                pass

    def write_snapshot(self, kind):
        """Writes ``snapshots/<name>-<kind>-<n>.pickle`` atomically; returns its path or None."""
        try:
            import pickle

            with self._lock:
                self._prepare_snapshot()
                snapshot = self.torch.cuda.memory._snapshot()
                file_name = "%s-%s-%d.pickle" % (self._name(), kind, self._next_index(kind))
                path = write_atomically(
                    self.snapshots_dir,
                    file_name,
                    lambda f: pickle.dump(snapshot, f, protocol=PICKLE_PROTOCOL),
                    durable=True,
                )
                if kind == "periodic":
                    self._periodic_files.append(path)
                    self._prune_periodic()
                return path
        except Exception as error:  # noqa: BLE001
            self._report_once("snapshot-" + kind, "could not write a %s snapshot: %s" % (kind, describe(error)))
            return None

    def _prune_periodic(self):
        while len(self._periodic_files) > KEEP_PERIODIC:
            try:
                os.remove(self._periodic_files.pop(0))
            except OSError:
                pass

    def _periodic_loop(self):
        while not self._stop.wait(self.options.periodic_s):
            if self._cuda_ready():
                self.write_snapshot("periodic")

    # -- out of memory ------------------------------------------------------------------------

    def on_oom(self, device, alloc_bytes, device_allocated, device_free):
        """The allocator's OOM observer: called after the ``oom`` trace event was recorded and
        before ``OutOfMemoryError`` is raised, with the allocator lock released. Writes the
        snapshot first (the state that failed), then ``progress/<name>.oom.json``. Never raises:
        PyTorch would turn that into a C++ error inside the failing allocation."""
        try:
            import json

            try:
                num_allocs = self.read_stats()["num_allocs"]
            except Exception:  # noqa: BLE001
                num_allocs = None
            # Tried even when history could not be turned on: segments alone still show the
            # state that failed.
            snapshot_path = self.write_snapshot("oom")
            name, record = self._identity()
            with self._lock:
                self._num_ooms_seen += 1
                oom_index = self._num_ooms_seen
            record.update(
                {
                    "device": int(device),
                    "alloc_bytes": int(alloc_bytes),
                    "device_allocated": int(device_allocated),
                    "device_free": int(device_free),
                    "num_allocs": num_allocs,
                    "oom_index": oom_index,
                    "snapshot": (
                        SNAPSHOTS_SUBDIR + "/" + os.path.basename(snapshot_path)
                        if snapshot_path
                        else None
                    ),
                }
            )
            data = json.dumps(record, sort_keys=True).encode("utf-8")
            with self._lock:
                # One record per process: the latest OOM (oom_index counts them).
                write_atomically(
                    self.progress_dir, name + ".oom.json", lambda f: f.write(data), durable=True
                )
        except Exception as error:  # noqa: BLE001 - see docstring
            self._report_once("oom", "could not record the out-of-memory error: " + describe(error))
        self.write_progress()

    def _report_once(self, key, message):
        # Threads retry every tick: one line per kind of failure, not one every 0.5 s.
        if key not in self._reported:
            self._reported.add(key)
            warn(message)


def _now_ms():
    import time

    return int(time.time() * 1000)
