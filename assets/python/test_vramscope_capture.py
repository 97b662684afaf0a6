"""Tests of the capture helper's writer logic with a stand-in for torch (no PyTorch, no GPU).

Run: ``python3 -m unittest discover -s assets/python -p 'test_*.py'`` (the Rust test
``tests/allocator_capture_helper.rs`` runs exactly this).
"""

import datetime
import os
import pickle
import tempfile
import threading
import time
import types
import unittest

import vramscope_capture


class FakeTorch:
    """Records the calls the helper makes and returns a snapshot-shaped dict."""

    def __init__(self, fail_snapshot=False):
        self.recorded_max_entries = None
        self.oom_observer = None
        self.snapshots_taken = 0
        self.snapshot_threads = []
        self.fail_snapshot = fail_snapshot
        self.cuda = types.SimpleNamespace(
            memory=types.SimpleNamespace(
                _record_memory_history=self._record_memory_history,
                _snapshot=self._snapshot,
            )
        )
        self._C = types.SimpleNamespace(
            _cuda_attach_out_of_memory_observer=self._attach_observer
        )

    def _record_memory_history(self, max_entries):
        self.recorded_max_entries = max_entries

    def _attach_observer(self, observer):
        self.oom_observer = observer

    def _snapshot(self):
        self.snapshot_threads.append(threading.current_thread())
        if self.fail_snapshot:
            raise RuntimeError("CUDA driver went away")
        self.snapshots_taken += 1
        return {
            "segments": [
                {
                    "device": 0,
                    "address": 0x7F0000000000,
                    "total_size": 2 << 20,
                    "allocated_size": 512,
                    "active_size": 512,
                    "requested_size": 100,
                    "stream": 0,
                    "segment_type": "small",
                    "segment_pool_id": (0, 0),
                    "is_expandable": False,
                    "frames": [],
                    "blocks": [
                        {
                            "address": 0x7F0000000000,
                            "size": 512,
                            "requested_size": 100,
                            "state": "active_allocated",
                            "frames": [],
                        },
                        {
                            "address": 0x7F0000000200,
                            "size": (2 << 20) - 512,
                            "requested_size": 0,
                            "state": "inactive",
                            "frames": [],
                        },
                    ],
                }
            ],
            "device_traces": [[]],
            "sequence": self.snapshots_taken,
        }


def fixed_clock():
    return datetime.datetime(2026, 11, 30, 9, 0, 0)


class CaptureTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.folder = os.path.join(self.tmp.name, "snapshots")

    def tearDown(self):
        self.tmp.cleanup()

    def listing(self):
        return sorted(os.listdir(self.folder))

    def test_start_records_history_and_attaches_observer(self):
        torch = FakeTorch()
        capture = vramscope_capture.Capture(
            self.folder, every_s=None, max_entries=1234, torch_module=torch
        ).start()
        self.assertEqual(torch.recorded_max_entries, 1234)
        self.assertIsNotNone(torch.oom_observer)
        self.assertTrue(os.path.isdir(self.folder))
        capture.stop()

    def test_first_snapshot_is_taken_on_the_calling_thread(self):
        # The first snapshot lazily imports parts of torch; on the timer thread that import can
        # race the training script's own imports (seen with torch 2.11 on an H200).
        torch = FakeTorch()
        capture = vramscope_capture.Capture(
            self.folder, every_s=0.05, torch_module=torch
        ).start()
        capture.stop()
        self.assertGreaterEqual(len(torch.snapshot_threads), 1)
        self.assertIs(torch.snapshot_threads[0], threading.current_thread())

    def test_oom_observer_writes_a_complete_snapshot(self):
        torch = FakeTorch()
        vramscope_capture.Capture(
            self.folder, every_s=None, torch_module=torch, now=fixed_clock
        ).start()
        torch.oom_observer(0, 32 << 20, 4 << 30, 135 << 30)
        names = self.listing()
        self.assertEqual(len(names), 1, names)
        name = names[0]
        self.assertTrue(name.startswith("vramscope-20261130-090000-"), name)
        self.assertTrue(name.endswith("-00001-oom.pickle"), name)
        with open(os.path.join(self.folder, name), "rb") as f:
            data = pickle.load(f)
        self.assertEqual(data["segments"][0]["blocks"][0]["requested_size"], 100)
        self.assertEqual(data["sequence"], 2)  # snapshot 1 was start()'s warm-up, not written

    def test_written_file_uses_protocol_4(self):
        torch = FakeTorch()
        capture = vramscope_capture.Capture(self.folder, every_s=None, torch_module=torch).start()
        path = capture.dump()
        with open(path, "rb") as f:
            header = f.read(2)
        self.assertEqual(header, b"\x80\x04")

    def test_no_temporary_file_is_left_behind(self):
        torch = FakeTorch()
        capture = vramscope_capture.Capture(self.folder, every_s=None, torch_module=torch).start()
        for _ in range(3):
            capture.dump()
        names = self.listing()
        self.assertEqual(len(names), 3)
        self.assertFalse([n for n in names if n.startswith(".") or n.endswith(".tmp")], names)

    def test_failed_pickling_removes_the_temporary_file_and_keeps_running(self):
        torch = FakeTorch()
        torch.cuda.memory._snapshot = lambda: {"unpicklable": threading.Lock()}
        capture = vramscope_capture.Capture(self.folder, every_s=None, torch_module=torch).start()
        self.assertIsNone(capture.dump())
        self.assertIsNotNone(capture.last_error)
        self.assertEqual(self.listing(), [])

    def test_snapshot_error_does_not_raise(self):
        torch = FakeTorch(fail_snapshot=True)
        capture = vramscope_capture.Capture(self.folder, every_s=None, torch_module=torch).start()
        torch.oom_observer(0, 1, 2, 3)
        self.assertIn("driver", str(capture.last_error))
        self.assertEqual(self.listing(), [])

    def test_periodic_snapshots_are_pruned_but_oom_ones_kept(self):
        torch = FakeTorch()
        capture = vramscope_capture.Capture(
            self.folder, every_s=None, keep=2, torch_module=torch
        ).start()
        for _ in range(4):
            capture.dump("periodic")
        torch.oom_observer(0, 1, 2, 3)
        names = self.listing()
        self.assertEqual(len(names), 3, names)
        self.assertEqual(sum(n.endswith("-periodic.pickle") for n in names), 2)
        self.assertTrue(any(n.endswith("-00003-periodic.pickle") for n in names), names)
        self.assertTrue(any(n.endswith("-00004-periodic.pickle") for n in names), names)
        self.assertTrue(any(n.endswith("-00005-oom.pickle") for n in names), names)

    def test_timer_writes_periodic_snapshots(self):
        torch = FakeTorch()
        capture = vramscope_capture.Capture(
            self.folder, every_s=0.05, keep=None, torch_module=torch
        ).start()
        deadline = time.monotonic() + 10.0
        while torch.snapshots_taken < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        capture.stop()
        self.assertGreaterEqual(torch.snapshots_taken, 2)
        self.assertTrue(all(n.endswith("-periodic.pickle") for n in self.listing()))

    def test_module_level_start_replaces_previous_capture(self):
        first = FakeTorch()
        second = FakeTorch()
        vramscope_capture.start(self.folder, every_s=None, torch_module=first)
        capture = vramscope_capture.start(self.folder, every_s=None, torch_module=second)
        path = vramscope_capture.dump_now("manual")
        vramscope_capture.stop()
        # each start() takes one warm-up snapshot; only the second capture took the dump
        self.assertEqual(second.snapshots_taken, 2)
        self.assertEqual(first.snapshots_taken, 1)
        self.assertTrue(path.endswith("-manual.pickle"))
        self.assertIs(capture.torch, second)

    def test_bad_arguments_are_rejected(self):
        with self.assertRaises(ValueError):
            vramscope_capture.Capture(self.folder, every_s=-1)
        with self.assertRaises(ValueError):
            vramscope_capture.Capture(self.folder, keep=0)


if __name__ == "__main__":
    unittest.main()
