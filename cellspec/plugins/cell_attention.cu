// cellspec's CUDA ops for ONNX Runtime's CUDA provider (an ONNX Runtime custom-op library, domain
// "cellspec"; cellspec/plugins/build.py compiles it, cellspec/rewrite/ emits its ops), each in
// Float, Float16 and BFloat16 (T) unless said otherwise:
//
// CellAttention: attention over a sequence's cells, read where they lie in the pools, and its own
// new tokens. It replaces, per layer, Gather(k_pool, cell_table) + Concat(., k_new), the same for
// values, and the opset-23 Attention over [cells ; new tokens] under attn_mask (decomposed into
// ~15 standard ops on the CUDA provider).
//   inputs:  q [S, Q, H * D], k_new / v_new [S, Q, KV * D], k_pool / v_pool [cells, KV * D] (T),
//            cell_table [S, N] int64, attn_mask [S, 1, Q, N + Q] bool, positions [S, Q] int64
//   outputs: out [S, Q, H * D] (T), partials [S * Q * H * chunks * (D + 2)] float32 (scratch)
//   attrs:   num_heads, kv_num_heads, scale, by_position (1: see below)
// CellRotaryAttention: the same, with q, k and v the Slices [H*D | KV*D | KV*D] of one projection
// and q and k rotated (rotate-half, as RotaryEmbedding with interleaved 0).
//   inputs:  qkv [S, Q, (H + 2 KV) * D], cos_cache / sin_cache [positions, D / 2], then inputs 3..7
//            of CellAttention
//   outputs: out, k_new, v_new (the rotated keys and the values, for the commit), q (rotated,
//            scratch), partials (scratch)
// CellNormRotaryAttention: the same with each head of q and k RMS-normalized over its D values
// first (Qwen3), rounded to T as RMSNormalization's output is: inputs 8 and 9 q_norm, k_norm [D],
// attribute epsilon.
// SwiGlu: x [..., 2 I] -> silu(x[..., :I]) * x[..., I:], float32 arithmetic, one rounding.
// RowMatMul (Float16, BFloat16): x [..., K] times w [N, K] -> y [..., N], float32 sums, one
// rounding: a projection (rewrite.projections_for_cuda gives it a MatMul's weight transposed, which
// ONNX Runtime folds at load, or the LM head's Gemm weight as it is), on the tensor cores, with
// a row's rounding independent of the other rows (cuBLAS took 3.7 us per small GEMM whatever its
// size on the H200, and rounded a row alone otherwise than in a batch). w may also come tiled
// [N / 8, K / 32, 8, 32] (w[n, k] at [n / 8, k / 32, n % 8, k % 32]; the rewrite tiles weights
// that fit): the same sums, the loads of a chunk contiguous (row_matmul_kernel).
// RowMatMulSwiGlu (Float16, BFloat16): x [..., K], w [2 I, K] -> SwiGlu(RowMatMul(x, w)), bit for
// bit, in one kernel; outputs y [..., I] and scratch. Tiled, w is [I / 8, K / 32, 2, 8, 32]: a
// chunk's gate rows, then its up rows.
// RowMatMulRotary (Float16, BFloat16): x [..., K], w [(H + 2 KV) D, K], cos_cache / sin_cache
// [positions, D / 2], positions [...] int64 -> q [..., H D], k [..., KV D] (rotated), v [..., KV D],
// scratch: CellRotaryAttention's rotation of RowMatMul(x, w), bit for bit, in the projection's
// epilogue (one kernel where there were two); attrs num_heads, kv_num_heads. With it the
// attention is the plain CellAttention. Tiled, w's rows come in the order its tiles read them
// (rewrite.kernels.rotary_row_order), then tiled as RowMatMul's.
// SequentialCumSum (Float only): x [..., n] -> y [..., n], y[i] = y[i - 1] + x[i] (y[0] = x[0]),
// one float32 add at a time in index order: the sums of ONNX CumSum on ONNX Runtime's CPU
// provider and of numpy's cumsum, bit for bit, in time linear in n (the CUDA provider's CumSum
// sums every output from the start: quadratic, 4.4 ms for the sampler's rows of 49,152).
// SequentialCumSumUntil (Float only): x [..., n], limit (one float32 per row) -> y, as
// SequentialCumSum's up to the end of the first 2,048-wide tile whose last exclusive sum
// y[i] - x[i] reaches the row's limit, +inf past it. The sampler's top-p rule reads no sum past
// the first rank whose exclusive sum reaches top_p, and its x are sorted descending, so that its
// exclusive sums never decrease (export/sampler.py): its rows stop after that rank's tile.
// SortDescending (Float only): x [..., n] -> values, indices [..., n] (float32, int64) and a
// scratch output: each row ordered by value descending, equal values by lower index first, as
// TopK with k = n (largest, sorted) orders it on the CPU provider (-0 equal to +0). One stable
// radix sort of every row at once (the CUDA provider's TopK sorts a full row one row at a time,
// and puts -0 after +0).
// TopLogSoftmax (Float only): x [..., n] -> values [..., k] float32, indices [..., k] int64: the k
// largest of each row, ordered as TopK (largest, sorted) orders them on the CPU provider (equal
// values by lower index, -0 equal to +0), each as its log-softmax over the row, (x - max) - log(sum
// of exp(x - max)), the formula of ONNX Runtime's LogSoftmax; attr k in 1..8, at most n. One block a
// row, where LogSoftmax then TopK took several kernels (about 17 us more for a draft block's 16
// rows of 16,384 on the H200, uncaptured). The values may differ from LogSoftmax's in the last bits (another summation order);
// the indices are exactly TopK(x)'s, which are TopK(LogSoftmax(x))'s unless two values of the k
// round to the same log-probability (then TopK of those breaks the tie by index). NaN is never
// chosen.
//
// Query head h reads kv head h / (H / KV). Scores, softmax and the weighted sum are float32.
//
// Attention's rounding does not depend on the step's shape. Keys are split into chunks of kChunk
// by a key index: cell column j (= the sequence's position j) is key j; new token i is key N + i,
// or with by_position key positions[s, i] (the target's causal steps, where a row's new tokens sit
// at positions after its cells). A block takes one chunk for a tile of a sequence's rows and a
// group of heads (the launch's choice); each (row, head) pair is reduced in a fixed order that
// does not depend on the tile, and chunks combine in index order, skipping empty ones (in
// combine_kernel, or for steps tiled one pair a block over 2-4 chunks in pair_kernel, which does
// both kernels' arithmetic in one launch). So a
// token's output is the same bit for bit whichever batch it is in, however many cells the step
// reads (a padded bucket adds masked keys only), and, with by_position, whether a key is still
// new (a verify) or a cell already (a later step): speculation and batching cannot change it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cub/device/device_radix_sort.cuh>
#include <mma.h>

#include <dlfcn.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#define ORT_API_MANUAL_INIT
#include "onnxruntime_cxx_api.h"
#undef ORT_API_MANUAL_INIT

namespace {

constexpr int kChunk = 128;  // keys per block, one per thread
constexpr int kWarps = kChunk / 32;
constexpr int kMaxHeadDim = kChunk;  // the weighted sum gives each of D lanes a thread
constexpr int kMaxRows = 8;  // query rows per block
constexpr int kMaxHeads = 8;  // query heads per block
constexpr int kMaxPairs = 16;  // (row, head) pairs per block
constexpr int kOneHeadBlocks = 5;  // blocks of one head and row per multiprocessor at most

// Programmatic dependent launch (compute capability 9.0 and above; called only in the kernels'
// kOverlap builds, which launch_after launches so): allow_dependents lets the next kernel of the
// stream start (it still waits for this one in wait_for_predecessor); wait_for_predecessor waits
// until the previous kernel has finished and its writes are visible. Before it a kernel may only
// read what no kernel of the step writes (constant weights) and write nothing global.
__device__ __forceinline__ void allow_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void wait_for_predecessor() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void prefetch_l2(const void* address) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(address));
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

struct Dims {
  int64_t S, Q, N, H, KV, D, chunks;
  float scale;
  int by_position;
  int rows;           // query rows per block: a tile of one sequence's rows
  int heads;          // query heads per block, all of one kv head
  int64_t row_tiles;  // ceil(Q / rows)
};

// 16 bytes of T as floats: 4 float32 or 8 float16 / bfloat16 (rows are 16-byte aligned when
// D * sizeof(T) is a multiple of 16; Compute checks)
template <typename T>
struct Vec {
  static constexpr int kSize = 16 / sizeof(T);
  __device__ __forceinline__ static void load(const T* p, float* out) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* items = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < kSize; ++i) out[i] = to_float(items[i]);
  }
};

// a warp's 32 values reduced by shuffles down, in a fixed order (lane 0 holds the result); a
// chunk's kChunk values are its kWarps warps' results folded in index order (fold)
template <bool kMax>
__device__ __forceinline__ float warp_reduce(float value) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_down_sync(0xffffffffu, value, offset);
    value = kMax ? fmaxf(value, other) : value + other;
  }
  return value;
}

template <bool kMax>
__device__ __forceinline__ float fold(const float* warp_parts) {
  float result = warp_parts[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w)
    result = kMax ? fmaxf(result, warp_parts[w]) : result + warp_parts[w];
  return result;
}

// a key row's 16-byte vectors loaded before they are used (else one dependent load at a time)
constexpr int kKeyLoads = 8;
// the weighted sum's 16-byte value loads per lane in flight at once
constexpr int kValueLoads = 8;

// Each lane's key row, read by the whole warp: for each slice of kStageVecs 16-byte vectors, lane
// l loads vector l % kStageVecs of rows l / kStageVecs + 8 j (j < 4) of the warp's 32 keys, so
// that a load instruction touches 8 rows, not 32 (one row a thread, the H200's L1 spent a cycle
// per row touched, about 2 of a SmolLM2 decode step's 6.6 us of attention a layer), into the
// warp's staging buffer (kStageSlots vectors, swizzled so that neither its stores nor its reads
// conflict), from which each lane takes its own row's vectors in order and calls use(vector
// index, vector) on them. All the kKeyLoads loads of a round are in flight together, as before.
// The caller's arithmetic, and so its rounding, is that of reading the row itself. Every lane of
// the warp calls it; a lane whose key_row is null loads and uses nothing.
constexpr int kStageVecs = 4;
constexpr int kStageSlots = 32 * kStageVecs;

__device__ __forceinline__ int stage_slot(int row, int v) {  // rows 2i and 2i + 1 share 128 bytes
  return (row >> 1) * 8 + 4 * (row & 1) + (v ^ ((row >> 1) & 3));
}

template <typename T, typename Use>
__device__ __forceinline__ void for_key_vectors(const T* key_row, int vectors, uint4* stage,
                                                Use use) {
  static_assert(kKeyLoads % kStageVecs == 0 && kStageVecs == 4, "stage_slot's swizzle is for 4");
  constexpr int kRowsAtOnce = 32 / kStageVecs;
  constexpr int kLoadsPerSlice = 32 / kRowsAtOnce;
  const int lane = threadIdx.x & 31;
  if (!__any_sync(0xffffffffu, key_row != nullptr)) return;
  const T* src[kLoadsPerSlice];
#pragma unroll
  for (int j = 0; j < kLoadsPerSlice; ++j)
    src[j] = reinterpret_cast<const T*>(
        __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(key_row),
                    j * kRowsAtOnce + lane / kStageVecs));
#pragma unroll 1
  for (int base = 0; base < vectors; base += kKeyLoads) {
    uint4 raw[kKeyLoads];
#pragma unroll
    for (int u = 0; u < kKeyLoads; ++u) {  // slice u / kLoadsPerSlice, row j = u % kLoadsPerSlice
      const int v = base + (u / kLoadsPerSlice) * kStageVecs + lane % kStageVecs;
      const T* row = src[u % kLoadsPerSlice];
      raw[u] = make_uint4(0, 0, 0, 0);
      if (row != nullptr && v < vectors)
        raw[u] = *reinterpret_cast<const uint4*>(row + v * Vec<T>::kSize);
    }
#pragma unroll
    for (int slice = 0; slice < kKeyLoads / kStageVecs; ++slice) {
      if (base + slice * kStageVecs >= vectors) break;
      __syncwarp();  // the slice before is read
#pragma unroll
      for (int j = 0; j < kLoadsPerSlice; ++j)
        stage[stage_slot(j * kRowsAtOnce + lane / kStageVecs, lane % kStageVecs)] =
            raw[slice * kLoadsPerSlice + j];
      __syncwarp();
      if (key_row == nullptr) continue;
#pragma unroll
      for (int v = 0; v < kStageVecs; ++v) {
        const int vec = base + slice * kStageVecs + v;
        if (vec < vectors) use(vec, stage[stage_slot(lane, v)]);
      }
    }
  }
}

// The same vectors in the same order, each lane loading its own key row (one row a thread):
// chunk_kernel's way where a step has blocks for more than one wave of it, which run faster with
// the staging buffer's registers and shared memory given back to more resident blocks (on the
// H200, a 32-session decode step and a verify of 8 x 16 rows over 1,024 cells ran 25% and 10%
// slower staged; steps of one wave, 3-14% faster: bench/NOTES.md, 2026-12-04, tenth sitting).
template <typename T, typename Use>
__device__ __forceinline__ void for_key_vectors_unstaged(const T* key_row, int vectors, Use use) {
  if (key_row == nullptr) return;
#pragma unroll 1
  for (int base = 0; base < vectors; base += kKeyLoads) {
    uint4 raw[kKeyLoads];
#pragma unroll
    for (int u = 0; u < kKeyLoads; ++u)
      if (base + u < vectors)
        raw[u] = *reinterpret_cast<const uint4*>(key_row + (base + u) * Vec<T>::kSize);
#pragma unroll
    for (int u = 0; u < kKeyLoads; ++u)
      if (base + u < vectors) use(base + u, raw[u]);
  }
}

// v summed over a warp's lanes kg * nv + vi for kg = 0 .. groups - 1 (the lane's own vi): a
// tree over the groups padded with zeros to a power of two, whose result lane vi (kg 0) holds.
// Every lane of the warp calls it; the order depends on groups and nv only.
__device__ __forceinline__ float sum_groups(float v, int groups, int nv, int kg) {
  int span = 1;
  while (span < groups) span <<= 1;
  const int lane = threadIdx.x & 31;
  for (int off = span >> 1; off > 0; off >>= 1) {
    const float other = __shfl_sync(0xffffffffu, v, min(lane + off * nv, 31));
    if (kg + off < groups) v += other;  // else the partner is a padding zero
  }
  return v;
}

// One block per (sequence, tile of `rows` of its query rows, group of `heads` query heads of one
// kv head, chunk of kChunk keys): for each (row, head) pair of the block, the max, the sum of
// exp and the weighted sum of the chunk's keys, written as the output when the step has one
// chunk, else as partials for combine_kernel. Thread t holds key t (loaded once for the block's
// heads; the rows of a tile read it again, from L1), through the warp's staging buffer in the
// kStaged build (for_key_vectors), else by itself. For the weighted sum warp w takes nv of a
// value row's 16-byte vectors (nv = vectors / kWarps rounded up) for all the chunk's keys: lane
// (kg, vi) = (lane / nv, lane % nv) sums keys kg, kg + groups, ... (groups = 32 / nv) of vector
// w nv + vi in registers, kValueLoads loads in flight at once (a tile's first ones issued right
// after the scores, to arrive during the softmax's reductions), then sum_groups adds the lanes'
// sums across kg. A pair's arithmetic is the same whatever the tile it is in, so the launch
// shape (chosen per step for occupancy) cannot change a result.
template <typename T, int kSumHeads, bool kOverlap, bool kStaged>
__global__ void __launch_bounds__(kChunk) chunk_kernel(
    const T* __restrict__ q, const T* __restrict__ k_new, const T* __restrict__ v_new,
    const T* __restrict__ k_pool, const T* __restrict__ v_pool,
    const int64_t* __restrict__ cell_table, const bool* __restrict__ mask,
    const int64_t* __restrict__ positions, Dims dm, float* __restrict__ partials,
    T* __restrict__ out) {
  __shared__ float query[kMaxPairs][kMaxHeadDim];  // the pairs' queries
  __shared__ float weight[kMaxPairs][kChunk];       // scores, then exp weights
  __shared__ int new_col[kMaxRows][kChunk];         // the new token holding a key slot, -1 none
  __shared__ const T* key_rows[kMaxRows][kChunk];   // a row's key for each key slot, null: none
  __shared__ const T* value_rows[kMaxRows][kChunk];  // and its value
  __shared__ float max_part[kMaxPairs][kWarps], sum_part[kMaxPairs][kWarps];
  __shared__ uint4 key_stage[kStaged ? kWarps : 1][kStaged ? kStageSlots : 1];  // for_key_vectors'

  // the block's indices in 32 bits (a 64-bit division is a call of ~100 instructions)
  const unsigned head_groups = static_cast<unsigned>(dm.H / dm.heads);
  const unsigned chunks = static_cast<unsigned>(dm.chunks);
  const unsigned row_tiles = static_cast<unsigned>(dm.row_tiles);
  unsigned block = blockIdx.x;
  const int64_t c = block % chunks;
  block /= chunks;
  const int64_t h0 = static_cast<int64_t>(block % head_groups) * dm.heads;
  block /= head_groups;
  const int64_t r0 = static_cast<int64_t>(block % row_tiles) * dm.rows;
  const int64_t s = block / row_tiles;
  const int rows = static_cast<int>(dm.Q - r0 < dm.rows ? dm.Q - r0 : dm.rows);
  const int heads = dm.heads;
  const int pairs = rows * heads;
  const int t = threadIdx.x;
  const int D = static_cast<int>(dm.D);
  const int64_t kv_width = dm.KV * dm.D;
  const int64_t kv_offset = (h0 / (dm.H / dm.KV)) * dm.D;
  const int64_t first = c * kChunk;
  const int64_t key = first + t;
  if constexpr (kOverlap) {
    allow_dependents();
    wait_for_predecessor();
  }

  for (int i = t; i < pairs * D; i += kChunk) {
    const int p = i / D, d = i % D;
    const int64_t row = s * dm.Q + r0 + p / heads;
    query[p][d] = to_float(q[(row * dm.H + h0 + p % heads) * dm.D + d]);
  }
  for (int r = 0; r < rows; ++r) new_col[r][t] = -1;
  __syncthreads();
  for (int r = 0; r < rows; ++r) {  // a row sees at most one new token per key
    const bool* mask_row = mask + (s * dm.Q + r0 + r) * (dm.N + dm.Q);
    for (int64_t i = t; i < dm.Q; i += kChunk) {
      const bool sees = mask_row[dm.N + i];  // loaded with the position, not after it
      const int64_t at = dm.by_position ? positions[s * dm.Q + i] : dm.N + i;
      if (at >= first && at < first + kChunk && sees) new_col[r][at - first] = i;
    }
  }
  __syncthreads();

  // each row's key and value for key t (null where the row does not see it); the key's cell and
  // the rows' mask bits are loaded together, not one after another
  const int64_t cell = key < dm.N ? cell_table[s * dm.N + key] : 0;
  bool sees_cell[kMaxRows];
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r)
    sees_cell[r] = r < rows && key < dm.N && mask[(s * dm.Q + r0 + r) * (dm.N + dm.Q) + key];
  bool any = false;
