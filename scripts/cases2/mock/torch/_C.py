"""torch._C of the mock: the OOM observer hook."""
import torch as _t


def _cuda_attach_out_of_memory_observer(fn):
    _t._A.observers.append(fn)
