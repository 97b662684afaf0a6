import sys, time
import cupy as cp, numpy as np
mod = cp.RawModule(path=sys.argv[1])
fill = mod.get_function('mt_fill'); check = mod.get_function('mt_check')
U = np.uint64
CAP = 16
errs = cp.zeros(1 + 4 * CAP, dtype=cp.uint64)
grid, block = (132 * 8,), (512,)
NONE = U(0xFFFFFFFFFFFFFFFF)
def run(buf, n, mode, p, aux, flags, plant=NONE, mask=U(1 << 5), first=0):
    base = U(buf.data.ptr)
    check(grid, block, (base, U(n), U(first), U(p), U(aux), np.uint32(mode), np.uint32(flags), U(errs.data.ptr), U(CAP), plant, mask))
def fl(buf, n, mode, p, aux, first=0):
    fill(grid, block, (U(buf.data.ptr), U(n), U(first), U(p), U(aux), np.uint32(mode)))
n = (1 << 30) // 8
buf = cp.empty(n, dtype=cp.uint64)
for mode, p, aux, flags in [(0, 0xAAAAAAAAAAAAAAAA, 0, 0), (1, 0, 0, 0), (2, 1234, 0, 0), (3, 0, 7, 0), (4, 0x1234, 3, 4)]:
    errs.fill(0); fl(buf, n, mode, p, aux); run(buf, n, mode, p, aux, flags | 2); run(buf, n, mode, p, aux, (flags | 1))
    cp.cuda.runtime.deviceSynchronize(); print('mode', mode, 'errors', int(errs[0]))
h = buf[:24].get(); print('walk/mod sample', [hex(x) for x in h[:4]])
fl(buf, n, 1, 0, 0); print('own address ok', int(buf[5].get()) == buf.data.ptr + 40)
errs.fill(0); fl(buf, n, 0, 0x5555, 0); run(buf, n, 0, 0x5555, 0, 0, plant=U(12345), mask=U(1 << 7))
cp.cuda.runtime.deviceSynchronize(); e = errs.get()
print('planted count', e[0], 'addr', hex(e[1]), 'expected addr', hex(buf.data.ptr + 12345 * 8), 'exp', hex(e[2]), 'act', hex(e[3]), 'reread', hex(e[4]))
del buf
n = (64 << 30) // 8
buf = cp.empty(n, dtype=cp.uint64)
dst = cp.empty((16 << 30) // 8, dtype=cp.uint64)
for mode in [0, 2, 3, 4]:
    fl(buf, n, mode, 0xAA, 0); cp.cuda.runtime.deviceSynchronize(); errs.fill(0)
    t = time.perf_counter(); fl(buf, n, mode, 0xAA, 0); run(buf, n, mode, 0xAA, 0, 2); run(buf, n, mode, 0xAA, 0, 1); cp.cuda.runtime.deviceSynchronize(); dt = time.perf_counter() - t
    print('mode', mode, 'moving inversions 64 GiB: %.4f s, %.0f GB/s (4 x bytes)' % (dt, 4 * n * 8 / dt / 1e9), 'errors', int(errs[0]))
src = buf[: dst.size]
cpy = lambda: cp.cuda.runtime.memcpy(dst.data.ptr, src.data.ptr, dst.nbytes, cp.cuda.runtime.memcpyDeviceToDevice)
for _ in range(2): cpy()
cp.cuda.runtime.deviceSynchronize(); t = time.perf_counter()
for _ in range(10): cpy()
cp.cuda.runtime.deviceSynchronize(); dt = time.perf_counter() - t
print('d2d copy 16 GiB x10: %.0f GB/s (read+write)' % (2 * 10 * dst.nbytes / dt / 1e9))