#pragma unroll
  for (int r = 0; r < kMaxRows; ++r) {
    if (r >= rows) break;
    const T *key_row = nullptr, *val_row = nullptr;
    if (sees_cell[r]) {
      key_row = k_pool + cell * kv_width + kv_offset;
      val_row = v_pool + cell * kv_width + kv_offset;
    } else if (new_col[r][t] >= 0) {
      const int64_t at = (s * dm.Q + new_col[r][t]) * kv_width + kv_offset;
      key_row = k_new + at;
      val_row = v_new + at;
    }
    key_rows[r][t] = key_row;
    value_rows[r][t] = val_row;
    any |= key_row != nullptr;
  }
  if (!__syncthreads_or(any)) {  // no row of the tile sees a key of this chunk
    for (int i = t; i < pairs * D; i += kChunk) {
      const int p = i / D, d = i % D;
      const int64_t row_head = (s * dm.Q + r0 + p / heads) * dm.H + h0 + p % heads;
      if (dm.chunks > 1) {
        float* part = partials + (row_head * dm.chunks + c) * (dm.D + 2);
        if (d == 0) {
          part[0] = -INFINITY;
          part[1] = 0.f;
        }
        part[2 + d] = 0.f;
      } else {
        out[row_head * dm.D + d] = from_float<T>(0.f);
      }
    }
    return;
  }

  // the weighted sum's layout (above)
  const int lane32 = t & 31, warp = t >> 5;
  const int vectors = D / Vec<T>::kSize;  // 16-byte vectors per row
  const int nv = (vectors + kWarps - 1) / kWarps;
  const int groups = 32 / nv;
  const int kg = lane32 / nv, vi = lane32 % nv, vec = warp * nv + vi;
  const bool summing = kg < groups && vec < vectors && vi < nv;
  const int lane_keys = (kChunk - kg + groups - 1) / groups;  // keys kg + groups u < kChunk
  uint4 values[kValueLoads];
  auto load_values = [&](int r, int u0) {
#pragma unroll
    for (int u = 0; u < kValueLoads; ++u) {
      values[u] = make_uint4(0, 0, 0, 0);
      const T* val_row = summing && u0 + u < lane_keys ? value_rows[r][kg + groups * (u0 + u)]
                                                        : nullptr;
      if (val_row != nullptr)
        values[u] = *reinterpret_cast<const uint4*>(val_row + vec * Vec<T>::kSize);
    }
  };

#pragma unroll 1
  for (int r = 0; r < rows; ++r) {  // rows one at a time: unrolled, the kernel's code is too large
    const T* key_row = key_rows[r][t];
    float dot[kMaxHeads];
#pragma unroll
    for (int g = 0; g < kMaxHeads; ++g) dot[g] = 0.f;
    auto use = [&](int vec, uint4 raw) {
      const int d = vec * Vec<T>::kSize;
      const T* items = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int g = 0; g < kMaxHeads; ++g) {
        if (g >= heads) continue;
#pragma unroll
        for (int i = 0; i < Vec<T>::kSize; ++i)
          dot[g] = fmaf(query[r * heads + g][d + i], to_float(items[i]), dot[g]);
      }
    };
    if constexpr (kStaged)
      for_key_vectors(key_row, vectors, key_stage[warp], use);
    else
      for_key_vectors_unstaged(key_row, vectors, use);
#pragma unroll
    for (int g = 0; g < kMaxHeads; ++g)
      if (g < heads) weight[r * heads + g][t] = key_row != nullptr ? dot[g] * dm.scale : -INFINITY;
  }
  __syncthreads();

  load_values(0, 0);  // to arrive during the reductions
  // every pair's max of scores, then its exp weights and their sum: two barriers in all
  for (int p = 0; p < pairs; ++p) {
    const float m = warp_reduce<true>(weight[p][t]);
    if (lane32 == 0) max_part[p][warp] = m;
  }
  __syncthreads();
  for (int p = 0; p < pairs; ++p) {
    const float score = weight[p][t];
    const float e = score != -INFINITY ? expf(score - fold<true>(max_part[p])) : 0.f;
    weight[p][t] = e;
    const float l = warp_reduce<false>(e);
    if (lane32 == 0) sum_part[p][warp] = l;
  }
  __syncthreads();

  // the weighted sum of each row's values for each head, lane (kg, vi) summing its keys in order,
  // then across kg; no barrier (each lane reads only the weights and its own loads). A lane's
  // values are loaded once per row where they fit in one batch (half precision: always), else
  // again for every head.
  constexpr int kV = Vec<T>::kSize;
  const bool one_batch = lane_keys <= kValueLoads;
  auto write_pair = [&](int r, int g, const float* acc) {  // lanes kg 0 write their vectors
    if (kg != 0 || !summing) return;
    const int p = r * heads + g;
    const int64_t row_head = (s * dm.Q + r0 + r) * dm.H + h0 + g;
    if (dm.chunks > 1) {
      float* part = partials + (row_head * dm.chunks + c) * (dm.D + 2);
      if (vec == 0) {
        part[0] = fold<true>(max_part[p]);
        part[1] = fold<false>(sum_part[p]);
      }
#pragma unroll
      for (int i = 0; i < kV; ++i) part[2 + vec * kV + i] = acc[i];
    } else {
      const float l = fold<false>(sum_part[p]);
      T* o = out + row_head * dm.D + vec * kV;
#pragma unroll
      for (int i = 0; i < kV; ++i) o[i] = from_float<T>(l > 0.f ? acc[i] / l : 0.f);
    }
  };
#pragma unroll 1
  for (int r = 0; r < rows; ++r) {
#pragma unroll 1
    for (int g0 = 0; g0 < heads; g0 += kSumHeads) {
      float acc[kSumHeads][kV];
#pragma unroll
      for (int g = 0; g < kSumHeads; ++g)
#pragma unroll
        for (int i = 0; i < kV; ++i) acc[g][i] = 0.f;
#pragma unroll 1
      for (int u0 = 0; u0 < lane_keys; u0 += kValueLoads) {
        // row 0's first values are in flight already, and one batch serves every pass
        if ((r > 0 || g0 > 0 || u0 > 0) && (g0 == 0 || !one_batch)) load_values(r, u0);
#pragma unroll
        for (int u = 0; u < kValueLoads; ++u) {
          if (u0 + u >= lane_keys) break;
          const int key_at = kg + groups * (u0 + u);
          const T* items = reinterpret_cast<const T*>(&values[u]);
#pragma unroll
          for (int g = 0; g < kSumHeads; ++g) {
            if (g0 + g >= heads) continue;
            const float w = weight[r * heads + g0 + g][key_at];
            if (w == 0.f) continue;  // a weight-0 row may hold anything
#pragma unroll
            for (int i = 0; i < kV; ++i) acc[g][i] = fmaf(w, to_float(items[i]), acc[g][i]);
          }
        }
      }
#pragma unroll
      for (int g = 0; g < kSumHeads; ++g) {
        if (g0 + g >= heads) continue;
#pragma unroll
        for (int i = 0; i < kV; ++i) acc[g][i] = sum_groups(acc[g][i], groups, nv, kg);
        write_pair(r, g0 + g, acc[g]);
      }
    }
  }
}

// chunk_kernel for blocks of `heads` heads: their sums 4 heads at a time where a block has 4 or
// more, else one at a time (on the H200, 4 at a time for fewer heads cost more in registers than
// they saved); key rows through the staging buffer or not. A pair's arithmetic is the same in
// all four.
template <typename T, bool kOverlap>
auto chunk_kernel_for(int heads, bool staged) {
  if (staged)
    return heads >= 4 ? chunk_kernel<T, 4, kOverlap, true> : chunk_kernel<T, 1, kOverlap, true>;
  return heads >= 4 ? chunk_kernel<T, 4, kOverlap, false> : chunk_kernel<T, 1, kOverlap, false>;
}
template <typename T>
auto chunk_kernel_for(int heads, bool overlap = false, bool staged = false) {
  return overlap ? chunk_kernel_for<T, true>(heads, staged)
                 : chunk_kernel_for<T, false>(heads, staged);
}

// one block per (token row, head): the chunks' partials in index order. The chunks' maxima and
// sums are read into shared memory at once, and each lane's values kCombineLoads chunks at a
// time, before the sums that use them (which keep the chunks' order).
constexpr int kCombineLoads = 8;

template <typename T, bool kOverlap>
__global__ void combine_kernel(const float* __restrict__ partials, Dims dm, T* __restrict__ out) {
  extern __shared__ float chunk_stats[];  // [chunks][2]: each chunk's max and sum of exp
  if constexpr (kOverlap) {
    allow_dependents();
    wait_for_predecessor();
  }
  const int64_t row_head = blockIdx.x;
  const int64_t stride = dm.D + 2;
  const float* base = partials + row_head * dm.chunks * stride;
  for (int64_t c = threadIdx.x; c < dm.chunks; c += blockDim.x) {
    chunk_stats[2 * c] = base[c * stride];
    chunk_stats[2 * c + 1] = base[c * stride + 1];
  }
  __syncthreads();
  float m = -INFINITY;
  for (int64_t c = 0; c < dm.chunks; ++c)
    if (chunk_stats[2 * c + 1] > 0.f) m = fmaxf(m, chunk_stats[2 * c]);
  for (int64_t d = threadIdx.x; d < dm.D; d += blockDim.x) {
    float l = 0.f, acc = 0.f;
    for (int64_t c0 = 0; c0 < dm.chunks; c0 += kCombineLoads) {
      float value[kCombineLoads];
#pragma unroll
      for (int u = 0; u < kCombineLoads; ++u)
        value[u] = c0 + u < dm.chunks ? base[(c0 + u) * stride + 2 + d] : 0.f;
#pragma unroll
      for (int u = 0; u < kCombineLoads; ++u) {
        const int64_t c = c0 + u;
        if (c < dm.chunks && chunk_stats[2 * c + 1] > 0.f) {
          const float f = expf(chunk_stats[2 * c] - m);
          l += chunk_stats[2 * c + 1] * f;
          acc += value[u] * f;
        }
      }
    }
    out[row_head * dm.D + d] = from_float<T>(l > 0.f ? acc / l : 0.f);
  }
}

// pair_kernel's stage clocks, for tools/cell_attention_probe.cu's `pair` mode only (compiled with
// -DCELLSPEC_STAGE_CLOCKS; the plugin never is): thread 0 of each of the first
// kStageBlocks blocks notes its multiprocessor's clock at the kernel's start, after each of its
// 9 barriers and at its end, so that a probe sees where a short step's microseconds go.
#ifdef CELLSPEC_STAGE_CLOCKS
constexpr int kStages = 11, kStageBlocks = 4096;
__device__ long long stage_clocks[kStageBlocks][kStages];
#define CELLSPEC_STAGE(i) \
  if (threadIdx.x == 0 && blockIdx.x < kStageBlocks) stage_clocks[blockIdx.x][i] = clock64()
#else
#define CELLSPEC_STAGE(i)
#endif

// Steps whose tiling is one (row, head) pair a block (tile: rows 1, heads 1) over 2 to
// kMaxInBlockChunks chunks: one block per pair, one group of kChunk threads per chunk, each group
// doing chunk_kernel's arithmetic for its chunk with that tiling (the same operations in the same
// order: a pair's sums do not depend on its block), its partials kept in shared memory, then the
// block combining them as combine_kernel does (the same operations in the same order). The
// output is bit for bit the two kernels', in one launch instead of two (decode steps and verifies
// over short contexts: the real SmolLM2's 100-300 cells are 2-3 chunks).
constexpr int kMaxInBlockChunks = 4;

template <typename T, bool kOverlap>
__global__ void __launch_bounds__(kChunk * kMaxInBlockChunks) pair_kernel(
    const T* __restrict__ q, const T* __restrict__ k_new, const T* __restrict__ v_new,
    const T* __restrict__ k_pool, const T* __restrict__ v_pool,
    const int64_t* __restrict__ cell_table, const bool* __restrict__ mask,
    const int64_t* __restrict__ positions, Dims dm, T* __restrict__ out) {
  __shared__ float query[kMaxHeadDim];
  __shared__ float weight[kMaxInBlockChunks][kChunk];
  __shared__ int new_col[kMaxInBlockChunks][kChunk];
  __shared__ const T* value_rows[kMaxInBlockChunks][kChunk];
  __shared__ float max_part[kMaxInBlockChunks][kWarps], sum_part[kMaxInBlockChunks][kWarps];
  __shared__ float part[kMaxInBlockChunks][kMaxHeadDim + 2];  // each chunk's max, sum, sums
  __shared__ int seen[kMaxInBlockChunks];  // whether the chunk's group saw a key
  __shared__ uint4 key_stage[kMaxInBlockChunks * kWarps][kStageSlots];  // for_key_vectors'

  // the block's pair: (sequence s, row r0, head h0), as chunk_kernel's with rows = heads = 1
  const unsigned H = static_cast<unsigned>(dm.H);
  const int64_t h0 = blockIdx.x % H;
  const int64_t row = blockIdx.x / H;  // s * Q + r0
  const int64_t s = row / dm.Q;
  const int g = threadIdx.x / kChunk;  // the chunk of this thread's group
  const int t = threadIdx.x % kChunk;
  const int D = static_cast<int>(dm.D);
  const int64_t kv_width = dm.KV * dm.D;
  const int64_t kv_offset = (h0 / (dm.H / dm.KV)) * dm.D;
  const int64_t first = static_cast<int64_t>(g) * kChunk;
  const int64_t key = first + t;
  CELLSPEC_STAGE(0);
  if constexpr (kOverlap) allow_dependents();
  const int lane32 = t & 31, warp = t >> 5;
  // the key's cell and mask bit first: their loads are in flight while the query and the new
  // tokens' columns are loaded. On the H200 this took 1-3% off the kernel; the same order in
  // chunk_kernel was 1% slower, and this kernel's values loaded with its keys (96 registers, one
  // block a multiprocessor) 43% slower at 16 rows a step (bench/NOTES.md, 2026-12-04, ninth
  // sitting).
  const bool* mask_row = mask + row * (dm.N + dm.Q);
  const int64_t cell = key < dm.N ? cell_table[s * dm.N + key] : 0;
  const bool sees_cell = key < dm.N && mask_row[key];
  // so are new token t's mask bit and position (new tokens past kChunk, if any, are loaded
  // after the barrier): the new columns below then wait for no load
  const bool sees_new = t < dm.Q && mask_row[dm.N + t];
  const int64_t new_at = sees_new && dm.by_position ? positions[s * dm.Q + t] : dm.N + t;
  // Overlapped, all of that is read before the wait for the step's previous kernel (the
  // projection that writes q, k_new and v_new): the cell table, the mask and the positions are
  // the step's inputs, which no kernel of the step writes (cellspec.rewrite.cell gives the op
  // only graph inputs there).
  if constexpr (kOverlap) wait_for_predecessor();

  if (threadIdx.x < D) query[threadIdx.x] = to_float(q[(row * dm.H + h0) * dm.D + threadIdx.x]);
  new_col[g][t] = -1;
  __syncthreads();
  CELLSPEC_STAGE(1);
  if (sees_new && new_at >= first && new_at < first + kChunk) new_col[g][new_at - first] = t;
  for (int64_t i = t + kChunk; i < dm.Q; i += kChunk) {
    const bool sees = mask_row[dm.N + i];
    const int64_t at = dm.by_position ? positions[s * dm.Q + i] : dm.N + i;
    if (at >= first && at < first + kChunk && sees) new_col[g][at - first] = i;
  }
  __syncthreads();
  CELLSPEC_STAGE(2);

  const T *key_row = nullptr, *val_row = nullptr;
  if (sees_cell) {
    key_row = k_pool + cell * kv_width + kv_offset;
    val_row = v_pool + cell * kv_width + kv_offset;
  } else if (new_col[g][t] >= 0) {
    const int64_t at = (s * dm.Q + new_col[g][t]) * kv_width + kv_offset;
    key_row = k_new + at;
    val_row = v_new + at;
  }
  value_rows[g][t] = val_row;
  if (t == 0) seen[g] = 0;
  __syncthreads();
  CELLSPEC_STAGE(3);
  if (key_row != nullptr) seen[g] = 1;  // (any thread: a benign race to the same value)
  __syncthreads();
  CELLSPEC_STAGE(4);
  const bool active = seen[g] != 0;  // else the chunk's partials are chunk_kernel's empty ones

  // the weighted sum: chunk_kernel's key classes (nv and groups as its layout has them: class kg
  // sums keys kg, kg + groups, ... of each vector in order, and sum_groups' tree adds the
  // classes), laid out so that a load instruction takes whole rows: warp w holds classes
  // w R .. w R + R - 1 (R = 32 / vectors rows an instruction, kWarps R >= groups:
  // pair_values_coalesce), lane (class, vector) = (w R + lane / vectors, lane % vectors)
  const int vectors = D / Vec<T>::kSize;
  const int nv = (vectors + kWarps - 1) / kWarps;
  const int groups = 32 / nv;
  const int rows_at_once = 32 / vectors;
  const int kg = warp * rows_at_once + lane32 / vectors, vec = lane32 % vectors;
  const bool summing = lane32 < rows_at_once * vectors && kg < groups;
  const int lane_keys = summing ? (kChunk - kg + groups - 1) / groups : 0;
  uint4 values[kValueLoads];
  auto load_values = [&](int u0) {
#pragma unroll
    for (int u = 0; u < kValueLoads; ++u) {
      values[u] = make_uint4(0, 0, 0, 0);
      const T* v_row = active && summing && u0 + u < lane_keys
                           ? value_rows[g][kg + groups * (u0 + u)] : nullptr;
      if (v_row != nullptr) values[u] = *reinterpret_cast<const uint4*>(v_row + vec * Vec<T>::kSize);
    }
  };

  {  // the score of key t (chunk_kernel's dot, one head)
    float dot = 0.f;
    for_key_vectors(key_row, vectors, key_stage[threadIdx.x >> 5], [&](int vec, uint4 raw) {
      const int d = vec * Vec<T>::kSize;
      const T* items = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int i = 0; i < Vec<T>::kSize; ++i) dot = fmaf(query[d + i], to_float(items[i]), dot);
    });
    weight[g][t] = key_row != nullptr ? dot * dm.scale : -INFINITY;
  }
  __syncthreads();
  CELLSPEC_STAGE(5);

  load_values(0);
  {
    const float m = warp_reduce<true>(weight[g][t]);
    if (lane32 == 0) max_part[g][warp] = m;
  }
  __syncthreads();
  CELLSPEC_STAGE(6);
  {
    const float score = weight[g][t];
    const float e = score != -INFINITY ? expf(score - fold<true>(max_part[g])) : 0.f;
    weight[g][t] = e;
    const float l = warp_reduce<false>(e);
    if (lane32 == 0) sum_part[g][warp] = l;
  }
  __syncthreads();
  CELLSPEC_STAGE(7);

  constexpr int kV = Vec<T>::kSize;
  float acc[kV];
#pragma unroll
  for (int i = 0; i < kV; ++i) acc[i] = 0.f;
  const bool one_batch = lane_keys <= kValueLoads;
