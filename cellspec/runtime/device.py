"""Device memory for the IOBinding backends: buffers at fixed addresses, staging copies, and the
commit of a step's keys and values into the pools (a scatter of rows).

`CudaDevice` is PyCUDA on the device's primary context (shared with ONNX Runtime), imported
only when constructed. `HostDevice` is the same interface over numpy memory: the CPU tests run
the whole binding path (buffers by address, staging, commits through commit tables) with it.
"""

from __future__ import annotations

import atexit
import bisect
import ctypes
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from cellspec.errors import ExecutionFailed, InvalidArgument

_INSTALL = "pip install 'cellspec[gpu]' (onnxruntime-gpu and pycuda)"

# pool[cells[t]] = new[t] for every (pool, new) pair p of a commit table, [3, pairs]: the pools'
# addresses, the new rows' addresses, each pair's row size in bytes (the pairs of several pools
# of different widths, a verify's keys and values and its taps, in one launch; one block per
# (token, pair)). Rows are copied 16 bytes at a time when the row size and the addresses allow it.
_COMMIT_SOURCE = r"""
extern "C" __global__ void commit_rows(const unsigned long long* table, int pairs,
                                       const long long* cells) {
    const long long t = blockIdx.x;
    const long long row_bytes = (long long)table[2 * pairs + blockIdx.y];
    char* dst = (char*)table[blockIdx.y] + cells[t] * row_bytes;
    const char* src = (const char*)table[pairs + blockIdx.y] + t * row_bytes;
    if (row_bytes % 16 == 0) {
        for (int i = threadIdx.x; i < row_bytes / 16; i += blockDim.x)
            ((uint4*)dst)[i] = ((const uint4*)src)[i];
    } else {
        for (int i = threadIdx.x; i < row_bytes; i += blockDim.x) dst[i] = src[i];
    }
}

// dst[t] = pool[cells[t]]: the rows of one pool a step reads (the draft's context from taps).
extern "C" __global__ void gather_rows(char* dst, const char* pool, const long long* cells,
                                       int row_bytes) {
    const long long t = blockIdx.x;
    const char* src = pool + cells[t] * (long long)row_bytes;
    char* out = dst + t * (long long)row_bytes;
    if (row_bytes % 16 == 0) {
        for (int i = threadIdx.x; i < row_bytes / 16; i += blockDim.x)
            ((uint4*)out)[i] = ((const uint4*)src)[i];
    } else {
        for (int i = threadIdx.x; i < row_bytes; i += blockDim.x) out[i] = src[i];
    }
}

// Each owner's tree (one block of 32 threads each) as runtime/trees.py's grow_tree grows it
// from the draft block's choices (ids int64, logp float32, [owners, depth_limit, branches]),
// the first `choices` of each row (all `branches`, or 1: a chain of first choices): the
// `nodes` most probable nodes, best first, ties to the node found first; scores summed in
// double, in grow_tree's order. Written into a verify's staged inputs (row o of each, a row of
// `width` slots): tokens[1..nodes] (slot 0, the anchor, staged), positions[i] = positions[0] +
// depth(i), attn_mask[i][cells + j] = j is i or an ancestor of i (keys: a mask row's columns);
// and record [owners, 3, nodes + 1]: every row's token, parent (-1 for the anchor) and depth.
// The block's threads copy the owner's choices into shared memory (up to GROW_SHARED of them;
// more are read where they are), thread 0 searches, and they all write the rows and mask.
// (Until 2026-12-07 one thread did it all from global memory: 20 us of a round on an H100, now
// 15; bench/NOTES.md, sixteenth sitting.)
#define MAX_TREE_ROWS 64
#define GROW_SHARED 1024
extern "C" __global__ void grow_trees(const long long* ids, const float* logp, int depth_limit,
                                      int branches, int choices, int nodes, long long* tokens,
                                      long long* positions, unsigned char* mask, int width,
                                      int keys, int cells, long long* record) {
    const int o = blockIdx.x;
    const int count = depth_limit * branches;
    const long long* global_ids = ids + (long long)o * count;
    const float* global_logp = logp + (long long)o * count;
    __shared__ long long shared_ids[GROW_SHARED];
    __shared__ float shared_logp[GROW_SHARED];
    __shared__ long long token[MAX_TREE_ROWS];
    __shared__ int parent[MAX_TREE_ROWS], depth[MAX_TREE_ROWS];
    __shared__ unsigned long long seen[MAX_TREE_ROWS];
    __shared__ int grown;
    const bool staged = count <= GROW_SHARED;
    if (staged) {
        for (int i = threadIdx.x; i < count; i += blockDim.x) {
            shared_ids[i] = global_ids[i];
            shared_logp[i] = global_logp[i];
        }
    }
    __syncthreads();
    const long long* my_ids = staged ? shared_ids : global_ids;
    const float* my_logp = staged ? shared_logp : global_logp;
    long long* row_tokens = tokens + (long long)o * width;
    long long* row_positions = positions + (long long)o * width;
    if (threadIdx.x == 0) {
        double c_score[2 * MAX_TREE_ROWS];
        int c_order[2 * MAX_TREE_ROWS], c_depth[2 * MAX_TREE_ROWS], c_choice[2 * MAX_TREE_ROWS];
        int c_parent[2 * MAX_TREE_ROWS];
        double score[MAX_TREE_ROWS];
        score[0] = 0.0; parent[0] = -1; depth[0] = 0; token[0] = row_tokens[0];
        int live = 1, order = 1, rows = 1;
        c_score[0] = (double)my_logp[0]; c_order[0] = 0; c_depth[0] = 1; c_choice[0] = 0;
        c_parent[0] = 0;
        while (live > 0 && rows <= nodes) {
            int b = 0;
            for (int c = 1; c < live; ++c)
                if (c_score[c] > c_score[b]
                    || (c_score[c] == c_score[b] && c_order[c] < c_order[b]))
                    b = c;
            const double s = c_score[b];
            const int d = c_depth[b], ch = c_choice[b], p = c_parent[b];
            --live;
            c_score[b] = c_score[live]; c_order[b] = c_order[live]; c_depth[b] = c_depth[live];
            c_choice[b] = c_choice[live]; c_parent[b] = c_parent[live];
            const int row = rows++;
            token[row] = my_ids[(d - 1) * branches + ch];
            parent[row] = p; depth[row] = d; score[row] = s;
            if (ch + 1 < choices) {
                c_score[live] = score[p] + (double)my_logp[(d - 1) * branches + ch + 1];
                c_order[live] = order++; c_depth[live] = d; c_choice[live] = ch + 1;
                c_parent[live] = p; ++live;
            }
            if (d < depth_limit) {
                c_score[live] = s + (double)my_logp[d * branches];
                c_order[live] = order++; c_depth[live] = d + 1; c_choice[live] = 0;
                c_parent[live] = row; ++live;
            }
        }
        for (int i = 0; i < rows; ++i) seen[i] = (i ? seen[parent[i]] : 0ull) | (1ull << i);
        grown = rows;
    }
    const long long base = row_positions[0];  // (read by every thread before any writes it)
    __syncthreads();
    const int rows = grown;
    long long* out = record + (long long)o * 3 * rows;
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
        row_tokens[i] = token[i];
        row_positions[i] = base + depth[i];
        out[i] = token[i]; out[rows + i] = parent[i]; out[2 * rows + i] = depth[i];
    }
    for (int k = threadIdx.x; k < rows * rows; k += blockDim.x) {
        const int i = k / rows, j = k % rows;
        mask[((long long)o * width + i) * keys + cells + j] = (seen[i] >> j) & 1ull;
    }
}
// Each owner's grown tree (record [owners, 3, rows], as grow_trees writes it) walked by its
// verify's greedy draws (drawn: owner o's rows at o * stride), as runtime/trees.py's walk does,
// one block of 32 threads per owner, into a draft block's staged inputs (row o of each, `width`
// slots, `cells` columns of cell table): the block was staged with the owner's draft cells
// holding its tree's rows in row order from position base = positions[0] (the verify's anchor).
// The accepted rows' cells move down to base, base + 1, ... (as CellCache.keep_path moves
// them), the mask's columns of the others are cleared, the draw after the path becomes the
// block's anchor at base + path length; out [owners, 2]: each path's length (the anchor's row
// included) and that draw. The threads copy the tree, the draws and the tree's cells into
// shared memory, thread 0 walks, and they all write (a path only ever moves a cell down to a
// slot it has passed, so the cells it moves are read before any is written).
extern "C" __global__ void walk_trees(const long long* drawn, int stride,
                                      const long long* record, int rows, long long* tokens,
                                      long long* positions, long long* cell_table,
                                      unsigned char* mask, int width, int cells,
                                      long long* out) {
    const int o = blockIdx.x;
    __shared__ long long tree[3 * MAX_TREE_ROWS];  // tokens, parents, depths
    __shared__ long long my_drawn[MAX_TREE_ROWS];
    __shared__ long long tree_cells[MAX_TREE_ROWS];  // the table's cells from base
    __shared__ long long path_cells[MAX_TREE_ROWS];  // the accepted rows' cells, in order
    __shared__ int walked;
    __shared__ long long next_token;
    const long long* my_tree = record + (long long)o * 3 * rows;
    long long* row_positions = positions + (long long)o * width;
    long long* table = cell_table + (long long)o * cells;
    const long long base = row_positions[0];  // (read by every thread before any writes it)
    for (int i = threadIdx.x; i < 3 * rows; i += blockDim.x) tree[i] = my_tree[i];
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
        my_drawn[i] = drawn[(long long)o * stride + i];
        if (base + i < cells) tree_cells[i] = table[base + i];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        int row = 0, length = 1;
        for (;;) {
            int next = -1;
            for (int c = row + 1; c < rows; ++c)
                if (tree[rows + c] == row && tree[c] == my_drawn[row]) { next = c; break; }
            if (next < 0) break;
            path_cells[length] = tree_cells[next];
            ++length;
            row = next;
        }
        walked = length;
        next_token = my_drawn[row];
        tokens[(long long)o * width] = next_token;
        out[2 * o] = length;
        out[2 * o + 1] = next_token;
    }
    __syncthreads();
    const int length = walked;
    const long long end = base + length;
    for (int k = 1 + threadIdx.x; k < length; k += blockDim.x) table[base + k] = path_cells[k];
    for (int j = threadIdx.x; j < width; j += blockDim.x) row_positions[j] = end + j;
    const long long span = (base + rows < cells ? base + rows : cells) - base;
    for (long long k = threadIdx.x; k < (long long)width * span; k += blockDim.x) {
        const long long j = k / span, c = base + k % span;
        mask[((long long)o * width + j) * (cells + width) + c] = c < end;
    }
}
// Each owner's sampled verify rows given the uniforms of their positions (one thread per
// owner): in the sampler's staged params [R, 4] (temperature, top_p, top_k, uniform; owner o's
// rows at o * stride), tree row i (record [owners, 3, rows] as grow_trees writes it) sits at
// its anchor's position plus its depth and draws with the uniform of the position after it:
// chain[o][offset + depth(i)], where chain [owners, chain_len] holds the uniforms of the
// positions 1, 2, ... after the anchor the host staged, and offset is 0, or with `walked` (out
// [owners, 2] of walk_trees) the accepted path's length: the anchor the walk moved on to.
extern "C" __global__ void tree_uniforms(float* params, const long long* record,
                                         const float* chain, int chain_len,
                                         const long long* walked, int owners, int rows,
                                         int stride) {
    const int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= owners) return;
    const long long* depth = record + (long long)o * 3 * rows + 2 * rows;
    const float* mine = chain + (long long)o * chain_len + (walked ? walked[2 * o] : 0);
    float* owner = params + (long long)o * stride * 4;
    for (int i = 0; i < rows; ++i) owner[i * 4 + 3] = mine[depth[i]];
}
"""

