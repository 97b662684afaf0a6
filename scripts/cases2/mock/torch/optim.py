"""torch.optim of the mock: SGD and AdamW (AdamW keeps two states per parameter)."""
import torch as _t


class _Opt:
    def __init__(self, params, **k):
        self.params = list(params)
        self.state = []

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None


class SGD(_Opt):
    def step(self):
        pass


class AdamW(_Opt):
    def step(self):
        if not self.state:
            self.state = [(_t.Tensor(p.shape, p.dtype), _t.Tensor(p.shape, p.dtype)) for p in self.params]