#pragma unroll 1
  for (int u0 = 0; u0 < lane_keys; u0 += kValueLoads) {
    if (u0 > 0 && !one_batch) load_values(u0);
#pragma unroll
    for (int u = 0; u < kValueLoads; ++u) {
      if (u0 + u >= lane_keys) break;
      const int key_at = kg + groups * (u0 + u);
      const T* items = reinterpret_cast<const T*>(&values[u]);
      const float w = weight[g][key_at];
      if (w == 0.f) continue;
#pragma unroll
      for (int i = 0; i < kV; ++i) acc[i] = fmaf(w, to_float(items[i]), acc[i]);
    }
  }
  // each class's sums, in the scores' staging buffer (free now: groups x D floats, at most 4 KB
  // of the group's 8), then sum_groups' tree over the classes for each of the D sums: at each
  // level class c < off adds class c + off where that is a class, the same additions in the same
  // order as its shuffles
  float* class_sums = reinterpret_cast<float*>(key_stage[g * kWarps]);
  if (summing) {
#pragma unroll
    for (int i = 0; i < kV; ++i) class_sums[kg * D + vec * kV + i] = acc[i];
  }
  __syncthreads();
  CELLSPEC_STAGE(8);
  if (t < D) {  // the chunk's partials, as chunk_kernel writes them
    constexpr int kMaxClasses = 32;
    float sums[kMaxClasses];
#pragma unroll
    for (int c = 0; c < kMaxClasses; ++c) sums[c] = c < groups ? class_sums[c * D + t] : 0.f;
    int span = 1;
    while (span < groups) span <<= 1;
#pragma unroll
    for (int level = 0; level < 5; ++level) {  // off = 16, 8, 4, 2, 1: kMaxClasses / 2 down
      const int off = (kMaxClasses / 2) >> level;
      if (off >= span) continue;
#pragma unroll
      for (int c = 0; c < kMaxClasses / 2; ++c)
        if (c < off && c + off < groups) sums[c] += sums[c + off];
    }
    if (t == 0) {
      part[g][0] = active ? fold<true>(max_part[g]) : -INFINITY;
      part[g][1] = active ? fold<false>(sum_part[g]) : 0.f;
    }
    part[g][2 + t] = active ? sums[0] : 0.f;
  }
  __syncthreads();
  CELLSPEC_STAGE(9);

  // combine_kernel's arithmetic over the block's chunks
  if (threadIdx.x < D) {
    const int64_t chunks = dm.chunks;
    float m = -INFINITY;
    for (int64_t c = 0; c < chunks; ++c)
      if (part[c][1] > 0.f) m = fmaxf(m, part[c][0]);
    const int d = threadIdx.x;
    float l = 0.f, acc_d = 0.f;
    for (int64_t c = 0; c < chunks; ++c) {
      if (part[c][1] > 0.f) {
        const float f = expf(part[c][0] - m);
        l += part[c][1] * f;
        acc_d += part[c][2 + d] * f;
      }
    }
    out[(row * dm.H + h0) * dm.D + d] = from_float<T>(l > 0.f ? acc_d / l : 0.f);
  }
  CELLSPEC_STAGE(10);
}

// combine_kernel's shared memory: two floats per chunk, within the 48 KB a launch gets by default
constexpr size_t kMaxCombineBytes = 48 * 1024;
size_t combine_bytes(const Dims& dm) { return static_cast<size_t>(dm.chunks) * 2 * sizeof(float); }

#include "cell_attention_mma.cuh"  // mma_chunk_kernel

// one pair (x1, x2) = (x[d], x[d + D / 2]) of a head rotated by (cos, sin) and rounded to T: each
// product rounded to float32, then the sum (no fused multiply-add, whose use the compiler picks
// per call site), so that rotary_split_kernel and RowMatMulRotary's epilogue agree bit for bit
template <typename T>
__device__ __forceinline__ void rotate_pair(float x1, float x2, float cs, float sn, T* first,
                                            T* second) {
  *first = from_float<T>(__fsub_rn(__fmul_rn(x1, cs), __fmul_rn(x2, sn)));
  *second = from_float<T>(__fadd_rn(__fmul_rn(x2, cs), __fmul_rn(x1, sn)));
}

// qkv [rows, (H + 2 KV) * D] -> q [rows, H * D] and k [rows, KV * D] rotated by each row's
// position (rotate-half, as opset-23 RotaryEmbedding with interleaved 0 over cos / sin caches
// [positions, D / 2]), v [rows, KV * D] copied; float32 arithmetic, one rounding. With q_norm
// and k_norm ([D] each, Qwen3), each head of q and k is first RMS-normalized over its D values
// and rounded to T, as RMSNormalization before RotaryEmbedding. One block per row, one warp per
// head.
template <typename T>
__global__ void rotary_split_kernel(const T* __restrict__ qkv, const T* __restrict__ cos_cache,
                                    const T* __restrict__ sin_cache,
                                    const int64_t* __restrict__ positions, int64_t max_position,
                                    const T* __restrict__ q_norm, const T* __restrict__ k_norm,
                                    float epsilon, int64_t H, int64_t KV, int64_t D,
                                    T* __restrict__ q, T* __restrict__ k, T* __restrict__ v) {
  const int64_t row = blockIdx.x;
  const int64_t half = D / 2;
  const T* in = qkv + row * (H + 2 * KV) * D;
  int64_t position = positions[row];
  position = position < 0 ? 0 : (position >= max_position ? max_position - 1 : position);
  const T* cos_row = cos_cache + position * half;
  const T* sin_row = sin_cache + position * half;
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int64_t head = threadIdx.x >> 5; head < H + KV; head += warps) {
    const T* x = in + head * D;
    const T* norm = head < H ? q_norm : k_norm;
    float inv = 1.f;
    if (norm != nullptr) {
      float squares = 0.f;
      for (int64_t d = lane; d < D; d += 32) {
        const float value = to_float(x[d]);
        squares = fmaf(value, value, squares);
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1)
        squares += __shfl_down_sync(0xffffffffu, squares, offset);
      squares = __shfl_sync(0xffffffffu, squares, 0);
      inv = 1.f / sqrtf(squares / static_cast<float>(D) + epsilon);
    }
    T* dst = head < H ? q + (row * H + head) * D : k + (row * KV + head - H) * D;
    for (int64_t d = lane; d < half; d += 32) {
      float x1 = to_float(x[d]), x2 = to_float(x[half + d]);
      if (norm != nullptr) {
        x1 = to_float(from_float<T>(x1 * inv * to_float(norm[d])));
        x2 = to_float(from_float<T>(x2 * inv * to_float(norm[half + d])));
      }
      rotate_pair(x1, x2, to_float(cos_row[d]), to_float(sin_row[d]), dst + d, dst + half + d);
    }
  }
  for (int64_t i = threadIdx.x; i < KV * D; i += blockDim.x)
    v[row * KV * D + i] = in[(H + KV) * D + i];
}

// x [rows, 2 I] -> silu(x[:, :I]) * x[:, I:] [rows, I], float32 arithmetic, one rounding
// silu(gate) * up in float32: SwiGlu's arithmetic, which RowMatMulSwiGlu must repeat bit for bit
__device__ __forceinline__ float silu_times(float gate, float up) {
  return gate / (1.f + expf(-gate)) * up;
}

template <typename T>
__global__ void swiglu_kernel(const T* __restrict__ x, int64_t rows, int64_t inner,
                              T* __restrict__ out) {
  const int64_t total = rows * inner;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / inner, j = i % inner;
    const float gate = to_float(x[row * 2 * inner + j]);
    const float up = to_float(x[row * 2 * inner + inner + j]);
    out[i] = from_float<T>(silu_times(gate, up));
  }
}

// RowMatMul's kernel, for any number of rows: y[r, n] = sum over k of x[r, k] w[n, k] in float32,
// one rounding, on the tensor cores (mma.sync m16n8k16, float32 accumulators). K is cut into
// chunks of 32 and the chunks into kSlices runs of consecutive chunks; a warp sums one run for a
// tile of 8 outputs and 16 kMTiles rows, and the runs' sums are added in run order. Lane (g, t) =
// (lane / 4, lane % 4) loads 16 bytes, k in [32 c + 8 t, + 8), of weight row g and of x rows g
// and g + 8: one mma takes the first four of those k as its slots {2t, 2t + 1, 2t + 8, 2t + 9},
// a second one the last four. (The slots' order is any bijection of the chunk's k, chosen so
// that every load is a 16-byte vector and no shared memory is needed.) kSlices depends on K and
// N only (row_slices), so nothing in a row's arithmetic depends on the other rows, on how many
// there are, or on its tile: a sequence's projections round the same alone, in a batch, in a
// verify or in a prompt. With `tiled`, w is in the ops' tiled layout (the header): lane
// (g, t) finds the same 8 values, so the sums are the same; a warp's loads of a chunk are 512
// contiguous bytes a set instead of 64 bytes of 8 rows. kDeep builds load 8 chunks ahead at one
// tile of rows instead of ROW_LOADS (row_tile_kernel chooses). The epilogue (kKind):
// - kRowPlain (RowMatMul): y [rows, N].
// - kRowSwiGlu (RowMatMulSwiGlu): w holds 2 N rows, gate then up; output n sums rows n and N + n,
//   each rounded to T, then silu_times(gate, up) as swiglu_kernel computes it: SwiGlu(RowMatMul)
//   bit for bit.
// - kRowRotary (RowMatMulRotary): w holds the H + 2 KV heads of D rows of a q, k, v projection;
//   a tile of the q and k heads takes 4 pairs of rows (d, d + D / 2) of one head, so that lane t
//   holds a pair's two sums: each rounded to T and rotated by rotate_pair at its row's position,
//   into q [rows, H D] and k [rows, KV D]; the v heads' tiles are copied into v [rows, KV D]:
//   rotary_split_kernel(RowMatMul) bit for bit.
// (Before: a warp per output on the CUDA cores, 8 conversions and FMAs per weight at 8 rows: level
// at one row, 1.4x cuBLAS's step at 8 on the H200; cuBLAS for more rows than one rounded a row
// otherwise than alone. bench/NOTES.md, 2026-12-02.)
constexpr int kRowWarps = 8;  // a block's warps: kRowWarps / kSlices tiles of outputs
#ifndef ROW_MIN_WARPS
#define ROW_MIN_WARPS 2048  // runs of K are cut until this many warps share the outputs
#endif
#ifndef ROW_LOADS
#define ROW_LOADS 4  // chunks loaded before their mma's (at one tile of rows)
#endif
constexpr int kRowPlain = 0, kRowSwiGlu = 1, kRowRotary = 2;

// kRowRotary's epilogue: the caches [max_position, D / 2] and each row's position (clamped into
// the caches, as rotary_split_kernel does), the heads, and the outputs
template <typename T>
struct RowRotary {
  const T *cos, *sin;
  const int64_t* positions;
  int64_t max_position;
  int H, KV, D;
  T *q, *k, *v;
};

// d += a b on the tensor cores for one 16x8x16 tile, T the inputs' type (PTX's f16 or bf16)
#define CELLSPEC_MMA_16816(PTX)                                                              \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." PTX "." PTX                          \
               ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"     \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                             \
               : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1))

template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                          uint32_t a3, uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // never launched there: device_has_mma
#else
  if constexpr (std::is_same<T, __half>::value)
    CELLSPEC_MMA_16816("f16");
  else
    CELLSPEC_MMA_16816("bf16");
#endif
}
#undef CELLSPEC_MMA_16816

// whether tile `tile` of 8 outputs is a rotated (q or k) head's: RowMatMulRotary's first
// (H + KV) (D / 2 / 4) tiles, 4 rotated pairs each
template <int kKind, typename T>
__device__ __forceinline__ bool row_tile_rotated(int tile, const RowRotary<T>& rot) {
  return kKind == kRowRotary && tile < (rot.H + rot.KV) * (rot.D / 2 / 4);
}

// the weight row (of w [kSets N, K]) that lane group g of tile `tile` loads: tile * 8 + g, or in
// a rotated head's tile the pair g / 2's first (g even) or second row. A tiled weight's rows are
// in the rotated order already.
template <int kKind, typename T>
__device__ __forceinline__ int row_weight_row(int tile, int g, const RowRotary<T>& rot,
                                              bool tiled) {
  if (tiled || !row_tile_rotated<kKind>(tile, rot)) return tile * 8 + g;
  const int half = rot.D / 2, per_head = half / 4;
  return (tile / per_head) * rot.D + (tile % per_head) * 4 + g / 2 + (g & 1) * half;
}

// the epilogue (kKind) of a tile of 8 outputs and 16 rows from r_top whose sums lane (g, t) holds
// in total[i][set] as an mma's accumulators: row g (i < 2) or g + 8, output 2 t + i % 2
template <typename T, int kKind, int kSets>
__device__ __forceinline__ void row_epilogue(const float (&total)[4][kSets], int tile,
                                             bool rotated, int r_top, int rows, int N,
                                             T* __restrict__ y, const RowRotary<T>& rot) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, n0 = tile * 8;
  if (kKind == kRowRotary && rotated) {
    const int half = rot.D / 2, per_head = half / 4;
    const int head = tile / per_head, d = (tile % per_head) * 4 + t;
#pragma unroll
    for (int eight = 0; eight < 2; ++eight) {
      const int r = r_top + g + 8 * eight;
      if (r >= rows) continue;
      int64_t position = rot.positions[r];
      position = position < 0 ? 0 : (position >= rot.max_position ? rot.max_position - 1
                                                                   : position);
      const float x1 = to_float(from_float<T>(total[2 * eight][0]));
      const float x2 = to_float(from_float<T>(total[2 * eight + 1][0]));
      T* dst = head < rot.H ? rot.q + (static_cast<int64_t>(r) * rot.H + head) * rot.D
                            : rot.k + (static_cast<int64_t>(r) * rot.KV + head - rot.H) * rot.D;
      rotate_pair(x1, x2, to_float(rot.cos[position * half + d]),
                  to_float(rot.sin[position * half + d]), dst + d, dst + half + d);
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = r_top + g + 8 * (i / 2), n = n0 + 2 * t + (i & 1);
    if (r >= rows || n >= N) continue;
    if (kKind == kRowRotary) {  // a v head: copied
      const int v_width = rot.KV * rot.D, first = (rot.H + rot.KV) * rot.D;
      rot.v[static_cast<int64_t>(r) * v_width + n - first] = from_float<T>(total[i][0]);
      continue;
    }
    float out = total[i][0];
    if (kKind == kRowSwiGlu) {
      const float gate = to_float(from_float<T>(total[i][0]));
      const float up = to_float(from_float<T>(total[i][kSets - 1]));
      out = silu_times(gate, up);
    }
    y[static_cast<int64_t>(r) * N + n] = from_float<T>(out);
  }
}

template <typename T, int kKind, int kMTiles, int kSlices, bool kOverlap, bool kDeep>
__global__ void __launch_bounds__(32 * kRowWarps) row_matmul_kernel(
    const T* __restrict__ x, const T* __restrict__ w, int rows, int K, int N,
    T* __restrict__ y, RowRotary<T> rot, bool early_weights, bool tiled) {
  constexpr int kSets = kKind == kRowSwiGlu ? 2 : 1;  // weight tiles: n, or gate n and up n
  constexpr int kLoads = kMTiles == 1 ? (kDeep ? 2 * ROW_LOADS : ROW_LOADS) : 2;
  constexpr int kValues = kMTiles * kSets * 4;
  __shared__ float sums[kSlices > 1 ? kRowWarps : 1][kValues][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, slice = warp % kSlices;
  const int g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.y * (kRowWarps / kSlices) + warp / kSlices;
  const int n0 = tile * 8;
  const int r0 = blockIdx.x * 16 * kMTiles;
  const bool rotated = row_tile_rotated<kKind>(tile, rot);
  const int w_row = row_weight_row<kKind>(tile, g, rot, tiled);
  const bool has_n = tiled ? n0 < N : w_row < N;
  const int chunks = (K + 31) / 32;
  const int begin = slice * chunks / kSlices, end = (slice + 1) * chunks / kSlices;
  // where lane (g, t) finds its 8 values of chunk c of weight set `set`: at weight(set) + c *
  // the layout's stride. Rows: w [kSets N, K], row w_row, stride 32. Tiled: w [N / 8, chunks,
  // kSets, 8, 32] (K a multiple of 32, N of 8), stride 256 kSets, so that a warp's 16-byte loads
  // of a chunk are 512 contiguous bytes a set, and a chunk's sets lie side by side. The main
  // loop is built once per layout, its stride a compile-time constant: a run-time one cost the
  // shallow builds 6-12 registers (bench/NOTES.md, 2026-12-04, ninth sitting).
  constexpr int64_t kRowStep = 32, kTiledStep = 256 * kSets;
  auto weight = [&](int set) {
    return tiled ? w + (static_cast<int64_t>(tile) * chunks * kSets + set) * 256 + g * 32 + 8 * t
                 : w + (static_cast<int64_t>(set) * N + w_row) * K + 8 * t;
  };
  float acc[kMTiles][kSets][4] = {};
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  if constexpr (kOverlap) {
    allow_dependents();
    // constant weights: the lines of their first loads go into L2 while the previous kernel may
    // still run (the loop below is the plain kernel's, so that one row's code is unchanged)
    if (early_weights)
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int k = (begin + u) * 32 + 8 * t;
        if (begin + u < end && k < K && has_n)
#pragma unroll
          for (int set = 0; set < kSets; ++set)
            prefetch_l2(weight(set) + (begin + u) * (tiled ? kTiledStep : kRowStep));
      }
    wait_for_predecessor();
  }
  auto run = [&](auto step) {
    constexpr int64_t kStep = decltype(step)::value;
    const T* weights[kSets];
#pragma unroll
    for (int set = 0; set < kSets; ++set) weights[set] = weight(set);
    for (int base = begin; base < end; base += kLoads) {
      uint4 wv[kLoads][kSets], xv[kLoads][kMTiles][2];
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        const int k = (base + u) * 32 + 8 * t;
        const bool in_k = base + u < end && k < K;
#pragma unroll
        for (int set = 0; set < kSets; ++set)
          wv[u][set] = in_k && has_n ? *reinterpret_cast<const uint4*>(
                                           weights[set] + (base + u) * kStep)
                                     : zero;
#pragma unroll
        for (int m = 0; m < kMTiles; ++m)
#pragma unroll
          for (int half = 0; half < 2; ++half) {
            const int r = r0 + 16 * m + 8 * half + g;
            xv[u][m][half] = in_k && r < rows ? *reinterpret_cast<const uint4*>(
                                                    x + static_cast<int64_t>(r) * K + k)
                                              : zero;
          }
      }
#pragma unroll
      for (int u = 0; u < kLoads; ++u) {
        if (base + u >= end) break;
#pragma unroll
        for (int m = 0; m < kMTiles; ++m) {
          const uint4 lo = xv[u][m][0], hi = xv[u][m][1];
#pragma unroll
          for (int set = 0; set < kSets; ++set) {
            const uint4 b = wv[u][set];
            mma_16816<T>(acc[m][set], lo.x, hi.x, lo.y, hi.y, b.x, b.y);
            mma_16816<T>(acc[m][set], lo.z, hi.z, lo.w, hi.w, b.z, b.w);
          }
        }
      }
    }
  };
  if (tiled)
    run(std::integral_constant<int64_t, kTiledStep>{});
  else
    run(std::integral_constant<int64_t, kRowStep>{});
  if (kSlices > 1) {
    if (slice > 0) {
#pragma unroll
      for (int m = 0; m < kMTiles; ++m)
#pragma unroll
        for (int set = 0; set < kSets; ++set)
#pragma unroll
          for (int i = 0; i < 4; ++i)
            sums[warp][(m * kSets + set) * 4 + i][lane] = acc[m][set][i];
    }
    __syncthreads();
    if (slice > 0) return;
  }
