"""torch.nn of the mock: Module, ModuleList, Linear, LayerNorm, Parameter."""
import torch as _t

from . import functional  # noqa: F401


def Parameter(t):
    t.requires_grad = True
    _t._PARAMS_SEEN.append(t)
    return t


class Module:
    def __init__(self):
        object.__setattr__(self, "_children", [])

    def __setattr__(self, name, value):
        if isinstance(value, Module):
            self.__dict__.setdefault("_children", []).append(value)
        object.__setattr__(self, name, value)

    def _own_params(self):
        return [v for v in self.__dict__.values() if isinstance(v, _t.Tensor) and v.requires_grad]

    def parameters(self):
        out = list(self._own_params())
        for c in self.__dict__.get("_children", []):
            out += c.parameters()
        return out

    def __call__(self, *a, **k):
        return self.forward(*a, **k)

    def to(self, *a, **k):
        return self


class ModuleList(Module):
    def __init__(self, modules):
        super().__init__()
        self.items = list(modules)
        self._children.extend(self.items)

    def __iter__(self):
        return iter(self.items)

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class Linear(Module):
    def __init__(self, fin, fout, bias=True, device=None, dtype=None):
        super().__init__()
        dt = dtype or _t.float32
        self.fin, self.fout = fin, fout
        self.weight = Parameter(_t.Tensor((fout, fin), dt))
        self.bias = Parameter(_t.Tensor((fout,), dt)) if bias else None

    def forward(self, x):
        if x.shape[-1] != self.fin:
            raise RuntimeError(f"Linear({self.fin}, {self.fout}) got {x.shape}")
        return x._new(tuple(x.shape[:-1]) + (self.fout,), inputs=(self.weight,))


class LayerNorm(Module):
    def __init__(self, d, device=None, dtype=None):
        super().__init__()
        self.d = d
        self.weight = Parameter(_t.Tensor((d,), dtype or _t.float32))

    def forward(self, x):
        if x.shape[-1] != self.d:
            raise RuntimeError(f"LayerNorm({self.d}) got {x.shape}")
        return x._new(x.shape, inputs=(self.weight,))
