"""Live allocator-snapshot capture for vramscope.

Add two lines to a training script::

    import vramscope_capture
    vramscope_capture.start("snapshots/", every_s=30)

The helper turns on PyTorch's memory-history recording, then writes a snapshot of the CUDA caching
allocator into the folder every ``every_s`` seconds and once more the moment an allocation fails
(through the allocator's out-of-memory observer, so the file shows the state *at* the OOM).
vramscope's "Watch folder..." opens each new file as it appears.

Files are written atomically: the snapshot goes to a hidden ``.NAME.tmp`` file in the same folder,
is flushed to disk, then renamed to ``NAME.pickle``. A watcher therefore never sees half a file.
Only the newest ``keep`` periodic snapshots are kept (they can be hundreds of megabytes each);
OOM snapshots are never deleted.

``torch`` is imported lazily and can be injected (``torch_module=``) so that the writer logic is
testable without PyTorch or a GPU.
"""

import datetime
import importlib
import os
import pickle
import threading

__all__ = ["Capture", "start", "stop", "dump_now"]

# The trace ring buffer holds this many events by default: enough for several training steps of a
# large model while keeping each file in the tens of megabytes ("expect each entry to be several
# KB" -- torch.cuda.memory._record_memory_history docstring).
DEFAULT_MAX_ENTRIES = 100_000

# Pickle protocol 4: readable by every PyTorch memory viewer (protocol 5, Python 3.14's default,
# is rejected by older copies of pytorch.org/memory_viz).
PICKLE_PROTOCOL = 4

SNAPSHOT_SUFFIX = ".pickle"
TMP_SUFFIX = ".tmp"