#pragma unroll
  for (int m = 0; m < kMTiles; ++m) {
    // the runs added in order; accumulator i holds row g (i < 2) or g + 8, output 2 t + i % 2
    float total[4][kSets];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int set = 0; set < kSets; ++set) {
        total[i][set] = acc[m][set][i];
#pragma unroll
        for (int run = 1; run < kSlices; ++run)
          total[i][set] += sums[kSlices > 1 ? warp + run : 0][(m * kSets + set) * 4 + i][lane];
      }
    row_epilogue<T, kKind, kSets>(total, tile, rotated, r0 + 16 * m, rows, N, y, rot);
  }
}

// 16-byte copies from global to shared memory that bypass the registers (compute capability 8.0
// and above), zero-filled where !valid (then `from` is not read)
__device__ __forceinline__ void copy_async16(void* to, const void* from, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(address), "l"(from),
               "r"(valid ? 16 : 0));
#endif
}
__device__ __forceinline__ void copy_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int kPending>
__device__ __forceinline__ void copy_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending));
#endif
}

constexpr int kWideChunks = 2, kWideStages = 4, kWideWeightRows = 128;

// The prompt kernels' (row_wide_kernel's, row_wgmma_kernel's) pass over K's chunks of 32:
// kWideStages stages of kWideChunks chunks, kAhead of them in flight through cp.async ahead of
// the step (copy_stage(first chunk, stage) issues a stage's copies). At each step, once its stage
// is in (kAsyncProxy: and visible to wgmma's shared-memory reads) and every thread is done with
// the stage refilled next, that stage is refilled kAhead steps ahead and chunk(stage, j, c) runs
// for the step's chunks j (chunk c of K), then step_done(). kAhead kWideStages - 1: the stage
// refilled is the previous step's; kWideStages - 2: the one before it (a step's asynchronous
// reads of its stage may then go on during the next step).
template <bool kAsyncProxy, int kAhead, typename Copy, typename Chunk, typename Done>
__device__ __forceinline__ void wide_chunks(int chunks, Copy copy_stage, Chunk chunk,
                                            Done step_done) {
  static_assert(kAhead >= 1 && kAhead < kWideStages, "a stage ahead, and one being read");
  const int steps = (chunks + kWideChunks - 1) / kWideChunks;
#pragma unroll
  for (int s = 0; s < kAhead; ++s) {
    if (s < steps) copy_stage(s * kWideChunks, s);
    copy_async_commit();
  }
  for (int step = 0; step < steps; ++step) {
    copy_async_wait<kAhead - 1>();
    if constexpr (kAsyncProxy) asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
    __syncthreads();  // this step's chunks are in; every warp is done with the stage refilled next
    const int next = step + kAhead;
    if (next < steps) copy_stage(next * kWideChunks, next % kWideStages);
    copy_async_commit();
    const int stage = step % kWideStages;
#pragma unroll
    for (int j = 0; j < kWideChunks; ++j) {
      const int c = step * kWideChunks + j;
      if (c >= chunks) break;
      chunk(stage, j, c);
    }
    step_done();
  }
  copy_async_wait<0>();
}

// K's runs (row_slices) in the prompt kernels: after chunk c, a run that ends there has its sums
// added to the earlier runs' (fold(first): the first run's taken as they are, its accumulators
// then zeroed), as row_matmul_kernel adds them
template <int kSlices, typename Fold>
__device__ __forceinline__ void end_runs(int c, int chunks, int& slice, int& slice_end,
                                         Fold fold) {
  while (slice < kSlices && c + 1 == slice_end) {
    fold(slice == 0);
    ++slice;
    slice_end = (slice + 1) * chunks / kSlices;
  }
}

// where a prompt kernel's weight row `row` of its block (tile, set, row of 8) reads unit `unit` (8
// values) of chunk 0, and whether that row is one of w's (in)
template <int kKind, int kSets, typename T>
__device__ __forceinline__ const T* wide_weight_from(const T* w, int row, int unit,
                                                     int first_tile, int chunks, int K, int N,
                                                     const RowRotary<T>& rot, bool tiled,
                                                     bool& in) {
  const int tile = first_tile + row / (8 * kSets), set = (row / 8) % kSets, wg = row % 8;
  const int w_row = row_weight_row<kKind>(tile, wg, rot, tiled);
  in = tiled ? tile * 8 < N : w_row < N;
  return !in     ? w
         : tiled ? w + (static_cast<int64_t>(tile) * chunks * kSets + set) * 256 + wg * 32 +
                       8 * unit
                 : w + (static_cast<int64_t>(set) * N + w_row) * K + 8 * unit;
}

// RowMatMul's kernel for a prompt's rows (more than ROW_WIDE_ROWS): row_matmul_kernel's sums, bit
// for bit, with the operands shared through shared memory. A block takes 32 kM rows and
// 16 / kSets tiles of 8 outputs; its 8 warps, 2 (rows) x 4 (outputs), each 16 kM rows (kM tiles
// of 16) and 4 / kSets tiles of outputs. Stage by stage (kWideChunks chunks of 32 k, kWideStages
// stages in flight, dynamic shared memory), the block copies its x rows and weight rows to shared
// memory, and lane (g, t) reads there the 16 bytes (k in [32 c + 8 t, + 8) of rows g and g + 8,
// and of weight row g) that row_matmul_kernel loads from global memory, into the same mma slots.
// K's runs are row_slices(K, N)'s: each run's chunks are summed from zero in order, and the runs'
// sums added in run order, as there. So a row rounds the same here as alone at a decode step.
// Where row_matmul_kernel's warp loads its x rows for every tile of 8 outputs, here 16 kM rows
// meet 32 outputs a load (bench/NOTES.md, 2026-12-06, fifth sitting).
constexpr size_t wide_stage_bytes(int kM) {
  return size_t{kWideChunks} * (32 * kM + kWideWeightRows) * 32 * 2;
}
// a block's tiles of 8 outputs: kWideWeightRows weight rows, each tile one (RowMatMul) or two
// (RowMatMulSwiGlu: gate and up) sets of 8
__host__ __device__ constexpr int wide_block_tiles(int kKind) {
  return kWideWeightRows / 8 / (kKind == kRowSwiGlu ? 2 : 1);
}
template <typename T, int kKind, int kM, int kSlices>
__global__ void __launch_bounds__(256, kM == 4 ? 1 : 2) row_wide_kernel(
    const T* __restrict__ x, const T* __restrict__ w, int rows, int K, int N, T* __restrict__ y,
    RowRotary<T> rot, bool tiled) {
  constexpr int kSets = kKind == kRowSwiGlu ? 2 : 1;
  constexpr int kBlockTiles = wide_block_tiles(kKind), kWarpTiles = kBlockTiles / 4;
  constexpr int kRows = 32 * kM;
  constexpr int kXUnits = kRows * 4 / 256, kWUnits = kWideWeightRows * 4 / 256;
  // stage s, chunk j: x rows [kRows][32], then weight rows [kWideWeightRows][32]
  extern __shared__ uint4 wide_shared[];
  T* const shared = reinterpret_cast<T*>(wide_shared);
  constexpr int kChunkValues = (kRows + kWideWeightRows) * 32;
  auto x_at = [&](int stage, int j, int row) {
    return shared + (stage * kWideChunks + j) * kChunkValues + row * 32;
  };
  auto w_at = [&](int stage, int j, int row) {
    return shared + (stage * kWideChunks + j) * kChunkValues + (kRows + row) * 32;
  };
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
  const int warp_m = warp & 1, warp_n = warp >> 1;
  const int r0 = blockIdx.x * kRows, first_tile = blockIdx.y * kBlockTiles;
  const int chunks = (K + 31) / 32;
  // what each thread copies of a chunk: kXUnits 16-byte units of x (row q / 4, unit q % 4) and
  // kWUnits of w (weight row q / 4 of the block: tile, set, row), q = threadIdx.x + 256 i; their
  // chunk-0 addresses
  const T* x_from[kXUnits];
  const T* w_from[kWUnits];
  bool x_in[kXUnits], w_in[kWUnits];
  constexpr int64_t kRowStep = 32, kTiledStep = 256 * kSets;
  const int64_t w_step = tiled ? kTiledStep : kRowStep;
  const int unit = threadIdx.x % 4;  // the same for every i (256 is a multiple of 4)
#pragma unroll
  for (int i = 0; i < kXUnits; ++i) {
    const int r = r0 + (threadIdx.x + 256 * i) / 4;
    x_in[i] = r < rows;
    x_from[i] = x + static_cast<int64_t>(x_in[i] ? r : 0) * K + 8 * unit;
  }
#pragma unroll
  for (int i = 0; i < kWUnits; ++i) {
    w_from[i] = wide_weight_from<kKind, kSets>(w, (threadIdx.x + 256 * i) / 4, unit, first_tile,
                                               chunks, K, N, rot, tiled, w_in[i]);
  }
  auto copy_stage = [&](int first_chunk, int stage) {
#pragma unroll
    for (int j = 0; j < kWideChunks; ++j) {
      const int c = first_chunk + j;
      const bool in_k = c < chunks && c * 32 + 8 * unit < K;
#pragma unroll
      for (int i = 0; i < kXUnits; ++i) {
        const bool valid = in_k && x_in[i];
        copy_async16(x_at(stage, j, (threadIdx.x + 256 * i) / 4) + 8 * unit,
                     valid ? x_from[i] + c * 32 : x, valid);
      }
#pragma unroll
      for (int i = 0; i < kWUnits; ++i) {
        const bool valid = in_k && w_in[i];
        copy_async16(w_at(stage, j, (threadIdx.x + 256 * i) / 4) + 8 * unit,
                     valid ? w_from[i] + c * w_step : w, valid);
      }
    }
  };
  float acc[kM][kWarpTiles][kSets][4] = {};
  float total[kSlices > 1 ? kM : 1][kSlices > 1 ? kWarpTiles : 1][kSets][4] = {};
  int slice = 0, slice_end = chunks / kSlices;
  auto chunk = [&](int stage, int j, int c) {
    uint4 a[kM][2], b[kWarpTiles][kSets];
#pragma unroll
    for (int m = 0; m < kM; ++m)
#pragma unroll
      for (int half = 0; half < 2; ++half)
        a[m][half] = *reinterpret_cast<const uint4*>(
            x_at(stage, j, warp_m * 16 * kM + 16 * m + 8 * half + g) + 8 * t);
#pragma unroll
    for (int n = 0; n < kWarpTiles; ++n)
#pragma unroll
      for (int set = 0; set < kSets; ++set)
        b[n][set] = *reinterpret_cast<const uint4*>(
            w_at(stage, j, ((warp_n * kWarpTiles + n) * kSets + set) * 8 + g) + 8 * t);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      const uint4 lo = a[m][0], hi = a[m][1];
#pragma unroll
      for (int n = 0; n < kWarpTiles; ++n)
#pragma unroll
        for (int set = 0; set < kSets; ++set) {
          const uint4 v = b[n][set];
          mma_16816<T>(acc[m][n][set], lo.x, hi.x, lo.y, hi.y, v.x, v.y);
          mma_16816<T>(acc[m][n][set], lo.z, hi.z, lo.w, hi.w, v.z, v.w);
        }
    }
    if constexpr (kSlices > 1)
      end_runs<kSlices>(c, chunks, slice, slice_end, [&](bool first) {
#pragma unroll
        for (int m = 0; m < kM; ++m)
#pragma unroll
          for (int n = 0; n < kWarpTiles; ++n)
#pragma unroll
            for (int set = 0; set < kSets; ++set)
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                total[m][n][set][i] = first ? acc[m][n][set][i]
                                            : total[m][n][set][i] + acc[m][n][set][i];
                acc[m][n][set][i] = 0.f;
              }
      });
  };
  wide_chunks<false, kWideStages - 1>(chunks, copy_stage, chunk, [] {});
#pragma unroll
  for (int m = 0; m < kM; ++m)
#pragma unroll
    for (int n = 0; n < kWarpTiles; ++n) {
      const int tile = first_tile + warp_n * kWarpTiles + n;
      if (tile * 8 >= N) continue;
      float sums[4][kSets];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int set = 0; set < kSets; ++set)
          if constexpr (kSlices > 1)
            sums[i][set] = total[m][n][set][i];
          else
            sums[i][set] = acc[m][n][set][i];
      row_epilogue<T, kKind, kSets>(sums, tile, row_tile_rotated<kKind>(tile, rot),
                                    r0 + warp_m * 16 * kM + 16 * m, rows, N, y, rot);
    }
}

// RowMatMul's kernel for a prompt's rows on Hopper's warpgroup MMA (wgmma.mma_async m64n128k16,
// float32 accumulators; built where the plugin is compiled for sm_90a: CELLSPEC_WGMMA):
// row_matmul_kernel's sums, bit for bit. tools/wgmma_probe.cu found on an H100 (2026-12-06,
// sixth sitting) that one wgmma k16 step gives mma.sync m16n8k16's float32 exactly for the same
// 16 products and accumulator, in float16 and bfloat16, and that neither instruction's result
// depends on which slot of the step a product takes. So a step here takes the same 16 k as one
// of row_matmul_kernel's mma's (chunk c's first: k in [32 c + 8 t, + 4) for t = 0..3; its second:
// [32 c + 8 t + 4, + 4)), and K's runs (row_slices) are summed and added as there. A block is
// row_wide_kernel's at kM 4 (128 x rows, kWideWeightRows weight rows, kWideStages stages of
// kWideChunks chunks): its two warpgroups take 64 rows each against all 128 weight rows. Each
// 16-byte unit of a row's chunk (k in [32 c + 8 t, + 8)) is copied to shared memory as two
// 8-byte halves, into the core matrices (8 rows x 16 bytes) that the step of each half reads:
// step s (the unit's half), core matrix t / 2, bytes 8 (t % 2) of the row's 16. The weights are
// read through a shared-memory descriptor (no swizzle), the x rows from registers (the mma.sync
// A fragment, each 4-byte pair a conflict-free shared load).
[[maybe_unused]] constexpr int kWgmmaRows = 128;
// a chunk's operand of R rows in shared memory: step s, 8-row group rg, core matrix h
[[maybe_unused]] __device__ __forceinline__ int wgmma_core(int R, int s, int rg, int h) {
  return ((s * (R / 8) + rg) * 2 + h) * 128;  // bytes
}
[[maybe_unused]] __device__ __forceinline__ void copy_async8(void* to, const void* from,
                                                         bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const unsigned address = static_cast<unsigned>(__cvta_generic_to_shared(to));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(address), "l"(from),
               "r"(valid ? 8 : 0));
#endif
}

#define CELLSPEC_WG_D                                                                         \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "  \
  "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "  \
  "%56, %57, %58, %59, %60, %61, %62, %63}"
#define CELLSPEC_WG_F8(i)                                                                     \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define CELLSPEC_WGMMA_128(PTX)                                                                \
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"                                      \
               "wgmma.mma_async.sync.aligned.m64n128k16.f32." PTX "." PTX " " CELLSPEC_WG_D    \
               ", {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"                                 \
               : CELLSPEC_WG_F8(0), CELLSPEC_WG_F8(8), CELLSPEC_WG_F8(16), CELLSPEC_WG_F8(24), \
                 CELLSPEC_WG_F8(32), CELLSPEC_WG_F8(40), CELLSPEC_WG_F8(48), CELLSPEC_WG_F8(56) \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc))

// d (64 x 128 of the warpgroup, the mma.sync C layout for each of its 16 tiles of 8 outputs) +=
// a (this warp's 16 rows x 16 k) b (the weights' descriptor); issued, not waited for
template <typename T>
__device__ __forceinline__ void wgmma_128(float (&d)[64], const uint32_t (&a)[4], uint64_t desc) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if constexpr (std::is_same<T, __half>::value)
    CELLSPEC_WGMMA_128("f16");
  else
    CELLSPEC_WGMMA_128("bf16");
#else
  __trap();  // never launched there: built only with CELLSPEC_WGMMA (sm_90a)
#endif
}
#undef CELLSPEC_WGMMA_128
#undef CELLSPEC_WG_F8
#undef CELLSPEC_WG_D

