"""A fake `torch` for dry runs of the cases2 scripts on a machine without a GPU (see
test_cases2.py). Tensors are shapes with byte counts; a small imitation of the CUDA caching
allocator (per-stream pools, best-fit splitting, no merging across segments, max_split_size_mb,
releasing whole free segments before failing; expandable segments treated as an ideal allocator)
decides when a job "runs out of memory", with PyTorch's message and OOM observers. Nothing it
computes is a real result: it exists so that argument handling, control flow, file naming,
timeouts and the summary can be tested here. It implements only what jobs.py uses.
"""
import math
import os

__version__ = "0.0-mock"


class _Version:
    cuda = "mock"


version = _Version()


class dtype:
    def __init__(self, name, itemsize):
        self.name = name
        self.itemsize = itemsize

    def __repr__(self):
        return f"torch.{self.name}"


float32 = dtype("float32", 4)
bfloat16 = dtype("bfloat16", 2)
uint8 = dtype("uint8", 1)
float = float32  # noqa: A001  (torch.float)


class device:
    def __init__(self, spec):
        self.spec = spec


class OutOfMemoryError(RuntimeError):
    pass


MiB = 1 << 20
GiB = 1 << 30


# ------------------------------------------------------------------------- the allocator
class _Seg:
    def __init__(self, size, stream):
        self.size = size
        self.stream = stream
        self.blocks = [[0, size, False]]  # [offset, size, allocated]


class _Alloc:
    def __init__(self):
        self.total = int(os.environ.get("MOCK_CUDA_TOTAL_BYTES", str(140 * GiB)))
        self.limit = self.total - 512 * MiB
        self.segments = []
        self.allocated = 0
        self.peak_allocated = 0
        self.peak_reserved = 0
        self.num_ooms = 0
        self.observers = []
        conf = dict(kv.split(":", 1) for kv in
                    os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "").split(",") if ":" in kv)
        self.expandable = conf.get("expandable_segments", "False") == "True"
        self.max_split = int(conf["max_split_size_mb"]) * MiB if "max_split_size_mb" in conf else None

    @property
    def reserved(self):
        if self.expandable:
            return self.allocated
        return sum(s.size for s in self.segments)

    def _find(self, size, stream):
        best = None
        for seg in self.segments:
            if seg.stream is not stream:
                continue
            for b in seg.blocks:
                if b[2] or b[1] < size:
                    continue
                if self.max_split is not None:
                    if size < self.max_split <= b[1]:
                        continue
                    if size >= self.max_split and b[1] >= size + 20 * MiB:
                        continue
                if best is None or b[1] < best[1][1]:
                    best = (seg, b)
        return best

    def _release(self):
        """Frees every whole free segment (what the allocator does before it gives up)."""
        self.segments = [s for s in self.segments if len(s.blocks) > 1 or s.blocks[0][2]]

    def malloc(self, size, stream):
        size = max(512, (size + 511) // 512 * 512)
        if self.expandable:
            if self.allocated + size > self.limit:
                return self._oom(size)
            self.allocated += size
            self._peaks()
            return ("x", size)
        found = self._find(size, stream)
        if found is None:
            seg_size = (size + 2 * MiB - 1) // (2 * MiB) * (2 * MiB)
            if self.reserved + seg_size > self.limit:
                self._release()
            if self.reserved + seg_size > self.limit:
                return self._oom(size)
            seg = _Seg(seg_size, stream)
            self.segments.append(seg)
            found = (seg, seg.blocks[0])
        seg, b = found
        i = seg.blocks.index(b)
        may_split = self.max_split is None or b[1] < self.max_split
        if b[1] - size > MiB and may_split:
            seg.blocks[i:i + 1] = [[b[0], size, True], [b[0] + size, b[1] - size, False]]
            b = seg.blocks[i]
        else:
            b[2] = True
        self.allocated += b[1]
        self._peaks()
        return (seg, b[0])

    def free(self, handle):
        if handle[0] == "x":
            self.allocated -= handle[1]
            return
        seg, offset = handle
        for i, b in enumerate(seg.blocks):
            if b[0] == offset:
                b[2] = False
                self.allocated -= b[1]
                merged = []
                for blk in seg.blocks:
                    if merged and not merged[-1][2] and not blk[2]:
                        merged[-1][1] += blk[1]
                    else:
                        merged.append(list(blk))
                seg.blocks = merged
                return

    def _peaks(self):
        self.peak_allocated = max(self.peak_allocated, self.allocated)
        self.peak_reserved = max(self.peak_reserved, self.reserved)

    def _oom(self, size):
        self.num_ooms += 1
        free = max(0, self.limit - self.reserved)
        for obs in self.observers:
            obs(0, size, self.limit, free)
        raise OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {_fmt(size)}. GPU 0 has a total capacity of "
            f"{_fmt(self.total)} of which {_fmt(free)} is free. Including non-PyTorch memory, this "
            f"process has {_fmt(self.reserved)} memory in use. Of the allocated memory "
            f"{_fmt(self.allocated)} is allocated by PyTorch, and "
            f"{_fmt(self.reserved - self.allocated)} is reserved by PyTorch but unallocated.")


def _fmt(n):
    if n < 1024:
        return f"{n} bytes"
    for unit, k in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if n >= k:
            return f"{n / k:.2f} {unit}"
    return f"{n} bytes"


_A = _Alloc()
_STREAM_STACK = []


class _Storage:
    def __init__(self, nbytes):
        self.handle = _A.malloc(nbytes, cuda.current_stream())

    def __del__(self):
        try:
            _A.free(self.handle)
        except Exception:
            pass


# ------------------------------------------------------------------------- tensors
def _numel(shape):
    return int(math.prod(shape)) if shape else 1