# each kernel's parameters as struct characters ("P" an address, "i" an int32), for
# prepared launches
_KERNEL_ARGS = {
    "commit_rows": "PiP",
    "gather_rows": "PPPi",
    "grow_trees": "PPiiiiPPPiiiP",
    "walk_trees": "PiPiPPPPiiP",
    "tree_uniforms": "PPPiPiii",
}

MAX_TREE_ROWS = 64  # grow_trees' limit: a tree of at most 63 nodes and its anchor


class _Done:
    """HostDevice's mark: its work is done when queued."""

    def synchronize(self) -> None:
        pass


_DONE = _Done()


@dataclass
class Buffer:
    """`nbytes` of device memory at the fixed address `ptr`."""

    ptr: int
    nbytes: int
    handle: object  # keeps the allocation alive


class HostDevice:
    """numpy memory posing as a device (ONNX Runtime's CPU provider binds it by address)."""

    ort_device = "cpu"
    captures = False  # no CUDA graphs of its own (see CudaDevice.capture)

    def __init__(self) -> None:
        self.arrays: dict[int, np.ndarray] = {}
        self._bases: list[int] = []  # the arrays' addresses, ascending

    def alloc(self, nbytes: int) -> Buffer:
        array = np.zeros(max(nbytes, 1), np.uint8)
        self.arrays[array.ctypes.data] = array
        bisect.insort(self._bases, array.ctypes.data)
        return Buffer(array.ctypes.data, nbytes, array)

    def pinned(self, nbytes: int) -> np.ndarray:
        return np.zeros(max(nbytes, 1), np.uint8)

    def upload(self, buffer: Buffer, host: np.ndarray) -> None:
        data = np.ascontiguousarray(host).reshape(-1).view(np.uint8)
        assert data.size <= buffer.nbytes, (data.size, buffer.nbytes)
        self._bytes(buffer.ptr, data.size)[:] = data

    def download(self, host: np.ndarray, buffer: Buffer) -> None:
        view = host.reshape(-1).view(np.uint8)
        view[:] = self._bytes(buffer.ptr, view.size)

    def synchronize(self) -> None:
        pass

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """Device to device, between addresses inside buffers."""
        self._bytes(dst, nbytes)[:] = self._bytes(src, nbytes)

    def download_later(self, host: np.ndarray, ptr: int) -> None:
        host.reshape(-1).view(np.uint8)[:] = self._bytes(ptr, host.nbytes)

    def mark(self, reuse=None) -> _Done:
        return _DONE

    def commit(self, table: Buffer, pairs: int, cells: int, count: int, widest: int) -> None:
        rows = self._bytes(cells, 8 * count).view(np.int64)
        entries = self._bytes(table.ptr, 24 * pairs).view(np.uint64).reshape(3, pairs)
        for pool, new, row_bytes in entries.T.tolist():
            source = self._bytes(new, count * row_bytes).reshape(count, row_bytes)
            for t, cell in enumerate(rows.tolist()):
                self._bytes(pool + cell * row_bytes, row_bytes)[:] = source[t]

    def gather(self, dst: Buffer, pool: Buffer, cells: int, count: int,
               row_bytes: int) -> None:
        rows = self._bytes(cells, 8 * count).view(np.int64)
        for t, cell in enumerate(rows.tolist()):
            self._bytes(dst.ptr + t * row_bytes, row_bytes)[:] = \
                self._bytes(pool.ptr + cell * row_bytes, row_bytes)

    def grow_trees(self, ids: int, logp: int, owners: int, depth_limit: int, branches: int,
                   nodes: int, tokens: int, positions: int, mask: int, width: int, keys: int,
                   cells: int, record: int, choices: int | None = None) -> None:
        """CudaDevice.grow_trees by runtime/trees.py itself, over the same memory."""
        from cellspec.runtime.trees import ancestor_mask, grow_tree

        shape = (owners, depth_limit, branches)
        count = int(np.prod(shape))
        all_ids = self._bytes(ids, 8 * count).view(np.int64).reshape(shape)
        all_logp = self._bytes(logp, 4 * count).view(np.float32).reshape(shape)
        rows = nodes + 1
        out = self._bytes(record, 24 * owners * rows).view(np.int64).reshape(owners, 3, rows)
        for o in range(owners):
            tree = grow_tree(all_ids[o], all_logp[o], nodes, choices)
            assert tree.rows == rows, "a tree of fewer nodes than asked"
            row_tokens = self._bytes(tokens + 8 * o * width, 8 * rows).view(np.int64)
            row_tokens[1:] = tree.tokens
            row_positions = self._bytes(positions + 8 * o * width, 8 * rows).view(np.int64)
            row_positions[:] = row_positions[0] + tree.depths
            seen = ancestor_mask(tree.parents)
            for i in range(rows):
                self._bytes(mask + (o * width + i) * keys + cells, rows)[:] = seen[i]
            out[o] = [row_tokens, tree.parents, tree.depths]

    def walk_trees(self, drawn: int, stride: int, record: int, owners: int, rows: int,
                   tokens: int, positions: int, cell_table: int, mask: int, width: int,
                   cells: int, out: int) -> None:
        """CudaDevice.walk_trees by runtime/trees.py's walk itself, over the same memory."""
        from cellspec.runtime.trees import DraftTree, walk

        trees = self._bytes(record, 24 * owners * rows).view(np.int64).reshape(owners, 3, rows)
        result = self._bytes(out, 16 * owners).view(np.int64).reshape(owners, 2)
        for o in range(owners):
            path, burst = walk(DraftTree.from_record(trees[o]),
                               self._bytes(drawn + 8 * o * stride, 8 * rows).view(np.int64))
            row_positions = self._bytes(positions + 8 * o * width, 8 * width).view(np.int64)
            base, length = int(row_positions[0]), len(path)
            table = self._bytes(cell_table + 8 * o * cells, 8 * cells).view(np.int64)
            table[base: base + length] = table[base + np.array(path)]
            self._bytes(tokens + 8 * o * width, 8).view(np.int64)[0] = burst[-1]
            row_positions[:] = base + length + np.arange(width)
            seen = min(rows, cells - base)
            for j in range(width):
                start = mask + (o * width + j) * (cells + width) + base
                self._bytes(start, seen)[:] = np.arange(seen) < length
            result[o] = length, burst[-1]

    def tree_uniforms(self, params: int, record: int, chain: int, chain_len: int, walked: int,
                      owners: int, rows: int, stride: int) -> None:
        """CudaDevice.tree_uniforms in numpy, over the same memory."""
        depths = self._bytes(record, 24 * owners * rows).view(np.int64).reshape(
            owners, 3, rows)[:, 2]
        chains = self._bytes(chain, 4 * owners * chain_len).view(np.float32).reshape(
            owners, chain_len)
        offsets = (self._bytes(walked, 16 * owners).view(np.int64)[0::2] if walked
                   else np.zeros(owners, np.int64))
        for o in range(owners):
            uniform = self._bytes(params + 16 * o * stride, 16 * rows).view(np.float32)[3::4]
            uniform[:] = chains[o, offsets[o] + depths[o]]

    def _bytes(self, ptr: int, nbytes: int) -> np.ndarray:
        """The bytes at [ptr, ptr + nbytes), which must lie inside one array: the one at the
        highest address not above ptr (arrays never overlap)."""
        index = bisect.bisect_right(self._bases, ptr) - 1
        if index >= 0:
            base = self._bases[index]
            array = self.arrays[base]
            if ptr + nbytes <= base + array.size:
                return array[ptr - base: ptr - base + nbytes]
        raise AssertionError(f"address {ptr:#x} (+{nbytes}) is in no buffer")