[[maybe_unused]] __device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
[[maybe_unused]] __device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// every issued wgmma of this warpgroup done but its last kPending groups; d's registers then
// read by nothing earlier
template <int kPending = 0>
__device__ __forceinline__ void wgmma_wait(float (&d)[64]) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
#pragma unroll
  for (int i = 0; i < 64; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
[[maybe_unused]] __device__ __forceinline__ uint64_t wgmma_descriptor(const void* smem) {
  const uint32_t address = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  // start >> 4; leading (k: the step's second core matrix) 128 bytes; stride (8 rows) 256
  return static_cast<uint64_t>((address & 0x3FFFF) >> 4) | (uint64_t{128 >> 4} << 16) |
         (uint64_t{256 >> 4} << 32);
}

template <typename T, int kKind, int kSlices>
__global__ void __launch_bounds__(256, 1) row_wgmma_kernel(
    const T* __restrict__ x, const T* __restrict__ w, int rows, int K, int N, T* __restrict__ y,
    RowRotary<T> rot, bool tiled) {
#if !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // never launched there: built only with CELLSPEC_WGMMA (sm_90a)
#else
  constexpr int kSets = kKind == kRowSwiGlu ? 2 : 1;
  constexpr int kBlockTiles = wide_block_tiles(kKind);
  constexpr int kR = kWgmmaRows, kWR = kWideWeightRows;
  constexpr int kChunkBytes = (kR + kWR) * 64;
  constexpr int kXPieces = kR * 8 / 256, kWPieces = kWR * 8 / 256;  // 8-byte halves a thread
  extern __shared__ uint4 wide_shared[];
  char* const shared = reinterpret_cast<char*>(wide_shared);
  auto chunk_at = [&](int stage, int j) {
    return shared + (stage * kWideChunks + j) * kChunkBytes;
  };
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, g = lane >> 2, t = lane & 3;
  const int group = warp / 4, in_group = warp % 4;  // warpgroup: rows 64 group; warp: + 16 in_group
  const int r0 = blockIdx.x * kR, first_tile = blockIdx.y * kBlockTiles;
  const int chunks = (K + 31) / 32;
  // what each thread copies of a chunk: 8-byte half q % 2 of unit (q / 2) % 4 of row q / 8,
  // q = threadIdx.x + 256 i (the same unit and half for every i)
  const int unit = (threadIdx.x / 2) % 4, half = threadIdx.x % 2;
  const T* x_from[kXPieces];
  const T* w_from[kWPieces];
  bool x_in[kXPieces], w_in[kWPieces];
  int x_to[kXPieces], w_to[kWPieces];
  constexpr int64_t kRowStep = 32, kTiledStep = 256 * kSets;
  const int64_t w_step = tiled ? kTiledStep : kRowStep;
#pragma unroll
  for (int i = 0; i < kXPieces; ++i) {
    const int row = (threadIdx.x + 256 * i) / 8, r = r0 + row;
    x_in[i] = r < rows;
    x_from[i] = x + static_cast<int64_t>(x_in[i] ? r : 0) * K + 8 * unit + 4 * half;
    x_to[i] = wgmma_core(kR, half, row / 8, unit / 2) + (row % 8) * 16 + (unit % 2) * 8;
  }
#pragma unroll
  for (int i = 0; i < kWPieces; ++i) {
    const int row = (threadIdx.x + 256 * i) / 8;
    w_from[i] = wide_weight_from<kKind, kSets>(w, row, unit, first_tile, chunks, K, N, rot, tiled,
                                               w_in[i]);
    if (w_in[i]) w_from[i] += 4 * half;
    w_to[i] = kR * 64 + wgmma_core(kWR, half, row / 8, unit / 2) + (row % 8) * 16 + (unit % 2) * 8;
  }
  auto copy_stage = [&](int first_chunk, int stage) {
#pragma unroll
    for (int j = 0; j < kWideChunks; ++j) {
      const int c = first_chunk + j;
      const bool in_k = c < chunks && c * 32 + 8 * unit < K;
      char* const to = chunk_at(stage, j);
#pragma unroll
      for (int i = 0; i < kXPieces; ++i) {
        const bool valid = in_k && x_in[i];
        copy_async8(to + x_to[i], valid ? x_from[i] + c * 32 : x, valid);
      }
#pragma unroll
      for (int i = 0; i < kWPieces; ++i) {
        const bool valid = in_k && w_in[i];
        copy_async8(to + w_to[i], valid ? w_from[i] + c * w_step : w, valid);
      }
    }
  };
  float acc[64], total[kSlices > 1 ? 64 : 1];
#pragma unroll
  for (int i = 0; i < 64; ++i) acc[i] = 0.f;
  // this warp's A fragment words in a chunk's step s: rows 16 in_group + g (+ 8) of the
  // warpgroup's 64, slots 2 t, 2 t + 1 (core matrix 0) and 2 t + 8, 2 t + 9 (core matrix 1)
  const int a_row = 64 * group + 16 * in_group + g;
  int slice = 0, slice_end = chunks / kSlices;
  auto chunk = [&](int stage, int j, int c) {
    const char* const base = chunk_at(stage, j);
    uint32_t a[2][4];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const char* lo = base + wgmma_core(kR, s, a_row / 8, 0) + (a_row % 8) * 16 + 4 * t;
      const char* hi = base + wgmma_core(kR, s, a_row / 8 + 1, 0) + (a_row % 8) * 16 + 4 * t;
      a[s][0] = *reinterpret_cast<const uint32_t*>(lo);
      a[s][1] = *reinterpret_cast<const uint32_t*>(hi);
      a[s][2] = *reinterpret_cast<const uint32_t*>(lo + 128);
      a[s][3] = *reinterpret_cast<const uint32_t*>(hi + 128);
    }
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < 2; ++s)
      wgmma_128<T>(acc, a[s], wgmma_descriptor(base + kR * 64 + wgmma_core(kWR, s, 0, 0)));
    wgmma_commit();
    if constexpr (kSlices > 1)
      end_runs<kSlices>(c, chunks, slice, slice_end, [&](bool first) {
        wgmma_wait(acc);  // the run's last steps done
#pragma unroll
        for (int i = 0; i < 64; ++i) {
          total[i] = first ? acc[i] : total[i] + acc[i];
          acc[i] = 0.f;
        }
      });
  };
  // a step's wgmma's may run on during the next step (its stage is refilled one step later):
  // each step ends with all but its own done, and the sums are read once all are
  wide_chunks<true, kWideStages - 2>(chunks, copy_stage, chunk, [&] { wgmma_wait<1>(acc); });
  wgmma_wait(acc);
  // accumulator 4 q + i: tile of 8 outputs q of the block's (b kSets + set), the mma layout
#pragma unroll
  for (int b = 0; b < kBlockTiles; ++b) {
    const int tile = first_tile + b;
    if (tile * 8 >= N) continue;
    float sums[4][kSets];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int set = 0; set < kSets; ++set) {
        const int q = b * kSets + set;
        if constexpr (kSlices > 1)
          sums[i][set] = total[4 * q + i];
        else
          sums[i][set] = acc[4 * q + i];
      }
    row_epilogue<T, kKind, kSets>(sums, tile, row_tile_rotated<kKind>(tile, rot),
                                  r0 + 64 * group + 16 * in_group, rows, N, y, rot);
  }
#endif
}

// whether this process's device has compute capability `major` or above
bool device_is_at_least(int major) {
  int device = 0, value = 0;
  return cudaGetDevice(&device) == cudaSuccess &&
         cudaDeviceGetAttribute(&value, cudaDevAttrComputeCapabilityMajor, device) ==
             cudaSuccess &&
         value >= major;
}

// whether a step of `rows` (token rows, all sequences) launches its kernels overlapped:
// programmatic dependent launch needs compute capability 9.0. Overlapped launches run the
// kernels' kOverlap builds, plain ones the builds without it, which are the kernels as they were
// before overlapping; the arithmetic is the same. Every step overlaps: with the attention's
// reads of the step's inputs before its wait, the real SmolLM2's plain decoding on an H100 went
// 1,237 -> 1,434-1,460 tok/s (bench/NOTES.md, 2026-12-07, eighteenth sitting; in 2026-12-02's
// fifth sitting, with the wait first, one-row steps were 8% slower overlapped on the H200, and
// only steps of several rows overlapped since). CELLSPEC_CUDA_OVERLAP=rows in the environment
// overlaps only steps of several rows, as then; CELLSPEC_CUDA_OVERLAP=0 launches every step
// plainly, so that a profiler times each kernel alone (an overlapped kernel's span also holds
// its wait for the one before).
bool overlapping(int64_t rows) {
  static const int device_overlaps = [] {  // 0 never, 1 steps of several rows, 2 every step
    const char* value = std::getenv("CELLSPEC_CUDA_OVERLAP");
    const std::string setting(value ? value : "");
    if (!device_is_at_least(9) || setting == "0") return 0;
    return setting == "rows" ? 1 : 2;
  }();
  return device_overlaps == 2 || (rows > 1 && device_overlaps == 1);
}

// `kernel` launched on `stream`; with `programmatic`, so that it may start before the previous
// kernel of the stream ends: its allow_dependents / wait_for_predecessor say what may overlap.
// Errors as launched() reads them.
template <typename... Params, typename... Args>
void launch_after(bool programmatic, void (*kernel)(Params...), dim3 grid, dim3 block,
                  size_t shared_bytes, cudaStream_t stream, Args... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = programmatic ? 1 : 0;
  cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

// whether this process's device has mma.sync m16n8k16 (compute capability 8.0 and above)
bool device_has_mma() {
  static const bool has = device_is_at_least(8);
  return has;
}

// the runs row_matmul_kernel cuts K into for N outputs: 1, 2, 4 or 8, the fewest that give
// ROW_MIN_WARPS warps (small matrices need the parallelism, large ones the long runs), at
// most one per chunk. A function of K and N alone: a row's sums must not depend on the rows.
int row_slices(int K, int N) {
  const int tiles = (N + 7) / 8, chunks = (K + 31) / 32;
  int slices = 1;
  while (slices < kRowWarps && tiles * slices < ROW_MIN_WARPS && 2 * slices <= chunks)
    slices *= 2;
  return slices;
}

// row_matmul_kernel's build for `slices` runs of K
template <typename T, int kKind, int kMTiles, bool kOverlap, bool kDeep>
auto row_kernel_for(int slices) {
  return slices == 1   ? row_matmul_kernel<T, kKind, kMTiles, 1, kOverlap, kDeep>
         : slices == 2 ? row_matmul_kernel<T, kKind, kMTiles, 2, kOverlap, kDeep>
         : slices == 4 ? row_matmul_kernel<T, kKind, kMTiles, 4, kOverlap, kDeep>
                       : row_matmul_kernel<T, kKind, kMTiles, 8, kOverlap, kDeep>;
}

int multiprocessors();

// how many blocks of `kernel`, `threads` wide, one multiprocessor holds at once (its registers
// and shared memory). A kernel's resources do not change, so each is asked of the device once.
template <typename Kernel>
int resident_blocks(Kernel kernel, int threads) {
  static std::mutex mutex;
  static std::vector<std::pair<const void*, int>> known;
  std::lock_guard<std::mutex> lock(mutex);
  const void* key = reinterpret_cast<const void*>(kernel);
  for (const auto& [k, blocks] : known)
    if (k == key) return blocks;
  int per_sm = 0;
  if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, 0) != cudaSuccess)
    per_sm = 1;
  known.emplace_back(key, std::max(per_sm, 1));
  return known.back().second;
}

// row_matmul_kernel for tiles of 16 rows: its deep build (twice the loads in flight, more
// registers: fewer blocks at once) where each warp's run of K is at least kDeepChunks chunks
// and the deep build takes no more waves of blocks than the other. On the H200 (bench/NOTES.md,
// 2026-12-04, eighth sitting) the deep build read 8 Qwen3-8B-shaped layers' LM head 20% faster
// and their o and down projections 4-10%, took 2 waves where the other took 1 for their gate/up
// and qkv, and was slower on SmolLM2's short runs (K 576: its head 16.0 -> 18.8 us). How many
// loads are in flight changes no sum.
constexpr int kDeepChunks = 32;
template <typename T, int kKind, bool kOverlap>
auto row_tile_kernel(int slices, int run_chunks, int64_t blocks) {
  const auto shallow = row_kernel_for<T, kKind, 1, kOverlap, false>(slices);
  if (run_chunks < kDeepChunks) return shallow;
  const auto deep = row_kernel_for<T, kKind, 1, kOverlap, true>(slices);
  const int64_t a = int64_t{resident_blocks(shallow, 32 * kRowWarps)} * multiprocessors(),
                b = int64_t{resident_blocks(deep, 32 * kRowWarps)} * multiprocessors();
  return (blocks + b - 1) / b <= (blocks + a - 1) / a ? deep : shallow;
}

// blocks for the same outputs and other rows run side by side (the tiles of rows are grid x),
// so that the weights they share come from L2 after the first
template <typename T, int kKind, int kMTiles>
void launch_row_tiles(const T* x, const T* w, int rows, int K, int N, T* y,
                      const RowRotary<T>& rot, bool constant_w, bool tiled, cudaStream_t stream) {
  const int slices = row_slices(K, N), per_block = kRowWarps / slices;
  const dim3 grid((rows + 16 * kMTiles - 1) / (16 * kMTiles),
                  ((N + 7) / 8 + per_block - 1) / per_block);
  const dim3 block(32 * kRowWarps);
  const int64_t blocks = static_cast<int64_t>(grid.x) * grid.y;
  // only tiles of 16 rows (decode, verify) overlap: a prompt's wide tiles launch plainly
  const bool overlap = kMTiles == 1 && overlapping(rows);
  const int run_chunks = (K + 31) / 32 / slices;
  auto kernel = kMTiles != 1 ? row_kernel_for<T, kKind, kMTiles, false, false>(slices)
                : overlap    ? row_tile_kernel<T, kKind, true>(slices, run_chunks, blocks)
                             : row_tile_kernel<T, kKind, false>(slices, run_chunks, blocks);
  launch_after(overlap, kernel, grid, block, 0, stream, x, w, rows, K, N, y, rot, constant_w,
               tiled);
}

// RowMatMul's sums over `rows` rows of x on `stream`: row_matmul_kernel's blocks of 16 rows up to
// ROW_WIDE_ROWS rows (a decode batch, a verify); beyond (a prompt), row_wide_kernel or
// row_matmul_kernel's blocks of 64 rows as row_wide_tiles chooses. The same arithmetic for a row
// whichever. N: the sums (for kRowSwiGlu, half of w's rows).
#ifndef ROW_WIDE_ROWS
#define ROW_WIDE_ROWS 64
#endif

// row_wide_kernel's build for kM tiles of 16 rows a warp and `slices` runs of K
template <typename T, int kKind, int kM>
auto row_wide_for(int slices) {
  return slices == 1   ? row_wide_kernel<T, kKind, kM, 1>
         : slices == 2 ? row_wide_kernel<T, kKind, kM, 2>
         : slices == 4 ? row_wide_kernel<T, kKind, kM, 4>
                       : row_wide_kernel<T, kKind, kM, 8>;
}

// row_wgmma_kernel's build for `slices` runs of K
template <typename T, int kKind>
auto row_wgmma_for(int slices) {
  return slices == 1   ? row_wgmma_kernel<T, kKind, 1>
         : slices == 2 ? row_wgmma_kernel<T, kKind, 2>
         : slices == 4 ? row_wgmma_kernel<T, kKind, 4>
                       : row_wgmma_kernel<T, kKind, 8>;
}

// row_wide_tiles' kM for row_wgmma_kernel (its blocks are kM 4's: 128 rows, the same shared
// memory)
constexpr int kWideWgmma = 1;

// whether this build has row_wgmma_kernel: compiled for sm_90a (cellspec.plugins.build passes
// -DCELLSPEC_WGMMA=1 with it where the GPU is compute capability 9.0, whose code it then only has)
constexpr bool wgmma_built() {
#ifdef CELLSPEC_WGMMA
  return true;
#else
  return false;
#endif
}

// whether this device lets a block take row_wide_kernel's shared memory at kM (its opt-in limit:
// 227 KB on the H100 and H200, 163 KB on the A100, 99 KB on compute capability 8.6 and 8.9, so
// that kM 4's 128 KB does not fit there and kM 2's 96 KB does)
bool wide_fits(int kM) {
  static const int limit = [] {
    int device = 0, value = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&value, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    return value;
  }();
  return kWideStages * wide_stage_bytes(kM) <= static_cast<size_t>(limit);
}

// row_wide_kernel's builds for T and kKind allowed the dynamic shared memory they take (over
// 48 KB) where it fits: once, when an op's kernel is made (at session load, so never during a
// graph capture). A refusal is cleared, so that no later launch reads it as its own error.
template <typename T, int kKind>
void prepare_row_wide() {
  static std::once_flag once;
  std::call_once(once, [] {
    for (int slices : {1, 2, 4, 8}) {
      if (wide_fits(4))
        cudaFuncSetAttribute(row_wide_for<T, kKind, 4>(slices),
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kWideStages * wide_stage_bytes(4)));
      if (wide_fits(2))
        cudaFuncSetAttribute(row_wide_for<T, kKind, 2>(slices),
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kWideStages * wide_stage_bytes(2)));
      if (wgmma_built() && wide_fits(4))
        cudaFuncSetAttribute(row_wgmma_for<T, kKind>(slices),
                             cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(kWideStages * wide_stage_bytes(4)));
    }
    cudaGetLastError();
  });
}

// how a prompt's rows are tiled: CELLSPEC_ROW_WIDE unset (or another value), by row_wide_kernel
// (4 tiles of 16 rows a warp where that gives a grid of 2 blocks a multiprocessor or more, else
// 2), or where even that grid is under 0.3 blocks a multiprocessor, by row_matmul_kernel's tiles
// of 64 rows; set to g (row_wgmma_kernel, or row_wide_kernel's 4 where the build has none), 4, 2
// or 0, that one where it fits (the same sums whichever: a switch for tests and measurements).
// row_wgmma_kernel only where asked: on an H100 (2026-12-06, seventh sitting) it was 1.12-1.20x
// slower than row_wide_kernel's 4 on B's projections (bench/NOTES.md)
int wide_setting() {
  const char* value = std::getenv("CELLSPEC_ROW_WIDE");  // read at each prompt's launch: tests
  const std::string text(value ? value : "");           // set it per case
  return text == "g" ? (wgmma_built() ? kWideWgmma : 4)
         : text == "4" ? 4 : text == "2" ? 2 : text == "0" ? 0 : -1;
}

// row_wide_kernel's grid at kM for `rows` rows and N outputs: row blocks side by side for the
// same outputs (grid x), as launch_row_tiles has them
template <int kKind>
dim3 wide_grid(int kM, int rows, int N) {
  constexpr int kBlockTiles = wide_block_tiles(kKind);
  return dim3((rows + 32 * kM - 1) / (32 * kM), ((N + 7) / 8 + kBlockTiles - 1) / kBlockTiles);
}

// row_wide_kernel over `rows` rows on `stream` (kM as row_wide_tiles chooses)
template <typename T, int kKind>
void launch_row_wide(int kM, const T* x, const T* w, int rows, int K, int N, T* y,
                     const RowRotary<T>& rot, bool tiled, cudaStream_t stream) {
  const int tiles = kM == kWideWgmma ? 4 : kM;  // row_wgmma_kernel's blocks are kM 4's
  const dim3 grid = wide_grid<kKind>(tiles, rows, N);
  const int slices = row_slices(K, N);
  const size_t shared = kWideStages * wide_stage_bytes(tiles);
  if (kM == kWideWgmma)
    row_wgmma_for<T, kKind>(slices)<<<grid, 256, shared, stream>>>(x, w, rows, K, N, y, rot,
                                                                    tiled);
  else if (kM == 4)
    row_wide_for<T, kKind, 4>(slices)<<<grid, 256, shared, stream>>>(x, w, rows, K, N, y, rot,
                                                                       tiled);
  else
    row_wide_for<T, kKind, 2>(slices)<<<grid, 256, shared, stream>>>(x, w, rows, K, N, y, rot,
                                                                       tiled);
}

// row_wide_kernel's kM for `rows` rows and N outputs, or 0 for row_matmul_kernel's 64-row tiles
template <int kKind>
int row_wide_tiles(int rows, int N) {
  int kM = wide_setting();
  if (kM < 0) {
    auto blocks = [&](int m) {
      const dim3 grid = wide_grid<kKind>(m, rows, N);
      return int64_t{grid.x} * grid.y;
    };
    const int64_t sms = multiprocessors();
    kM = blocks(4) >= 2 * sms ? 4 : 10 * blocks(2) >= 3 * sms ? 2 : 0;
  }
  if (kM == kWideWgmma) return wide_fits(4) ? kM : 0;
  // where the device's shared memory is smaller: fewer rows a block, or the 64-row tiles
  if (kM == 4 && !wide_fits(4)) kM = 2;
  return kM == 2 && !wide_fits(2) ? 0 : kM;
}

// With constant_w (an initializer: no kernel of the step writes it), an overlapped launch
// prefetches the lines of its first weight loads into L2 while the previous kernel may still run.
template <typename T, int kKind>
void launch_row_matmul(const T* x, const T* w, int rows, int K, int N, T* y, bool constant_w,
                       bool tiled, cudaStream_t stream, const RowRotary<T>& rot = {}) {
  if (rows <= ROW_WIDE_ROWS)
    launch_row_tiles<T, kKind, 1>(x, w, rows, K, N, y, rot, constant_w, tiled, stream);
  else if (const int kM = row_wide_tiles<kKind>(rows, N))
    launch_row_wide<T, kKind>(kM, x, w, rows, K, N, y, rot, tiled, stream);
  else
    launch_row_tiles<T, kKind, 4>(x, w, rows, K, N, y, rot, constant_w, tiled, stream);
}

// the outputs row_matmul_kernel takes: a grid's y (tiles of 8 outputs) stops at 65,535
constexpr int64_t kRowMaxOutputs = 65535LL * 8;