class Tensor:
    def __init__(self, shape, dt=float32, storage=None, requires_grad=False):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = dt
        self.storage = storage if storage is not None else _Storage(_numel(self.shape) * dt.itemsize)
        self.requires_grad = requires_grad
        self.grad = None

    def numel(self):
        return _numel(self.shape)

    def dim(self):
        return len(self.shape)

    def _new(self, shape, dt=None, inputs=()):
        out = Tensor(shape, dt or self.dtype)
        _track(out, (self,) + tuple(inputs))
        return out

    def _view(self, shape):
        return Tensor(shape, self.dtype, storage=self.storage)

    # views
    def view(self, *shape):
        shape = shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape
        if -1 in shape:
            known = _numel([s for s in shape if s != -1])
            shape = tuple(self.numel() // known if s == -1 else s for s in shape)
        if _numel(shape) != self.numel():
            raise RuntimeError(f"shape {shape} is invalid for input of size {self.numel()}")
        return self._view(shape)

    def reshape(self, *shape):
        v = self.view(*shape)
        return Tensor(v.shape, self.dtype)

    def permute(self, *dims):
        if sorted(dims) != list(range(self.dim())):
            raise RuntimeError(f"permute dims {dims} do not match {self.shape}")
        return self._view([self.shape[d] for d in dims])

    def transpose(self, a, b):
        dims = list(range(self.dim()))
        dims[a], dims[b] = dims[b], dims[a]
        return self.permute(*dims)

    def unbind(self, dim=0):
        shape = list(self.shape)
        n = shape.pop(dim)
        return tuple(self._view(shape) for _ in range(n))

    def contiguous(self):
        return self._new(self.shape)

    def __getitem__(self, idx):
        idx = idx if isinstance(idx, tuple) else (idx,)
        shape = list(self.shape)
        for d, ix in enumerate(idx):
            if isinstance(ix, slice):
                shape[d] = len(range(*ix.indices(shape[d])))
            elif ix is Ellipsis:
                break
        return self._view(shape)

    # math
    def _binary(self, other):
        if isinstance(other, Tensor):
            return self._new(_broadcast(self.shape, other.shape), inputs=(other,))
        return self._new(self.shape)

    __add__ = __radd__ = __mul__ = __rmul__ = __sub__ = __truediv__ = _binary

    def __matmul__(self, other):
        if self.shape[-1] != other.shape[-2]:
            raise RuntimeError(f"matmul {self.shape} @ {other.shape}")
        return self._new(tuple(self.shape[:-1]) + (other.shape[-1],), inputs=(other,))

    def square(self):
        return self._new(self.shape)

    def mean(self, *a, **k):
        return self._new(())

    def sum(self, *a, **k):
        return self._new(())

    def float(self):
        return self if self.dtype is float32 else self._new(self.shape, float32)

    def item(self):
        return 0.5

    def __float__(self):
        return 0.5

    def backward(self):
        _drop_graph(self)
        for p in list(_PARAMS_SEEN):
            if p.requires_grad and p.grad is None:
                p.grad = Tensor(p.shape, p.dtype)

    def fill_(self, v):
        return self

    def zero_(self):
        return self

    def add_(self, *a, **k):
        return self

    def normal_(self, *a, **k):
        return self

    def uniform_(self, *a, **k):
        return self

    def mul_(self, *a, **k):
        return self

    def record_stream(self, stream):
        if not isinstance(stream, cuda.Stream):
            raise TypeError("record_stream needs a torch.cuda.Stream")


def _broadcast(a, b):
    out = []
    for x, y in zip(reversed((1,) * (len(b) - len(a)) + tuple(a)),
                    reversed((1,) * (len(a) - len(b)) + tuple(b))):
        if x != y and 1 not in (x, y):
            raise RuntimeError(f"cannot broadcast {a} and {b}")
        out.append(max(x, y))
    return tuple(reversed(out))


_PARAMS_SEEN = []
_GRAD_ENABLED = [True]


def _track(out, inputs):
    """Autograd keeps the inputs of an op alive while its output may still be differentiated."""
    if _GRAD_ENABLED[-1] and any(getattr(t, "requires_grad", False) for t in inputs):
        out.requires_grad = True
        out._saved = [t for t in inputs if isinstance(t, Tensor)]


def _drop_graph(t):
    stack = [t]
    while stack:
        x = stack.pop()
        stack += getattr(x, "_saved", [])
        x._saved = []


def _shape(args):
    return args[0] if len(args) == 1 and isinstance(args[0], (tuple, list)) else args


def empty(*shape, dtype=float32, device=None, **k):
    return Tensor(_shape(shape), dtype)


def randn(*shape, dtype=float32, device=None, **k):
    return Tensor(_shape(shape), dtype)


zeros = ones = empty


def cat(tensors, dim=0):
    shape = list(tensors[0].shape)
    shape[dim] = sum(t.shape[dim] for t in tensors)
    return Tensor(shape, tensors[0].dtype)


def stack(tensors, dim=0):
    return Tensor((len(tensors),) + tensors[0].shape, tensors[0].dtype)


def relu(x):
    return x._new(x.shape)


def _op(x, *others):
    return x._new(x.shape, inputs=others)


def set_float32_matmul_precision(p):
    pass


class _NoGrad:
    def __init__(self, mode=True):
        self.mode = mode

    def __enter__(self):
        _GRAD_ENABLED.append(_GRAD_ENABLED[-1] and not self.mode)
        return self

    def __exit__(self, *a):
        _GRAD_ENABLED.pop()
        return False


inference_mode = no_grad = _NoGrad


class Size(tuple):
    pass


from . import cuda  # noqa: E402
from . import nn  # noqa: E402
from . import optim  # noqa: E402
from . import _C  # noqa: E402