class CudaGraph:
    """A CUDA graph captured on a stream (CudaDevice.capture), instantiated: `launch()` queues
    all its work on that stream in one call of the driver's."""

    def __init__(self, driver, graph_exec: int, stream: int, nodes: int) -> None:
        self._driver, self._exec, self._stream = driver, graph_exec, stream
        self.nodes = nodes  # kernels, copies and other nodes it holds
        self._launch = driver.cuGraphLaunch

    def launch(self) -> None:
        status = self._launch(self._exec, self._stream)
        if status:
            raise ExecutionFailed(f"CUDA: cuGraphLaunch: {_driver_error(self._driver, status)}")

    def __del__(self) -> None:
        if self._exec:
            self._driver.cuGraphExecDestroy(self._exec)
            self._exec = None


_CAPTURE_RELAXED = 2  # CU_STREAM_CAPTURE_MODE_RELAXED: the capturing thread may still allocate


def _driver_error(driver, status: int) -> str:
    name = ctypes.c_char_p()
    driver.cuGetErrorName(status, ctypes.byref(name))
    return (name.value or b"CUDA error").decode() + f" {status}"


def _cuda_driver():
    """libcuda's graph calls through ctypes, their argument types declared (PyCUDA's own
    graph API differs between its releases; the driver's does not)."""
    driver = ctypes.CDLL("libcuda.so.1")
    pointer, handle = ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p
    for name, args in (("cuStreamBeginCapture_v2", [handle, ctypes.c_int]),
                       ("cuStreamEndCapture", [handle, pointer]),
                       ("cuGraphInstantiateWithFlags", [pointer, handle, ctypes.c_ulonglong]),
                       ("cuGraphLaunch", [handle, handle]),
                       ("cuGraphGetNodes", [handle, pointer, ctypes.POINTER(ctypes.c_size_t)]),
                       ("cuGraphDestroy", [handle]),
                       ("cuGraphExecDestroy", [handle]),
                       ("cuGetErrorName", [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)])):
        function = getattr(driver, name)
        function.argtypes, function.restype = args, ctypes.c_int
    return driver