// x [rows, 2 I] -> out [rows, I] by swiglu_kernel, on `stream`
template <typename T>
void launch_swiglu(const T* x, int64_t rows, int64_t inner, T* out, cudaStream_t stream) {
  const int64_t blocks = std::min<int64_t>((rows * inner + 255) / 256, 4096);
  swiglu_kernel<T><<<blocks, 256, 0, stream>>>(x, rows, inner, out);
}

// qkv [rows, (H + 2 KV) D] -> q, k (rotated; head norms first where q_norm and k_norm are given)
// and v by rotary_split_kernel, a warp per head (up to 32 of them), on `stream`
template <typename T>
void launch_rotary_split(const T* qkv, const T* cos_cache, const T* sin_cache,
                         const int64_t* positions, int64_t max_position, const T* q_norm,
                         const T* k_norm, float epsilon, int64_t rows, int64_t H, int64_t KV,
                         int64_t D, T* q, T* k, T* v, cudaStream_t stream) {
  const int threads = static_cast<int>(std::min<int64_t>(1024, 32 * (H + KV)));
  rotary_split_kernel<T><<<rows, threads, 0, stream>>>(qkv, cos_cache, sin_cache, positions,
                                                       max_position, q_norm, k_norm, epsilon,
                                                       H, KV, D, q, k, v);
}

// a row of SequentialCumSum per block: warps 1.. stage the next tile of x in shared memory while
// thread 0 sums this one, kScanBatch values per round of loads, into an output tile that every
// thread then writes out. The sum starts at -0, which adds to any x exactly as x (so y[0] = x[0],
// as numpy has it)
constexpr int kScanTile = 2048;
constexpr int kScanThreads = 256;
constexpr int kScanBatch = 64;  // divides kScanTile

__global__ void sequential_cumsum_kernel(const float* __restrict__ x, int64_t n,
                                         const float* __restrict__ limit,
                                         float* __restrict__ y) {
  __shared__ __align__(16) float staged[2][kScanTile];
  __shared__ __align__(16) float summed[kScanTile];
  __shared__ bool stop;
  const float* row_x = x + blockIdx.x * n;
  float* row_y = y + blockIdx.x * n;
  for (int64_t i = threadIdx.x; i < kScanTile && i < n; i += blockDim.x) staged[0][i] = row_x[i];
  __syncthreads();
  float sum = -0.f;
  for (int64_t base = 0, t = 0; base < n; base += kScanTile, ++t) {
    const int count = static_cast<int>(n - base < kScanTile ? n - base : kScanTile);
    if (threadIdx.x == 0) {
      // kScanBatch values at a time: every load issued, then the adds in order, then the stores
      const float4* in = reinterpret_cast<const float4*>(staged[t & 1]);
      float4* out = reinterpret_cast<float4*>(summed);
      int i = 0;
      for (; i + kScanBatch <= count; i += kScanBatch) {
        float4 v[kScanBatch / 4];
#pragma unroll
        for (int k = 0; k < kScanBatch / 4; ++k) v[k] = in[i / 4 + k];
#pragma unroll
        for (int k = 0; k < kScanBatch / 4; ++k) {
          v[k].x = sum = __fadd_rn(sum, v[k].x);
          v[k].y = sum = __fadd_rn(sum, v[k].y);
          v[k].z = sum = __fadd_rn(sum, v[k].z);
          v[k].w = sum = __fadd_rn(sum, v[k].w);
        }
#pragma unroll
        for (int k = 0; k < kScanBatch / 4; ++k) out[i / 4 + k] = v[k];
      }
      for (; i < count; ++i) summed[i] = sum = __fadd_rn(sum, staged[t & 1][i]);
      // SequentialCumSumUntil: once the tile's last exclusive sum y - x reaches the row's limit,
      // the rest of the row is +inf
      stop = limit != nullptr && __fsub_rn(sum, staged[t & 1][count - 1]) >= limit[blockIdx.x];
    } else if (threadIdx.x >= 32) {
      float* next = staged[(t + 1) & 1];
      const int64_t next_base = base + kScanTile;
      for (int64_t i = threadIdx.x - 32; i < kScanTile && next_base + i < n;
           i += blockDim.x - 32)
        next[i] = row_x[next_base + i];
    }
    __syncthreads();
    // read between the barriers: thread 0 writes the next tile's after the second
    const bool stopped = stop;
    for (int i = threadIdx.x; i < count; i += blockDim.x) row_y[base + i] = summed[i];
    __syncthreads();
    if (stopped) {  // every thread alike
      for (int64_t i = base + count + threadIdx.x; i < n; i += blockDim.x) row_y[i] = INFINITY;
      return;
    }
  }
}

// SortDescending's keys: row in the high bits, then the value's bits mapped so that ascending
// unsigned order is descending value order; a stable ascending sort keeps equal values in index
// order
__global__ void sort_keys_kernel(const float* __restrict__ x, int64_t n, int64_t total,
                                 uint64_t* __restrict__ keys, int32_t* __restrict__ positions) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t bits = __float_as_uint(x[i]);
    if (bits == 0x80000000u) bits = 0;  // -0 ties with +0, as float comparison has them
    const uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
    keys[i] = (static_cast<uint64_t>(i / n) << 32) | static_cast<uint32_t>(~ascending);
    positions[i] = static_cast<int32_t>(i % n);
  }
}

__global__ void sorted_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ order,
                                   int64_t n, int64_t total, float* __restrict__ values,
                                   int64_t* __restrict__ indices) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t index = order[i];
    values[i] = x[i - i % n + index];
    indices[i] = index;
  }
}

// TopLogSoftmax: a block a row. Each thread keeps the best kMaxTop of its columns (value
// descending, index ascending: its columns come in ascending order, so an equal value never
// displaces one it holds); then k rounds pick the block's best head of list, whose thread drops
// it. The sum of exp(x - max) is reduced in a fixed order (a thread's columns, lanes, then
// warps), so a row's values do not depend on the rows beside it. Rows whose length is a multiple
// of 4 are read 16 bytes a load (a thread's 4 columns in a row, then the next vector): a
// draft block's 16 rows of 151,936 took 155 us a block of 256 threads a scalar at a time, on
// 16 multiprocessors (bench/NOTES.md, 2026-12-05, twentieth sitting); a column that cannot
// enter the thread's list costs one comparison with its last entry.
constexpr int kTopThreads = 1024;
constexpr int kMaxTop = 8;

__device__ __forceinline__ bool top_before(float a, int a_index, float b, int b_index) {
  return a > b || (a == b && a_index < b_index);  // NaN is never before anything
}

// a thread's list: its best kMaxTop columns, best first (whatever k is: they hold its best k,
// and the list's last entry sits at a fixed register)
struct TopList {
  float held[kMaxTop];
  int held_index[kMaxTop];

  __device__ __forceinline__ void clear() {
#pragma unroll
    for (int j = 0; j < kMaxTop; ++j) held[j] = -INFINITY, held_index[j] = INT_MAX;
  }

  __device__ __forceinline__ void offer(float v, int index) {
    // most columns, once the list fills
    if (!top_before(v, index, held[kMaxTop - 1], held_index[kMaxTop - 1])) return;
#pragma unroll
    for (int j = 0; j < kMaxTop; ++j) {  // insertion: the displaced entry moves down
      if (top_before(v, index, held[j], held_index[j])) {
        const float tv = held[j];
        const int ti = held_index[j];
        held[j] = v, held_index[j] = index;
        v = tv, index = ti;
      }
    }
  }
};

__global__ void __launch_bounds__(kTopThreads) top_log_softmax_kernel(
    const float* __restrict__ x, int n, int k, float* __restrict__ values,
    int64_t* __restrict__ indices) {
  __shared__ float best_value[kTopThreads / 32];
  __shared__ int best_index[kTopThreads / 32];
  __shared__ float total[kTopThreads / 32];
  __shared__ float chosen_value[kMaxTop];
  __shared__ int chosen_index[kMaxTop];
  const float* row = x + static_cast<int64_t>(blockIdx.x) * n;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  // 16-byte loads where every row starts on 16 bytes (n % 4 == 0 and x from the allocator)
  const bool vectors = n % 4 == 0 && (reinterpret_cast<uintptr_t>(x) & 15) == 0;
  const int vector_end = vectors ? n : 0;  // columns [0, vector_end) as float4's
  TopList list;
  list.clear();
  for (int i = 4 * threadIdx.x; i < vector_end; i += 4 * kTopThreads) {
    const float4 v = *reinterpret_cast<const float4*>(row + i);
    list.offer(v.x, i);
    list.offer(v.y, i + 1);
    list.offer(v.z, i + 2);
    list.offer(v.w, i + 3);
  }
  for (int i = vector_end + threadIdx.x; i < n; i += kTopThreads) list.offer(row[i], i);
  for (int r = 0; r < k; ++r) {
    float v = list.held[0];
    int index = list.held_index[0];
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
      const float ov = __shfl_down_sync(0xffffffffu, v, offset);
      const int oi = __shfl_down_sync(0xffffffffu, index, offset);
      if (top_before(ov, oi, v, index)) v = ov, index = oi;
    }
    if (lane == 0) best_value[warp] = v, best_index[warp] = index;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kTopThreads / 32; ++w)
        if (top_before(best_value[w], best_index[w], v, index)) v = best_value[w], index = best_index[w];
      chosen_value[r] = v, chosen_index[r] = index;
    }
    __syncthreads();
    if (list.held_index[0] == chosen_index[r] && chosen_index[r] != INT_MAX) {  // its owner drops it
#pragma unroll
      for (int j = 0; j + 1 < kMaxTop; ++j)
        list.held[j] = list.held[j + 1], list.held_index[j] = list.held_index[j + 1];
      list.held[kMaxTop - 1] = -INFINITY, list.held_index[kMaxTop - 1] = INT_MAX;
    }
  }
  // the row's max is its first choice (in a row with fewer than k numbers, the missing choices
  // are -inf at index -1; without a number, the values are NaN, as LogSoftmax's)
  const float max = chosen_value[0];
  float sum = 0.f;
  for (int i = 4 * threadIdx.x; i < vector_end; i += 4 * kTopThreads) {
    const float4 v = *reinterpret_cast<const float4*>(row + i);
    sum += expf(v.x - max);
    sum += expf(v.y - max);
    sum += expf(v.z - max);
    sum += expf(v.w - max);
  }
  for (int i = vector_end + threadIdx.x; i < n; i += kTopThreads) sum += expf(row[i] - max);
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, offset);
  if (lane == 0) total[warp] = sum;
  __syncthreads();
  if (threadIdx.x < k) {
    float all = 0.f;
    for (int w = 0; w < kTopThreads / 32; ++w) all += total[w];
    const int64_t out = static_cast<int64_t>(blockIdx.x) * k + threadIdx.x;
    const int index = chosen_index[threadIdx.x];
    values[out] = (chosen_value[threadIdx.x] - max) - logf(all);
    indices[out] = index == INT_MAX ? -1 : index;
  }
}

template <typename T>
struct CudaType;
template <>
struct CudaType<float> {
  static constexpr ONNXTensorElementDataType onnx = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  static constexpr const char* suffix = "Float";
};
template <>
struct CudaType<__half> {
  static constexpr ONNXTensorElementDataType onnx = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
  static constexpr const char* suffix = "Float16";
};
template <>
struct CudaType<__nv_bfloat16> {
  static constexpr ONNXTensorElementDataType onnx = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
  static constexpr const char* suffix = "BFloat16";
};

OrtStatus* error(const std::string& message) {
  return Ort::GetApi().CreateStatus(ORT_INVALID_ARGUMENT, ("cellspec: " + message).c_str());
}

OrtStatus* launched() {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return error(std::string("launch: ") + cudaGetErrorString(status));
  return nullptr;
}

// the product of every dimension but the last: the rows an op over the last axis takes
int64_t leading_rows(const std::vector<int64_t>& shape) {
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  return rows;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

// a kernel's Compute as ONNX Runtime calls it (ComputeV2), exceptions as statuses
template <typename K>
OrtStatus* compute(K& kernel, OrtKernelContext* context) {
  try {
    Ort::KernelContext ctx(context);
    return kernel.Compute(ctx);
  } catch (const Ort::Exception& e) {
    return error(e.what());
  }
}

int multiprocessors() {
  static int count = [] {
    int device = 0, value = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&value, cudaDevAttrMultiProcessorCount, device);
    return value > 0 ? value : 1;
  }();
  return count;
}

// chunk_kernel's blocks of `heads` heads that one multiprocessor holds at once (unstaged: the
// tiling is chosen for those, then staging where its blocks fit the device at once)
template <typename T>
int resident_chunk_blocks(int heads) {
  return resident_blocks(chunk_kernel_for<T>(heads), kChunk);
}

// whether a step tiled as dm, of `blocks` chunk_kernel blocks, reads its key rows through the
// staging buffer: where the staged kernel holds every block at once
template <typename T>
bool staged_keys(const Dims& dm, int64_t blocks, bool overlap) {
  const int resident = resident_blocks(chunk_kernel_for<T>(dm.heads, overlap, true), kChunk);
  return blocks <= int64_t{resident} * multiprocessors();
}

// The launch shape. A block's rows run one after another (a key is loaded once for them), and
// the multiprocessors take blocks as others finish, so a step costs about (blocks / the blocks
// the multiprocessors hold at once, waves counted as fractions) + rows: the rows per block
// that give the least, the most rows among equals. (Before 2026-12-02's eighth sitting: the
// most rows while every multiprocessor had a block, so a verify of 16 rows took 3 a block in one
// wave where 1 a block also fit in one; then, until 2026-12-03, whole waves x (rows + 1), which
// gave steps of 4 and 8 sessions 13-23% slower tilings than the best the probe found.) A step
// of too few blocks for every multiprocessor at one row takes fewer heads a block.
// `resident(heads)`: the blocks one multiprocessor holds. Results do not depend on the shape.
void tile(Dims& dm, int (*resident)(int heads)) {
  const int64_t group = dm.H / dm.KV;
  auto smaller_divisor = [&](int64_t below) {
    for (int64_t g = below - 1; g > 1; --g)
      if (group % g == 0) return g;
    return int64_t{1};
  };
  int64_t heads = smaller_divisor(std::min<int64_t>(kMaxHeads, group) + 1);
  // a step whose blocks of one head and one row fit the device a few times over takes one head
  // a block (on the H200 a block's latency, not the keys' loads, bounds such steps): decode
  // steps, and since 2026-12-04 (fourth sitting) verify-sized ones too, whose 16 rows the
  // kernel took 3 heads a block before (a verify of 16 rows over 256 cells: 14.5 -> 11.3 us a
  // layer, timed without overlap)
  if (dm.S * dm.Q * dm.H * dm.chunks <= kOneHeadBlocks * multiprocessors()) heads = 1;
  auto blocks = [&](int64_t rows) {
    return dm.S * ((dm.Q + rows - 1) / rows) * (dm.H / heads) * dm.chunks;
  };
  const int64_t held = int64_t{resident(static_cast<int>(heads))} * multiprocessors();
  int64_t rows = 1;
  double best = -1.0;
  for (int64_t r = 1; r <= std::min<int64_t>({dm.Q, kMaxRows, kMaxPairs / heads}); ++r) {
    const double cost = static_cast<double>(blocks(r)) / static_cast<double>(held) + r;
    if (best < 0 || cost <= best) {
      best = cost;
      rows = r;
    }
  }
  while (rows == 1 && heads > 1 && blocks(1) < multiprocessors()) heads = smaller_divisor(heads);
  dm.rows = static_cast<int>(rows);
  dm.heads = static_cast<int>(heads);
  dm.row_tiles = (dm.Q + rows - 1) / rows;
}

// whether pair_kernel's weighted sum holds chunk_kernel's key classes for head size D and
// elements of element_size bytes: every class in its warps (R rows a load instruction, kWarps R
// at least the classes) and their sums in a group's share of the staging buffer (head sizes
// 32, 64, 128 and float16's 80; not float32's 80 or float16's 96, which take the two kernels)
bool pair_values_coalesce(int64_t D, size_t element_size) {
  const int64_t vectors = D * static_cast<int64_t>(element_size) / 16;
  const int64_t nv = (vectors + kWarps - 1) / kWarps, groups = 32 / nv;
  return vectors > 0 && kWarps * (32 / vectors) >= groups &&
         groups * D * static_cast<int64_t>(sizeof(float)) <=
             static_cast<int64_t>(kWarps * kStageSlots * sizeof(uint4));
}

// whether a step tiled one (row, head) pair a block runs as pair_kernel: 2 to kMaxInBlockChunks
// chunks, unless CELLSPEC_CUDA_PAIR_KERNEL=0 in the environment (chunk_kernel and combine_kernel
// then, whose output is the same bit for bit: the op tests compare them)
bool pairs_in_one_launch(const Dims& dm, size_t element_size) {
  static const bool enabled = [] {
    const char* setting = std::getenv("CELLSPEC_CUDA_PAIR_KERNEL");
    return !(setting && std::string(setting) == "0");
  }();
  return enabled && dm.rows == 1 && dm.heads == 1 && dm.chunks >= 2 &&
         dm.chunks <= kMaxInBlockChunks && pair_values_coalesce(dm.D, element_size);
}

// whether mma_chunk_kernel takes a step of these heads (the plugin's other limits hold already)
bool mma_fits(const Dims& dm, size_t element_size) {
  const int64_t group = dm.H / dm.KV;
  return element_size == 2 && group <= kMmaPairs && dm.D % 16 == 0 && dm.D <= kMaxHeadDim;
}

// whether a float16 or bfloat16 step of heads that mma_fits takes runs mma_chunk_kernel instead of
// pair_kernel / chunk_kernel: by default for heads of 128 dimensions or more (Qwen3-8B's and
// Llama's: a 2,000-token prompt over 8 such layers 85 -> 53 ms on an H100, a 16-row verify's
// attention 1.9-2.8x faster, a one-row step level at 1,024 cells and twice pair_kernel's few
// microseconds at 256), never for narrower ones (SmolLM2's 64: its short verifies take twice
// pair_kernel's time); CELLSPEC_CUDA_MMA_ATTENTION=1 or 0 in the environment (read once per
// process) for every head that fits or for none. The choice follows the op's heads and nothing
// of the step (rows, cells, sessions), so that a row's verify, its plain step, its prompt chunk
// and its batch all run the same arithmetic (bench/NOTES.md, 2026-12-06, sixth sitting).
bool mma_attention(const Dims& dm) {
  static const int setting = [] {
    const char* value = std::getenv("CELLSPEC_CUDA_MMA_ATTENTION");
    const std::string text(value ? value : "");
    return text == "1" ? 1 : text == "0" ? 0 : -1;
  }();
  return setting < 0 ? dm.D >= 128 : setting == 1;
}

// the chunks' partials combined into `out` (combine_kernel; one chunk wrote `out` itself), after
// chunk_kernel or mma_chunk_kernel
template <typename T>
OrtStatus* combine_chunks(bool overlap, const Dims& dm, int64_t row_heads, cudaStream_t stream,
                          const float* partials, T* out) {
  if (dm.chunks > 1) {
    const int threads = dm.D < 128 ? static_cast<int>(dm.D) : 128;
    launch_after(overlap, overlap ? combine_kernel<T, true> : combine_kernel<T, false>,
                 dim3(row_heads), dim3(threads), combine_bytes(dm), stream,
                 partials, dm, out);
  }
  return launched();
}

