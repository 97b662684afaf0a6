"""torch.cuda of the mock (see torch/__init__.py)."""
import torch as _t

OutOfMemoryError = _t.OutOfMemoryError


class _Props:
    name = "Mock GPU (no CUDA)"

    @property
    def total_memory(self):
        return _t._A.total


class Stream:
    def __init__(self, device=None):
        pass

    def wait_stream(self, other):
        pass


_DEFAULT = Stream()


def current_stream(device=None):
    return _t._STREAM_STACK[-1] if _t._STREAM_STACK else _DEFAULT


class stream:
    def __init__(self, s):
        self.s = s

    def __enter__(self):
        _t._STREAM_STACK.append(self.s)
        return self.s

    def __exit__(self, *a):
        _t._STREAM_STACK.pop()
        return False


def mem_get_info(device=None):
    return (max(0, _t._A.limit - _t._A.reserved), _t._A.total)


def get_device_properties(device=None):
    return _Props()


def set_per_process_memory_fraction(fraction, device=None):
    if not 0 < fraction <= 1:
        raise ValueError(f"invalid fraction {fraction}")
    _t._A.limit = int(fraction * _t._A.total)


def memory_allocated(device=None):
    return _t._A.allocated


def memory_reserved(device=None):
    return _t._A.reserved


def max_memory_allocated(device=None):
    return _t._A.peak_allocated


def memory_stats(device=None):
    a = _t._A
    return {"allocated_bytes.all.current": a.allocated, "allocated_bytes.all.peak": a.peak_allocated,
            "reserved_bytes.all.current": a.reserved, "reserved_bytes.all.peak": a.peak_reserved,
            "num_ooms": a.num_ooms, "num_alloc_retries": 0}


def synchronize(device=None):
    pass


from . import memory  # noqa: E402,F401
