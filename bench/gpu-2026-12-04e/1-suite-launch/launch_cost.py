"""Host time of a PyCUDA kernel launch: the plain call against a prepared call (commit_rows'
arguments), 3 x 2000 launches each, interleaved."""
import time
import numpy as np
import pycuda.driver as cuda
cuda.init()
ctx = cuda.Device(0).retain_primary_context()
ctx.push()
from pycuda.compiler import SourceModule
from cellspec.runtime.device import _COMMIT_SOURCE
mod = SourceModule(_COMMIT_SOURCE, no_extern_c=True, options=["-O3"])
plain = mod.get_function("commit_rows")
prepared = mod.get_function("commit_rows")
prepared.prepare("PPPi")
stream = cuda.Stream()
pools = cuda.mem_alloc(1 << 20); news = cuda.mem_alloc(1 << 20); cells = cuda.mem_alloc(4096)
cuda.memset_d8(pools, 0, 1 << 20); cuda.memset_d8(news, 0, 1 << 20); cuda.memset_d8(cells, 0, 4096)
# pointer tables: one pair of pointers to scratch rows
table_p = cuda.mem_alloc(8); table_n = cuda.mem_alloc(8)
cuda.memcpy_htod(table_p, np.array([int(pools)], np.uint64)); cuda.memcpy_htod(table_n, np.array([int(news)], np.uint64))
P, N, C = int(table_p), int(table_n), int(cells)
def run_plain(n):
    for _ in range(n):
        plain(np.uintp(P), np.uintp(N), np.uintp(C), np.int32(128), block=(32, 1, 1), grid=(1, 1), stream=stream)
def run_prepared(n):
    for _ in range(n):
        prepared.prepared_async_call((1, 1), (32, 1, 1), stream, P, N, C, 128)
res = {"plain": [], "prepared": []}
for f in (run_plain, run_prepared):
    f(200); stream.synchronize()
for _ in range(3):
    for name, f in (("plain", run_plain), ("prepared", run_prepared)):
        t = time.perf_counter(); f(2000); dt = time.perf_counter() - t; stream.synchronize()
        res[name].append(1e6 * dt / 2000)
print({k: [round(v, 2) for v in vs] for k, vs in res.items()}, "us of host time a launch")
ctx.pop()