// null, or op `name`'s error for cos_cache and sin_cache not both [positions, D / 2] with at least
// one position (the rotation clamps a position into the caches)
OrtStatus* check_rotary_caches(const std::string& name, const std::vector<int64_t>& cos,
                               const std::vector<int64_t>& sin, int64_t D) {
  if (cos.size() == 2 && cos[1] == D / 2 && sin == cos && cos[0] > 0) return nullptr;
  return error(name + ": cos_cache " + shape_text(cos) + ", sin_cache " + shape_text(sin) +
               ", expected [positions, " + std::to_string(D / 2) + "]");
}

// attention of q [S, Q, H * D] over the cells and the new keys (inputs 3..7 of both ops)
template <typename T>
OrtStatus* attend(Ort::KernelContext& ctx, const std::vector<int64_t>& q_shape, const T* q,
                  const T* k_new, const T* v_new, int64_t heads, int64_t kv_heads, float scale,
                  int64_t by_position, size_t out_index, size_t partials_index) {
  auto shape_of = [&](size_t i) { return ctx.GetInput(i).GetTensorTypeAndShapeInfo().GetShape(); };
  const std::vector<int64_t> table = shape_of(5), mask = shape_of(6);
  Dims dm{q_shape[0], q_shape[1], table.size() == 2 ? table[1] : -1, heads, kv_heads,
          q_shape[2] / heads, 0, scale, static_cast<int>(by_position), 1, 1, 1};
  if (table.size() != 2 || table[0] != dm.S || dm.D > kMaxHeadDim || heads % kv_heads != 0 ||
      (dm.D * sizeof(T)) % 16 != 0)
    return error("q " + shape_text(q_shape) + " with cell_table " + shape_text(table) +
                 " (head size at most 128, a multiple of 16 bytes)");
  if (mask != std::vector<int64_t>{dm.S, 1, dm.Q, dm.N + dm.Q})
    return error("attn_mask " + shape_text(mask) + ", expected [S, 1, Q, N + Q] for q " +
                 shape_text(q_shape) + " and cell_table " + shape_text(table));
  dm.chunks = (dm.N + dm.Q + kChunk - 1) / kChunk;
  if (combine_bytes(dm) > kMaxCombineBytes)
    return error("a step of " + std::to_string(dm.N + dm.Q) + " keys (cells and new tokens); " +
                 "CellAttention reads at most " +
                 std::to_string(kMaxCombineBytes / (2 * sizeof(float)) * kChunk));
  auto out = ctx.GetOutput(out_index, q_shape);
  const int64_t row_heads = dm.S * dm.Q * dm.H;
  auto partials = ctx.GetOutput(partials_index, {row_heads * dm.chunks * (dm.D + 2)});
  if (row_heads == 0) return nullptr;
  tile(dm, resident_chunk_blocks<T>);
  auto stream = static_cast<cudaStream_t>(ctx.GetGPUComputeStream());
  const bool overlap = overlapping(dm.S * dm.Q);
  if constexpr (sizeof(T) == 2) {
    if (mma_fits(dm, sizeof(T)) && mma_attention(dm)) {
      dm = mma_tiling(dm, kChunk);  // chunk_kernel's chunks: the partials' size as allocated
      launch_after(overlap, overlap ? mma_chunk_kernel<T, kChunk, true>
                                    : mma_chunk_kernel<T, kChunk, false>,
                   dim3(static_cast<unsigned>(mma_blocks(dm))), dim3(kMmaThreads), 0, stream,
                   q, k_new, v_new, ctx.GetInput(3).GetTensorData<T>(),
                   ctx.GetInput(4).GetTensorData<T>(), ctx.GetInput(5).GetTensorData<int64_t>(),
                   ctx.GetInput(6).GetTensorData<bool>(),
                   ctx.GetInput(7).GetTensorData<int64_t>(), dm,
                   partials.GetTensorMutableData<float>(), out.GetTensorMutableData<T>());
      return combine_chunks<T>(overlap, dm, row_heads, stream, partials.GetTensorData<float>(),
                           out.GetTensorMutableData<T>());
    }
  }
  if (pairs_in_one_launch(dm, sizeof(T))) {  // the same output as the two kernels below, one launch
    launch_after(overlap, overlap ? pair_kernel<T, true> : pair_kernel<T, false>,
                 dim3(row_heads), dim3(kChunk * dm.chunks), 0, stream,
                 q, k_new, v_new, ctx.GetInput(3).GetTensorData<T>(),
                 ctx.GetInput(4).GetTensorData<T>(), ctx.GetInput(5).GetTensorData<int64_t>(),
                 ctx.GetInput(6).GetTensorData<bool>(), ctx.GetInput(7).GetTensorData<int64_t>(),
                 dm, out.GetTensorMutableData<T>());
    return launched();
  }
  const int64_t blocks = dm.S * dm.row_tiles * (dm.H / dm.heads) * dm.chunks;
  const bool staged = staged_keys<T>(dm, blocks, overlap);
  launch_after(overlap, chunk_kernel_for<T>(dm.heads, overlap, staged), dim3(blocks), dim3(kChunk),
      0, stream,
      q, k_new, v_new, ctx.GetInput(3).GetTensorData<T>(), ctx.GetInput(4).GetTensorData<T>(),
      ctx.GetInput(5).GetTensorData<int64_t>(), ctx.GetInput(6).GetTensorData<bool>(),
      ctx.GetInput(7).GetTensorData<int64_t>(), dm, partials.GetTensorMutableData<float>(),
      out.GetTensorMutableData<T>());
  return combine_chunks<T>(overlap, dm, row_heads, stream, partials.GetTensorData<float>(),
                           out.GetTensorMutableData<T>());
}

// CellAttention: q, k_new, v_new, k_pool, v_pool, cell_table, attn_mask, positions -> out,
// partials (scratch)
template <typename T>
struct AttentionKernel {
  static constexpr const char* kName = "CellAttention";
  static constexpr size_t kInputs = 8, kOutputs = 2;
  static ONNXTensorElementDataType input_type(size_t i) {
    if (i == 5 || i == 7) return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    if (i == 6) return ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL;
    return CudaType<T>::onnx;
  }
  static ONNXTensorElementDataType output_type(size_t i) {
    return i == 0 ? CudaType<T>::onnx : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }

  int64_t heads, kv_heads, by_position;
  float scale;

  explicit AttentionKernel(const OrtKernelInfo* info) {
    Ort::ConstKernelInfo attrs(info);
    heads = attrs.GetAttribute<int64_t>("num_heads");
    kv_heads = attrs.GetAttribute<int64_t>("kv_num_heads");
    by_position = attrs.GetAttribute<int64_t>("by_position");
    scale = attrs.GetAttribute<float>("scale");
  }

  OrtStatus* ComputeV2(OrtKernelContext* context) { return compute(*this, context); }

  OrtStatus* Compute(Ort::KernelContext& ctx) {
    const std::vector<int64_t> q_shape = ctx.GetInput(0).GetTensorTypeAndShapeInfo().GetShape();
    if (q_shape.size() != 3 || q_shape[2] % heads != 0)
      return error("CellAttention: q " + shape_text(q_shape) + " for " + std::to_string(heads) +
                   " heads");
    return attend<T>(ctx, q_shape, ctx.GetInput(0).GetTensorData<T>(),
                     ctx.GetInput(1).GetTensorData<T>(), ctx.GetInput(2).GetTensorData<T>(),
                     heads, kv_heads, scale, by_position, 0, 1);
  }
};

// CellRotaryAttention: the CellAttention of q, k and v sliced from one projection qkv
// [S, Q, (H + 2 KV) * D] with q and k rotated: qkv, cos_cache, sin_cache, k_pool, v_pool,
// cell_table, attn_mask, positions -> out, k_new, v_new (rotated k and v, for the commit),
// q (rotated, scratch), partials (scratch). CellNormRotaryAttention takes q_norm and k_norm
// [D] as inputs 8 and 9 (attribute epsilon) and normalizes each head before rotating it.
template <typename T, bool kNorm>
struct RotaryAttentionKernel : AttentionKernel<T> {
  static constexpr const char* kName = kNorm ? "CellNormRotaryAttention" : "CellRotaryAttention";
  static constexpr size_t kInputs = kNorm ? 10 : 8, kOutputs = 5;
  static ONNXTensorElementDataType input_type(size_t i) {
    return i >= 8 ? CudaType<T>::onnx : AttentionKernel<T>::input_type(i);
  }
  static ONNXTensorElementDataType output_type(size_t i) {
    return i == 4 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : CudaType<T>::onnx;
  }

  float epsilon = 0.f;

  explicit RotaryAttentionKernel(const OrtKernelInfo* info) : AttentionKernel<T>(info) {
    if (kNorm) epsilon = Ort::ConstKernelInfo(info).GetAttribute<float>("epsilon");
  }

  OrtStatus* ComputeV2(OrtKernelContext* context) { return compute(*this, context); }

  OrtStatus* Compute(Ort::KernelContext& ctx) {
    const int64_t H = this->heads, KV = this->kv_heads;
    auto shape_of = [&](size_t i) { return ctx.GetInput(i).GetTensorTypeAndShapeInfo().GetShape(); };
    const std::vector<int64_t> qkv = shape_of(0), cos = shape_of(1), sin = shape_of(2);
    const int64_t D = qkv.size() == 3 ? qkv[2] / (H + 2 * KV) : 0;
    if (qkv.size() != 3 || D == 0 || D % 2 != 0 || qkv[2] != (H + 2 * KV) * D)
      return error(std::string(kName) + ": qkv " + shape_text(qkv) + " for " +
                   std::to_string(H) + " + 2 x " + std::to_string(KV) + " heads");
    if (OrtStatus* status = check_rotary_caches(kName, cos, sin, D)) return status;
    const T* norms[2] = {nullptr, nullptr};
    if (kNorm) {
      for (size_t i = 0; i < 2; ++i) {
        if (shape_of(8 + i) != std::vector<int64_t>{D})
          return error(std::string(kName) + ": q_norm / k_norm " + shape_text(shape_of(8 + i)) +
                       ", expected [" + std::to_string(D) + "]");
        norms[i] = ctx.GetInput(8 + i).GetTensorData<T>();
      }
    }
    const int64_t S = qkv[0], Q = qkv[1];
    auto k_new = ctx.GetOutput(1, {S, Q, KV * D});
    auto v_new = ctx.GetOutput(2, {S, Q, KV * D});
    auto q = ctx.GetOutput(3, {S, Q, H * D});
    if (S * Q > 0) {
      launch_rotary_split<T>(
          ctx.GetInput(0).GetTensorData<T>(), ctx.GetInput(1).GetTensorData<T>(),
          ctx.GetInput(2).GetTensorData<T>(), ctx.GetInput(7).GetTensorData<int64_t>(), cos[0],
          norms[0], norms[1], epsilon, S * Q, H, KV, D, q.GetTensorMutableData<T>(),
          k_new.GetTensorMutableData<T>(), v_new.GetTensorMutableData<T>(),
          static_cast<cudaStream_t>(ctx.GetGPUComputeStream()));
      if (OrtStatus* status = launched()) return status;
    }
    return attend<T>(ctx, {S, Q, H * D}, q.GetTensorData<T>(), k_new.GetTensorData<T>(),
                     v_new.GetTensorData<T>(), H, KV, this->scale, this->by_position, 0, 4);
  }
};

// SwiGlu: x [..., 2 I] -> silu(x[..., :I]) * x[..., I:]
template <typename T>
struct SwiGluKernel {
  static constexpr const char* kName = "SwiGlu";
  static constexpr size_t kInputs = 1, kOutputs = 1;
  static ONNXTensorElementDataType input_type(size_t) { return CudaType<T>::onnx; }
  static ONNXTensorElementDataType output_type(size_t) { return CudaType<T>::onnx; }

  explicit SwiGluKernel(const OrtKernelInfo*) {}

  OrtStatus* ComputeV2(OrtKernelContext* context) { return compute(*this, context); }

  OrtStatus* Compute(Ort::KernelContext& ctx) {
    std::vector<int64_t> shape = ctx.GetInput(0).GetTensorTypeAndShapeInfo().GetShape();
    if (shape.empty() || shape.back() % 2 != 0)
      return error("SwiGlu: x " + shape_text(shape) + ", expected an even last dimension");
    const int64_t inner = shape.back() / 2;
    shape.back() = inner;
    auto out = ctx.GetOutput(0, shape);
    const int64_t rows = leading_rows(shape);
    if (rows * inner == 0) return nullptr;
    launch_swiglu<T>(ctx.GetInput(0).GetTensorData<T>(), rows, inner,
                     out.GetTensorMutableData<T>(),
                     static_cast<cudaStream_t>(ctx.GetGPUComputeStream()));
    return launched();
  }
};

// cublasGemmEx from the cuBLAS that ONNX Runtime's CUDA provider loaded (cellspec links no CUDA
// library but the runtime), or null
using GemmEx = int (*)(void* handle, int transa, int transb, int m, int n, int k,
                       const void* alpha, const void* a, int a_type, int lda, const void* b,
                       int b_type, int ldb, const void* beta, void* c, int c_type, int ldc,
                       int compute_type, int algo);

GemmEx cublas_gemm_ex() {
  static const GemmEx found = [] {
    for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
      void* library = dlopen(name, RTLD_NOW | RTLD_NOLOAD);
      if (library == nullptr) library = dlopen(name, RTLD_NOW);
      if (library != nullptr)
        if (void* symbol = dlsym(library, "cublasGemmEx")) return reinterpret_cast<GemmEx>(symbol);
    }
    return static_cast<GemmEx>(nullptr);
  }();
  return found;
}

// cuBLAS's codes (cublas_api.h, library_types.h), which this file declares rather than include
constexpr int kCublasOpN = 0, kCublasOpT = 1, kCublasCompute32F = 68, kCublasGemmDefault = -1;
constexpr int kCublasHandleResource = 10002, kCudaResourceVersion = 3;  // cuda_resource.h
template <typename T>
constexpr int cuda_data_type() {
  return std::is_same<T, __half>::value ? 2 : std::is_same<T, __nv_bfloat16>::value ? 14 : 0;
}

// x [rows, K] times w [N, K] -> product [rows, N] by cuBLAS on ONNX Runtime's own handle and
// stream, as its MatMul does them (with w transposed): where row_matmul_kernel cannot run
OrtStatus* cublas_rows(Ort::KernelContext& ctx, const std::string& name, const void* x,
                       const void* w, int64_t rows, int64_t K, int64_t N, void* product,
                       int type) {
  const GemmEx gemm = cublas_gemm_ex();
  void* handle = nullptr;
  if (gemm == nullptr) return error(name + ": cuBLAS (cublasGemmEx) is not loaded in this process");
  if (OrtStatus* status = Ort::GetApi().KernelContext_GetResource(
          ctx.GetOrtKernelContext(), kCudaResourceVersion, kCublasHandleResource, &handle))
    return status;
  // column-major: y^T [N, rows] = (w as [K, N])^T x^T
  const float alpha = 1.f, beta = 0.f;
  const int status = gemm(handle, kCublasOpT, kCublasOpN, static_cast<int>(N),
                          static_cast<int>(rows), static_cast<int>(K), &alpha, w, type,
                          static_cast<int>(K), x, type, static_cast<int>(K), &beta, product, type,
                          static_cast<int>(N), kCublasCompute32F, kCublasGemmDefault);
  if (status != 0)
    return error(name + ": cublasGemmEx failed with status " + std::to_string(status));
  return nullptr;
}

// x [..., K] and w [N, K], or w tiled (row_matmul_kernel's tiled layout: [N / 8, K / 32, 8,
// 32], or with two sets of N / 2 rows [N / 16, K / 32, 2, 8, 32]), checked for a RowMatMul op:
// the rows, N (w's rows) and K, whether w is tiled; or an error
struct RowOperands {
  int64_t rows = 0, N = 0, K = 0;
  bool tiled = false;
};
OrtStatus* row_operands(const std::string& name, const std::vector<int64_t>& shape,
                        const std::vector<int64_t>& w_shape, const char* w_rows, int sets,
                        RowOperands* operands) {
  const size_t dims = sets == 1 ? 4 : 5;
  const bool tiled = w_shape.size() == dims && w_shape[dims - 2] == 8 &&
                     w_shape[dims - 1] == 32 && (sets == 1 || w_shape[2] == sets);
  const int64_t N = tiled ? w_shape[0] * 8 * sets : w_shape.size() == 2 ? w_shape[0] : -1;
  const int64_t K = tiled ? w_shape[1] * 32 : w_shape.size() == 2 ? w_shape[1] : -1;
  if (shape.empty() || N < 0 || shape.back() != K)
    return error(name + ": x " + shape_text(shape) + " and w " + shape_text(w_shape) +
                 ", expected [..., K] and [" + w_rows + ", K] (or tiled: " +
                 (sets == 1 ? std::string("[N / 8, K / 32, 8, 32]")
                            : std::string("[I / 8, K / 32, 2, 8, 32]")) + ")");
  *operands = {leading_rows(shape), N, K, tiled};
  if (N > INT32_MAX || K > INT32_MAX || operands->rows > INT32_MAX)
    return error(name + ": x " + shape_text(shape) + " and w " + shape_text(w_shape) +
                 " have a dimension over 2**31");
  return nullptr;
}

// the error of a tiled weight where row_matmul_kernel cannot run (only it reads that layout)
OrtStatus* tiled_without_kernel(const std::string& name) {
  return error(name + ": w is tiled, which only cellspec's row kernel reads, and it cannot "
               "run here (x or w not 16-byte aligned, over 524,280 outputs, "
               "or a device before compute capability 8.0)");
}

// whether input `index` of the node is a constant initializer (no kernel of the step writes it)
bool constant_input(const OrtKernelInfo* info, size_t index) {
  int is_constant = 0;
  try {
    Ort::ConstKernelInfo(info).GetTensorConstantInput(index, &is_constant);
  } catch (const Ort::Exception&) {
    return false;
  }
  return is_constant != 0;
}

// whether row_matmul_kernel can take x [rows, K] and w with `outputs` outputs
template <typename T>
bool row_kernel_fits(const T* x, const T* w, int64_t K, int64_t outputs) {
  return K % Vec<T>::kSize == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0 && outputs <= kRowMaxOutputs &&
         device_has_mma();
}

// RowMatMul: x [..., K] times w [N, K] -> y [..., N] (T), float32 sums, one rounding, by
// row_matmul_kernel, whatever the rows. Only where that kernel cannot run (K not a multiple of 8,
// x or w not 16-byte aligned, over 524,280 outputs, a device before compute capability 8.0) by
// cuBLAS (cublas_rows), and then a row may round otherwise in a batch than alone.
// RowMatMulSwiGlu (kGlu): w [2 I, K] -> SwiGlu(RowMatMul(x, w)) [..., I]; output 1 is scratch
// (the product, for cuBLAS's rows).
template <typename T, bool kGlu>
struct RowMatMulKernel {
  static constexpr const char* kName = kGlu ? "RowMatMulSwiGlu" : "RowMatMul";
  static constexpr size_t kInputs = 2, kOutputs = kGlu ? 2 : 1;
  static ONNXTensorElementDataType input_type(size_t) { return CudaType<T>::onnx; }
  static ONNXTensorElementDataType output_type(size_t) { return CudaType<T>::onnx; }