class Capture:
    """Periodic and at-OOM snapshot writer for one process.

    ``folder``: where snapshots go (created if missing). ``every_s``: seconds between periodic
    snapshots (``None`` or 0: only at OOM and on ``dump``). ``max_entries``: size of the trace ring
    buffer. ``keep``: how many periodic snapshots to keep (``None``: all). ``prefix``: start of
    every file name. ``torch_module``: the ``torch`` module, or a stand-in for tests. ``now``:
    returns a ``datetime``; injectable so that tests get predictable names.
    """

    def __init__(
        self,
        folder,
        every_s=30.0,
        max_entries=DEFAULT_MAX_ENTRIES,
        keep=10,
        prefix="vramscope",
        torch_module=None,
        now=None,
    ):
        if every_s is not None and every_s < 0:
            raise ValueError(f"every_s must be >= 0 seconds, got {every_s!r}")
        if keep is not None and keep < 1:
            raise ValueError(f"keep must be at least 1 (or None for all), got {keep!r}")
        self.folder = os.fspath(folder)
        self.every_s = every_s
        self.max_entries = max_entries
        self.keep = keep
        self.prefix = prefix
        self._torch = torch_module
        self._now = now or datetime.datetime.now
        self._sequence = 0
        self._periodic_files = []
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._thread = None
        self.last_error = None

    @property
    def torch(self):
        if self._torch is None:
            import torch  # noqa: PLC0415 - imported lazily so that tests need no torch

            self._torch = torch
        return self._torch

    def start(self):
        """Turns on memory-history recording, attaches the OOM observer, starts the timer."""
        os.makedirs(self.folder, exist_ok=True)
        self.torch.cuda.memory._record_memory_history(max_entries=self.max_entries)
        self.torch._C._cuda_attach_out_of_memory_observer(self._on_oom)
        # With memory history on, the first snapshot symbolizes stacks and lazily imports
        # torch._inductor.utils. Imported before torch._dynamo, that module runs into a circular
        # import (torch._dynamo.guards imports a name from it while it is half initialized), which
        # leaves torch._dynamo broken: the training script's optimizer then fails with "cannot
        # import name 'IndentedBuffer' from partially initialized module 'torch._inductor.utils'"
        # (seen with torch 2.11 on an H200). So import torch._dynamo first, then take one
        # snapshot here on the caller's thread (not the timer's) and throw it away.
        if getattr(self.torch, "__name__", None) == "torch":
            try:
                importlib.import_module("torch._dynamo")
            except Exception as error:  # noqa: BLE001 - a torch without dynamo still snapshots
                self.last_error = error
        try:
            self.torch.cuda.memory._snapshot()
        except Exception as error:  # noqa: BLE001 - the timer reports write errors itself
            self.last_error = error
        if self.every_s:
            self._thread = threading.Thread(
                target=self._run_timer, name="vramscope-capture", daemon=True
            )
            self._thread.start()
        return self

    def stop(self, final_snapshot=False):
        """Stops the timer; with ``final_snapshot`` writes one last snapshot first."""
        if final_snapshot:
            self.dump("final")
        self._stop_event.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        self._thread = None

    def dump(self, reason="manual"):
        """Writes one snapshot now and returns its path (or ``None`` if writing failed).

        Never raises: a capture helper must not kill the training run it watches. The error is
        kept in ``last_error`` and printed once.
        """
        with self._lock:
            try:
                snapshot = self.torch.cuda.memory._snapshot()
                path = self._write_atomically(snapshot, reason)
            except Exception as error:  # noqa: BLE001 - see docstring
                self.last_error = error
                print(f"vramscope_capture: could not write a snapshot into {self.folder}: {error}")
                return None
            if reason == "periodic":
                self._periodic_files.append(path)
                self._prune_periodic()
            return path

    def _on_oom(self, device, alloc_bytes, device_allocated_bytes, device_free_bytes):
        # Called by the allocator right after it recorded the `oom` trace event and before it
        # raises OutOfMemoryError, so this snapshot shows the state that failed.
        del device, alloc_bytes, device_allocated_bytes, device_free_bytes
        self.dump("oom")

    def _run_timer(self):
        while not self._stop_event.wait(self.every_s):
            self.dump("periodic")

    def _next_name(self, reason):
        self._sequence += 1
        stamp = self._now().strftime("%Y%m%d-%H%M%S")
        return f"{self.prefix}-{stamp}-{os.getpid()}-{self._sequence:05d}-{reason}"

    def _write_atomically(self, snapshot, reason):
        name = self._next_name(reason)
        final_path = os.path.join(self.folder, name + SNAPSHOT_SUFFIX)
        tmp_path = os.path.join(self.folder, "." + name + TMP_SUFFIX)
        try:
            with open(tmp_path, "wb") as tmp_file:
                pickle.dump(snapshot, tmp_file, protocol=PICKLE_PROTOCOL)
                tmp_file.flush()
                os.fsync(tmp_file.fileno())
            os.replace(tmp_path, final_path)
        except BaseException:
            try:
                os.remove(tmp_path)
            except OSError:
                pass
            raise
        return final_path

    def _prune_periodic(self):
        if self.keep is None:
            return
        while len(self._periodic_files) > self.keep:
            oldest = self._periodic_files.pop(0)
            try:
                os.remove(oldest)
            except OSError:
                pass


_active = None


def start(folder, every_s=30.0, max_entries=DEFAULT_MAX_ENTRIES, keep=10, torch_module=None):
    """Starts capturing into ``folder`` (see ``Capture``); returns the ``Capture``.

    Calling it again stops the previous capture first.
    """
    global _active
    if _active is not None:
        _active.stop()
    _active = Capture(
        folder, every_s=every_s, max_entries=max_entries, keep=keep, torch_module=torch_module
    ).start()
    return _active


def dump_now(reason="manual"):
    """Writes a snapshot now with the running capture; returns its path or ``None``."""
    if _active is None:
        raise RuntimeError("vramscope_capture.start(folder) has not been called")
    return _active.dump(reason)


def stop(final_snapshot=False):
    """Stops the running capture, if any."""
    global _active
    if _active is not None:
        _active.stop(final_snapshot=final_snapshot)
        _active = None
