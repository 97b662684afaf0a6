"""torch.cuda.memory of the mock: history flags and a small snapshot pickle."""
import pickle

import torch as _t

_HISTORY = {}


def _record_memory_history(enabled="all", context="all", stacks="all", max_entries=0, **k):
    _HISTORY.update(enabled=enabled, context=context, stacks=stacks, max_entries=max_entries)


def _dump_snapshot(path):
    a = _t._A
    segments = [{"device": 0, "address": i << 32, "total_size": s.size, "stream": 0,
                 "segment_type": "large", "allocated_size": sum(b[1] for b in s.blocks if b[2]),
                 "blocks": [{"address": (i << 32) + b[0], "size": b[1],
                             "state": "active_allocated" if b[2] else "inactive"} for b in s.blocks]}
                for i, s in enumerate(a.segments)]
    with open(path, "wb") as f:
        pickle.dump({"segments": segments, "device_traces": [[]], "mock": True,
                     "history": dict(_HISTORY)}, f, protocol=4)