  bool constant_w;

  explicit RowMatMulKernel(const OrtKernelInfo* info) : constant_w(constant_input(info, 1)) {
    prepare_row_wide<T, kGlu ? kRowSwiGlu : kRowPlain>();
  }

  OrtStatus* ComputeV2(OrtKernelContext* context) { return compute(*this, context); }

  OrtStatus* Compute(Ort::KernelContext& ctx) {
    std::vector<int64_t> shape = ctx.GetInput(0).GetTensorTypeAndShapeInfo().GetShape();
    const std::vector<int64_t> w_shape = ctx.GetInput(1).GetTensorTypeAndShapeInfo().GetShape();
    RowOperands ops;
    if (OrtStatus* status =
            row_operands(kName, shape, w_shape, kGlu ? "2 I" : "N", kGlu ? 2 : 1, &ops))
      return status;
    const int64_t rows = ops.rows, K = ops.K, N = ops.N, outputs = kGlu ? N / 2 : N;
    if (kGlu && N % 2 != 0)
      return error(std::string(kName) + ": w " + shape_text(w_shape) + ", expected [2 I, K]");
    shape.back() = outputs;
    auto out = ctx.GetOutput(0, shape);
    const T* x = ctx.GetInput(0).GetTensorData<T>();
    const T* w = ctx.GetInput(1).GetTensorData<T>();
    auto stream = static_cast<cudaStream_t>(ctx.GetGPUComputeStream());
    const bool own = row_kernel_fits(x, w, K, outputs);
    if (ops.tiled && !own) return tiled_without_kernel(kName);
    T* product = out.GetTensorMutableData<T>();
    if (kGlu)
      product = ctx.GetOutput(1, {own ? 0 : rows * N}).GetTensorMutableData<T>();
    if (rows * N == 0) return nullptr;
    if (own) {
      launch_row_matmul<T, kGlu ? kRowSwiGlu : kRowPlain>(
          x, w, static_cast<int>(rows), static_cast<int>(K), static_cast<int>(outputs),
          out.GetTensorMutableData<T>(), constant_w, ops.tiled, stream);
      return launched();
    }
    if (OrtStatus* status = cublas_rows(ctx, kName, x, w, rows, K, N, product,
                                        cuda_data_type<T>()))
      return status;
    if (!kGlu) return nullptr;
    launch_swiglu<T>(product, rows, outputs, out.GetTensorMutableData<T>(), stream);
    return launched();
  }
};

// RowMatMulRotary: x [..., K], w [(H + 2 KV) D, K] (a q, k, v projection), cos_cache and
// sin_cache [positions, D / 2], positions [...] (one per row of x; int64) -> q [..., H D] and
// k [..., KV D] rotated (rotate-half), v [..., KV D], scratch: rotary_split_kernel of
// RowMatMul(x, w) bit for bit, in row_matmul_kernel's epilogue (kRowRotary). Attributes
// num_heads, kv_num_heads. Where that kernel cannot run (as RowMatMul, or D not a multiple of
// 8), cuBLAS's product goes into the scratch output and rotary_split_kernel rotates it.
template <typename T>
struct RowMatMulRotaryKernel {
  static constexpr const char* kName = "RowMatMulRotary";
  static constexpr size_t kInputs = 5, kOutputs = 4;
  static ONNXTensorElementDataType input_type(size_t i) {
    return i == 4 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : CudaType<T>::onnx;
  }
  static ONNXTensorElementDataType output_type(size_t) { return CudaType<T>::onnx; }

  int64_t heads, kv_heads;
  bool constant_w;

  explicit RowMatMulRotaryKernel(const OrtKernelInfo* info) : constant_w(constant_input(info, 1)) {
    prepare_row_wide<T, kRowRotary>();
    Ort::ConstKernelInfo attrs(info);
    heads = attrs.GetAttribute<int64_t>("num_heads");
    kv_heads = attrs.GetAttribute<int64_t>("kv_num_heads");
  }

  OrtStatus* ComputeV2(OrtKernelContext* context) { return compute(*this, context); }

  OrtStatus* Compute(Ort::KernelContext& ctx) {
    auto shape_of = [&](size_t i) { return ctx.GetInput(i).GetTensorTypeAndShapeInfo().GetShape(); };
    std::vector<int64_t> shape = shape_of(0);
    const std::vector<int64_t> w_shape = shape_of(1), cos = shape_of(2), sin = shape_of(3);
    RowOperands ops;
    if (OrtStatus* status = row_operands(kName, shape, w_shape, "(H + 2 KV) D", 1, &ops))
      return status;
    const int64_t rows = ops.rows, H = heads, KV = kv_heads, K = ops.K, N = ops.N;
    const int64_t D = H > 0 && KV > 0 ? N / (H + 2 * KV) : 0;
    if (D == 0 || D % 2 != 0 || N != (H + 2 * KV) * D)
      return error(std::string(kName) + ": w " + shape_text(w_shape) + " for " +
                   std::to_string(H) + " + 2 x " + std::to_string(KV) + " heads");
    if (OrtStatus* status = check_rotary_caches(kName, cos, sin, D)) return status;
    const std::vector<int64_t> positions = shape_of(4);
    if (leading_rows(positions) * (positions.empty() ? 1 : positions.back()) != rows)
      return error(std::string(kName) + ": positions " + shape_text(positions) +
                   ", expected one per row of x " + shape_text(shape));
    const T* x = ctx.GetInput(0).GetTensorData<T>();
    const T* w = ctx.GetInput(1).GetTensorData<T>();
    const bool own = D % 8 == 0 && row_kernel_fits(x, w, K, N);
    if (ops.tiled && !own) return tiled_without_kernel(kName);
    RowRotary<T> rot{ctx.GetInput(2).GetTensorData<T>(), ctx.GetInput(3).GetTensorData<T>(),
                     ctx.GetInput(4).GetTensorData<int64_t>(), cos[0], static_cast<int>(H),
                     static_cast<int>(KV), static_cast<int>(D), nullptr, nullptr, nullptr};
    shape.back() = H * D;
    rot.q = ctx.GetOutput(0, shape).GetTensorMutableData<T>();
    shape.back() = KV * D;
    rot.k = ctx.GetOutput(1, shape).GetTensorMutableData<T>();
    rot.v = ctx.GetOutput(2, shape).GetTensorMutableData<T>();
    T* product = ctx.GetOutput(3, {own ? 0 : rows * N}).GetTensorMutableData<T>();
    if (rows == 0) return nullptr;
    auto stream = static_cast<cudaStream_t>(ctx.GetGPUComputeStream());
    if (own) {
      launch_row_matmul<T, kRowRotary>(x, w, static_cast<int>(rows), static_cast<int>(K),
                                       static_cast<int>(N), nullptr, constant_w, ops.tiled,
                                       stream, rot);
      return launched();
    }
    if (OrtStatus* status = cublas_rows(ctx, kName, x, w, rows, K, N, product,
                                        cuda_data_type<T>()))
      return status;
    launch_rotary_split<T>(product, rot.cos, rot.sin, rot.positions, cos[0], nullptr, nullptr,
                           0.f, rows, H, KV, D, rot.q, rot.k, rot.v, stream);
    return launched();
  }
};

// SequentialCumSum: x [..., n] float32 -> its sums along the last axis, one add at a time.
// SequentialCumSumUntil (kUntil): x [..., n], limit (one float32 per row) -> y as
// SequentialCumSum's up to the end of the first tile whose last exclusive sum y[i] - x[i]
// reaches the row's limit, +inf after it
template <bool kUntil>
struct SequentialCumSumKernel {
  static constexpr const char* kName = kUntil ? "SequentialCumSumUntil" : "SequentialCumSum";
  static constexpr size_t kInputs = kUntil ? 2 : 1, kOutputs = 1;
  static ONNXTensorElementDataType input_type(size_t) {
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
  static ONNXTensorElementDataType output_type(size_t) {
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }

  explicit SequentialCumSumKernel(const OrtKernelInfo*) {}

  OrtStatus* ComputeV2(OrtKernelContext* context) { return compute(*this, context); }

  OrtStatus* Compute(Ort::KernelContext& ctx) {
    const std::vector<int64_t> shape = ctx.GetInput(0).GetTensorTypeAndShapeInfo().GetShape();
    if (shape.empty())
      return error(std::string(kName) + ": x is a scalar, expected an axis to sum");
    const int64_t n = shape.back();
    const int64_t rows = leading_rows(shape);
    const float* limit = nullptr;
    if (kUntil) {
      const std::vector<int64_t> limits =
          ctx.GetInput(1).GetTensorTypeAndShapeInfo().GetShape();
      int64_t count = 1;
      for (int64_t d : limits) count *= d;
      if (count != rows)
        return error(std::string(kName) + ": limit " + shape_text(limits) +
                     " is not one value per row of x " + shape_text(shape));
      limit = ctx.GetInput(1).GetTensorData<float>();
    }
    auto out = ctx.GetOutput(0, shape);
    if (rows * n == 0) return nullptr;
    sequential_cumsum_kernel<<<rows, kScanThreads, 0,
                               static_cast<cudaStream_t>(ctx.GetGPUComputeStream())>>>(
        ctx.GetInput(0).GetTensorData<float>(), n, limit, out.GetTensorMutableData<float>());
    return launched();
  }
};

// SortDescending: x [..., n] float32 -> values, indices (each row by value descending, ties by
// lower index), scratch (the sort's buffers)
struct SortDescendingKernel {
  static constexpr const char* kName = "SortDescending";
  static constexpr size_t kInputs = 1, kOutputs = 3;
  static ONNXTensorElementDataType input_type(size_t) {
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
  static ONNXTensorElementDataType output_type(size_t i) {
    if (i == 0) return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
    return i == 1 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64 : ONNX_TENSOR_ELEMENT_DATA_TYPE_UINT8;
  }

  explicit SortDescendingKernel(const OrtKernelInfo*) {}

  OrtStatus* ComputeV2(OrtKernelContext* context) { return compute(*this, context); }

  static size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

  OrtStatus* Compute(Ort::KernelContext& ctx) {
    const std::vector<int64_t> shape = ctx.GetInput(0).GetTensorTypeAndShapeInfo().GetShape();
    if (shape.empty()) return error("SortDescending: x is a scalar, expected an axis to sort");
    const int64_t n = shape.back();
    const int64_t rows = leading_rows(shape);
    const int64_t total = rows * n;
    if (n > INT32_MAX || rows > INT32_MAX || total > INT32_MAX)
      return error("SortDescending: x " + shape_text(shape) + " has more than 2**31 items");
    int end_bit = 32;
    while (end_bit < 64 && (int64_t{1} << (end_bit - 32)) < rows) ++end_bit;
    size_t temp_bytes = 0;
    cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const uint64_t*>(nullptr),
                                    static_cast<uint64_t*>(nullptr),
                                    static_cast<const int32_t*>(nullptr),
                                    static_cast<int32_t*>(nullptr), static_cast<int>(total), 0,
                                    end_bit);
    const size_t keys = aligned(total * sizeof(uint64_t)), order = aligned(total * sizeof(int32_t));
    auto values = ctx.GetOutput(0, shape);
    auto indices = ctx.GetOutput(1, shape);
    auto scratch = ctx.GetOutput(2, {static_cast<int64_t>(2 * keys + 2 * order + temp_bytes)});
    if (total == 0) return nullptr;
    auto* base = scratch.GetTensorMutableData<uint8_t>();
    auto* keys_in = reinterpret_cast<uint64_t*>(base);
    auto* keys_out = reinterpret_cast<uint64_t*>(base + keys);
    auto* order_in = reinterpret_cast<int32_t*>(base + 2 * keys);
    auto* order_out = reinterpret_cast<int32_t*>(base + 2 * keys + order);
    auto stream = static_cast<cudaStream_t>(ctx.GetGPUComputeStream());
    const float* x = ctx.GetInput(0).GetTensorData<float>();
    const int blocks = static_cast<int>(std::min<int64_t>((total + 255) / 256, 4096));
    sort_keys_kernel<<<blocks, 256, 0, stream>>>(x, n, total, keys_in, order_in);
    if (OrtStatus* status = launched()) return status;
    const cudaError_t sorted = cub::DeviceRadixSort::SortPairs(
        base + 2 * keys + 2 * order, temp_bytes, keys_in, keys_out, order_in, order_out,
        static_cast<int>(total), 0, end_bit, stream);
    if (sorted != cudaSuccess)
      return error(std::string("SortDescending: ") + cudaGetErrorString(sorted));
    sorted_rows_kernel<<<blocks, 256, 0, stream>>>(x, order_out, n, total,
                                                   values.GetTensorMutableData<float>(),
                                                   indices.GetTensorMutableData<int64_t>());
    return launched();
  }
};

// TopLogSoftmax: x [..., n] float32 -> values [..., k] (log-softmax), indices [..., k] int64
struct TopLogSoftmaxKernel {
  static constexpr const char* kName = "TopLogSoftmax";
  static constexpr size_t kInputs = 1, kOutputs = 2;
  static ONNXTensorElementDataType input_type(size_t) {
    return ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
  static ONNXTensorElementDataType output_type(size_t i) {
    return i == 0 ? ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT : ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
  }

  int64_t k;

  explicit TopLogSoftmaxKernel(const OrtKernelInfo* info) {
    k = Ort::ConstKernelInfo(info).GetAttribute<int64_t>("k");
  }

  OrtStatus* ComputeV2(OrtKernelContext* context) { return compute(*this, context); }

  OrtStatus* Compute(Ort::KernelContext& ctx) {
    const std::vector<int64_t> shape = ctx.GetInput(0).GetTensorTypeAndShapeInfo().GetShape();
    if (shape.empty()) return error("TopLogSoftmax: x is a scalar, expected an axis to choose from");
    const int64_t n = shape.back();
    const int64_t rows = leading_rows(shape);
    if (k < 1 || k > kMaxTop || k > n)
      return error("TopLogSoftmax: k " + std::to_string(k) + " for x " + shape_text(shape) +
                   ": expected 1.." + std::to_string(kMaxTop) + " and at most the last axis");
    if (n >= INT_MAX || rows > INT32_MAX)
      return error("TopLogSoftmax: x " + shape_text(shape) + " is too large");
    std::vector<int64_t> out_shape = shape;
    out_shape.back() = k;
    auto values = ctx.GetOutput(0, out_shape);
    auto indices = ctx.GetOutput(1, out_shape);
    if (rows == 0) return nullptr;
    top_log_softmax_kernel<<<static_cast<unsigned>(rows), kTopThreads, 0,
                             static_cast<cudaStream_t>(ctx.GetGPUComputeStream())>>>(
        ctx.GetInput(0).GetTensorData<float>(), static_cast<int>(n), static_cast<int>(k),
        values.GetTensorMutableData<float>(), indices.GetTensorMutableData<int64_t>());
    return launched();
  }
};

// a kernel class as an ONNX Runtime custom op named kName + the type's suffix
template <typename K, typename T>
struct Op : Ort::CustomOpBase<Op<K, T>, K, true> {
  std::string name = std::string(K::kName) + CudaType<T>::suffix;

  OrtStatus* CreateKernelV2(const OrtApi&, const OrtKernelInfo* info, void** kernel) const {
    try {
      *kernel = new K(info);
      return nullptr;
    } catch (const Ort::Exception& e) {
      return error(e.what());
    }
  }
  const char* GetName() const { return name.c_str(); }
  const char* GetExecutionProviderType() const { return "CUDAExecutionProvider"; }
  size_t GetInputTypeCount() const { return K::kInputs; }
  ONNXTensorElementDataType GetInputType(size_t i) const { return K::input_type(i); }
  size_t GetOutputTypeCount() const { return K::kOutputs; }
  ONNXTensorElementDataType GetOutputType(size_t i) const { return K::output_type(i); }
};

}  // namespace

extern "C" OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options,
                                                     const OrtApiBase* api_base) {
  Ort::InitApi(api_base->GetApi(ORT_API_VERSION));
  static Op<AttentionKernel<float>, float> attention_float;
  static Op<AttentionKernel<__half>, __half> attention_half;
  static Op<AttentionKernel<__nv_bfloat16>, __nv_bfloat16> attention_bfloat16;
  static Op<RotaryAttentionKernel<float, false>, float> rotary_float;
  static Op<RotaryAttentionKernel<__half, false>, __half> rotary_half;
  static Op<RotaryAttentionKernel<__nv_bfloat16, false>, __nv_bfloat16> rotary_bfloat16;
  static Op<RotaryAttentionKernel<float, true>, float> norm_rotary_float;
  static Op<RotaryAttentionKernel<__half, true>, __half> norm_rotary_half;
  static Op<RotaryAttentionKernel<__nv_bfloat16, true>, __nv_bfloat16> norm_rotary_bfloat16;
  static Op<SwiGluKernel<float>, float> swiglu_float;
  static Op<SwiGluKernel<__half>, __half> swiglu_half;
  static Op<SwiGluKernel<__nv_bfloat16>, __nv_bfloat16> swiglu_bfloat16;
  static Op<RowMatMulKernel<__half, false>, __half> row_matmul_half;
  static Op<RowMatMulKernel<__nv_bfloat16, false>, __nv_bfloat16> row_matmul_bfloat16;
  static Op<RowMatMulKernel<__half, true>, __half> row_matmul_swiglu_half;
  static Op<RowMatMulKernel<__nv_bfloat16, true>, __nv_bfloat16> row_matmul_swiglu_bfloat16;
  static Op<RowMatMulRotaryKernel<__half>, __half> row_matmul_rotary_half;
  static Op<RowMatMulRotaryKernel<__nv_bfloat16>, __nv_bfloat16> row_matmul_rotary_bfloat16;
  static Op<SequentialCumSumKernel<false>, float> cumsum_float;
  static Op<SequentialCumSumKernel<true>, float> cumsum_until_float;
  static Op<SortDescendingKernel, float> sort_float;
  static Op<TopLogSoftmaxKernel, float> top_log_softmax_float;
  static Ort::CustomOpDomain* domain = nullptr;
  try {
    if (domain == nullptr) {
      domain = new Ort::CustomOpDomain("cellspec");  // lives as long as the process
      domain->Add(&attention_float);
      domain->Add(&attention_half);
      domain->Add(&attention_bfloat16);
      domain->Add(&rotary_float);
      domain->Add(&rotary_half);
      domain->Add(&rotary_bfloat16);
      domain->Add(&norm_rotary_float);
      domain->Add(&norm_rotary_half);
      domain->Add(&norm_rotary_bfloat16);
      domain->Add(&swiglu_float);
      domain->Add(&swiglu_half);
      domain->Add(&swiglu_bfloat16);
      domain->Add(&row_matmul_half);
      domain->Add(&row_matmul_bfloat16);
      domain->Add(&row_matmul_swiglu_half);
      domain->Add(&row_matmul_swiglu_bfloat16);
      domain->Add(&row_matmul_rotary_half);
      domain->Add(&row_matmul_rotary_bfloat16);
      domain->Add(&cumsum_float);
      domain->Add(&cumsum_until_float);
      domain->Add(&sort_float);
      domain->Add(&top_log_softmax_float);
    }
    Ort::UnownedSessionOptions(options).Add(*domain);
  } catch (const Ort::Exception& e) {
    return Ort::GetApi().CreateStatus(ORT_FAIL, e.what());
  }
  return nullptr;
}