class CudaDevice:
    """PyCUDA on device 0's primary context: allocations, page-locked staging, one stream."""

    ort_device = "cuda"
    captures = True

    def __init__(self, device_id: int = 0) -> None:
        try:
            import pycuda.driver as cuda
        except ImportError as error:
            raise InvalidArgument(f"backend ort-cuda needs PyCUDA: {_INSTALL}") from error
        try:
            cuda.init()
            self.context = cuda.Device(device_id).retain_primary_context()
        except cuda.Error as error:
            raise InvalidArgument(f"backend ort-cuda: no usable CUDA device {device_id} "
                                  f"({error})") from error
        self.context.push()
        atexit.register(self.context.pop)  # PyCUDA aborts at exit with a context still pushed
        self.cuda = cuda
        self.stream = cuda.Stream()
        self._kernels: dict[str, object] = {}  # name -> prepared function (see _launch)
        self._driver = None  # libcuda through ctypes, loaded at the first capture

    def capture(self, work: Callable[[], None]) -> CudaGraph | None:
        """What `work` queues on the stream, captured as one CUDA graph and instantiated, not
        run (the driver's stream capture, relaxed: ONNX Runtime's runs inside it may allocate);
        None where it cannot be: `work` raised, or queued something a graph cannot hold (the
        capture then fails and nothing of it ran). The caller then runs `work` uncaptured."""
        if self._driver is None:
            self._driver = _cuda_driver()
        driver, stream = self._driver, self.stream.handle
        if driver.cuStreamBeginCapture_v2(stream, _CAPTURE_RELAXED):
            return None
        failed = False
        try:
            work()
        except Exception:  # noqa: BLE001 (whatever it was, the uncaptured run says it again)
            failed = True
        graph, graph_exec, nodes = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_size_t()
        ended = driver.cuStreamEndCapture(stream, ctypes.byref(graph))
        if graph.value:
            driver.cuGraphGetNodes(graph, None, ctypes.byref(nodes))
            if not (failed or ended) and driver.cuGraphInstantiateWithFlags(
                    ctypes.byref(graph_exec), graph, 0):
                graph_exec = ctypes.c_void_p()
            driver.cuGraphDestroy(graph)  # the instantiated graph needs it no more
        if failed or ended or not graph_exec.value:
            return None
        return CudaGraph(driver, graph_exec.value, stream, nodes.value)

    def alloc(self, nbytes: int) -> Buffer:
        allocation = self.cuda.mem_alloc(max(nbytes, 1))
        self.cuda.memset_d8(allocation, 0, max(nbytes, 1))
        return Buffer(int(allocation), nbytes, allocation)

    def pinned(self, nbytes: int) -> np.ndarray:
        return self.cuda.pagelocked_empty(max(nbytes, 1), np.uint8)

    def upload(self, buffer: Buffer, host: np.ndarray) -> None:
        """Async on the stream: `host` must stay untouched until the next synchronize."""
        self.cuda.memcpy_htod_async(buffer.ptr, host, self.stream)

    def download(self, host: np.ndarray, buffer: Buffer) -> None:
        self.cuda.memcpy_dtoh_async(host, buffer.ptr, self.stream)
        self.synchronize()

    def synchronize(self) -> None:
        try:
            self.stream.synchronize()
        except self.cuda.Error as error:
            raise ExecutionFailed(f"CUDA: {error}") from error

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        """Device to device, between addresses inside buffers, on the stream."""
        self.cuda.memcpy_dtod_async(dst, src, nbytes, self.stream)

    def download_later(self, host: np.ndarray, ptr: int) -> None:
        """Device to page-locked `host`, on the stream: read it after a later mark's wait."""
        self.cuda.memcpy_dtoh_async(host, ptr, self.stream)

    def mark(self, reuse=None):
        """An event recorded on the stream now: `.synchronize()` waits for the work before it.
        `reuse`: an earlier mark nobody waits for any more, recorded again (no new event)."""
        event = self.cuda.Event() if reuse is None else reuse
        event.record(self.stream)
        return event

    def commit(self, table: Buffer, pairs: int, cells: int, count: int, widest: int) -> None:
        """pool[cells[t]] = new[t] for t < count and every pair of the commit `table` ([3,
        pairs]: pools' and new rows' addresses, row sizes; `widest` the largest of those), the
        cells at address `cells`, on the stream, in one launch."""
        if count == 0:
            return
        self._launch("commit_rows", (count, pairs), (min(128, max(32, widest // 16)), 1, 1),
                     table.ptr, pairs, cells)

    def gather(self, dst: Buffer, pool: Buffer, cells: int, count: int,
               row_bytes: int) -> None:
        """dst[t] = pool[cells[t]] for t < count (the cells at address `cells`), on the
        stream."""
        if count == 0:
            return
        self._launch("gather_rows", (count, 1), (min(128, max(32, row_bytes // 16)), 1, 1),
                     dst.ptr, pool.ptr, cells, row_bytes)

    def grow_trees(self, ids: int, logp: int, owners: int, depth_limit: int, branches: int,
                   nodes: int, tokens: int, positions: int, mask: int, width: int, keys: int,
                   cells: int, record: int, choices: int | None = None) -> None:
        """Each owner's tree from a draft block's choices at `ids` / `logp` ([owners,
        depth_limit, branches], the first `choices` of each row: all where None) into a
        verify's staged inputs and `record`, on the stream (the kernel's comment says how)."""
        assert nodes < MAX_TREE_ROWS, nodes
        used = branches if choices is None else choices
        assert 1 <= used <= branches, (used, branches)
        self._launch("grow_trees", (owners, 1), (32, 1, 1), ids, logp, depth_limit, branches,
                     used, nodes, tokens, positions, mask, width, keys, cells, record)

    def walk_trees(self, drawn: int, stride: int, record: int, owners: int, rows: int,
                   tokens: int, positions: int, cell_table: int, mask: int, width: int,
                   cells: int, out: int) -> None:
        """Each owner's grown tree (`record`) walked by its verify's draws at `drawn` into a
        draft block's staged inputs and `out`, on the stream (the kernel's comment says how)."""
        self._launch("walk_trees", (owners, 1), (32, 1, 1), drawn, stride, record, rows,
                     tokens, positions, cell_table, mask, width, cells, out)

    def tree_uniforms(self, params: int, record: int, chain: int, chain_len: int, walked: int,
                      owners: int, rows: int, stride: int) -> None:
        """Each owner's sampled tree rows given their positions' uniforms in the sampler's
        staged params, on the stream (the kernel's comment says how; walked 0: none)."""
        self._launch("tree_uniforms", ((owners + 31) // 32, 1), (32, 1, 1), params, record,
                     chain, chain_len, walked, owners, rows, stride)

    def _launch(self, name: str, grid: tuple, block: tuple, *args: int) -> None:
        """Kernel `name` of _COMMIT_SOURCE on the stream, its arguments (addresses and ints,
        in _KERNEL_ARGS' format) packed by a prepared call: PyCUDA's plain call inspects each
        argument's type at every launch (on the H200's host 7.8-8.8 us of host time a launch
        against 4.9-6.1 prepared, bench/NOTES.md 2026-12-04, fifth sitting)."""
        if not self._kernels:
            from pycuda.compiler import SourceModule

            module = SourceModule(_COMMIT_SOURCE, no_extern_c=True, options=["-O3"])
            for kernel, arg_format in _KERNEL_ARGS.items():
                function = module.get_function(kernel)
                function.prepare(arg_format)
                self._kernels[kernel] = function
        self._kernels[name].prepared_async_call(grid, block, self.stream, *args)
