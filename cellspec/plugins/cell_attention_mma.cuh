// CellAttention's chunk on the tensor cores (WMMA), float16 and bfloat16: mma_chunk_kernel, which
// cell_attention.cu launches instead of pair_kernel / chunk_kernel for heads of 128 dimensions,
// or as CELLSPEC_CUDA_MMA_ATTENTION=1 / 0 says (mma_attention). Included by cell_attention.cu inside its
// namespace (Dims, kChunk, warp_reduce, combine_kernel, ...); tools/cell_attention_probe.cu's
// `mma` mode times it and checks its invariances on a GPU, and
// tools/cell_attention_mma_emulate.cpp runs this source on host threads.
//
// Why: a 16-row verify of Qwen3-8B's heads over 1,024 cells takes chunk_kernel 72.8 us a layer
// in a real step (49 us with a warm L2), against 15 us for one row, and that difference is most
// of what a DFlash cycle costs over a step on shape C (bench/NOTES.md, 2026-12-04, twelfth and
// thirteenth sittings). Its arithmetic (16 x 32 pairs x 1,024 keys x 128 x 2) is a few us of
// the tensor cores.
//
// The layout: one block per (sequence, tile of up to kMmaRows of its rows, kv head, chunk of
// kKeys keys: 128, chunk_kernel's chunks, or 64; combine_kernel and the partials' layout serve
// either, dm.chunks counting the kernel's chunks). The
// block's (row, query head) pairs, at most 16 (rows x the kv head's query heads), are the rows
// of one m16 tile: scores = Q K^T on the tensor cores, half a chunk's keys at a time, float32;
// each pair's max, exp and sum over the chunk by one warp in a fixed order; weights rounded to T;
// the weighted sum P V on the tensor cores, float32; then the chunk's partials (max, sum,
// sums[D]) as chunk_kernel writes them.
//
// Why a row's result cannot depend on its block: an element of an MMA's output is its own row
// of A times its own column of B, the k-steps in a fixed order (D / 16 of them for the scores,
// kKeys / 16 for the sum), whatever the other rows hold; keys a pair does not see get weight
// exactly 0 (their products are 0, and a key that no row of the block sees is staged as zeros,
// since its cell may hold anything). A block's rows share one staged key per slot only where
// every row that sees the slot sees the same key there (a chain's verify, a decode step); where
// two rows see different keys at one slot (siblings of a tree, at one position), the block runs
// its rows one at a time. Either way each pair's arithmetic is the same.
constexpr int kMmaRows = 4;    // query rows per block at most
constexpr int kMmaPairs = 16;  // (row, head) pairs per block: one m16 tile
constexpr int kMmaThreads = 128;
constexpr int kMmaWarps = kMmaThreads / 32;
constexpr int kHalfChunk = kChunk / 2;  // keys staged at once
constexpr int kMmaPad = 8;              // elements of padding per staged row (bank spread)
constexpr int kScoreLd = kChunk + 4;
constexpr int kStagedLd = kMaxHeadDim + kMmaPad;
constexpr int kWeightLd = kChunk + kMmaPad;
constexpr long long kNoKey = LLONG_MIN;  // a slot a row does not see

static_assert(kChunk == 128 && kMmaWarps == 4, "the warps' shares below are for 64 keys a stage");

// a slot's key source: cell >= 0, or -1 - i for new token i, or kNoKey
template <typename T>
__device__ __forceinline__ const T* source_row(long long source, const T* pool, const T* fresh,
                                               int64_t s, const Dims& dm, int64_t kv_offset) {
  const int64_t kv_width = dm.KV * dm.D;
  if (source >= 0) return pool + source * kv_width + kv_offset;
  return fresh + (s * dm.Q + (-1 - source)) * kv_width + kv_offset;
}

// half a chunk's key (or value) rows of one kv head into `staged`, zeros where no row sees the
// slot; every load in flight before the first store
template <typename T>
__device__ __forceinline__ void stage_rows(T (*staged)[kStagedLd], const long long* sources,
                                           const T* pool, const T* fresh, int64_t s,
                                           const Dims& dm, int64_t kv_offset) {
  constexpr int kPerThread = kHalfChunk * (kMaxHeadDim * sizeof(T) / 16) / kMmaThreads;
  const int vectors = static_cast<int>(dm.D * sizeof(T) / 16);  // per row
  uint4 raw[kPerThread];
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int i = threadIdx.x + u * kMmaThreads, slot = i / vectors, v = i % vectors;
    raw[u] = make_uint4(0, 0, 0, 0);
    if (slot < kHalfChunk && sources[slot] != kNoKey)
      raw[u] = reinterpret_cast<const uint4*>(
          source_row(sources[slot], pool, fresh, s, dm, kv_offset))[v];
  }
#pragma unroll
  for (int u = 0; u < kPerThread; ++u) {
    const int i = threadIdx.x + u * kMmaThreads, slot = i / vectors, v = i % vectors;
    if (slot < kHalfChunk) reinterpret_cast<uint4*>(&staged[slot][0])[v] = raw[u];
  }
}

template <typename T, int kKeys, bool kOverlap>
__global__ void __launch_bounds__(kMmaThreads) mma_chunk_kernel(
    const T* __restrict__ q, const T* __restrict__ k_new, const T* __restrict__ v_new,
    const T* __restrict__ k_pool, const T* __restrict__ v_pool,
    const int64_t* __restrict__ cell_table, const bool* __restrict__ mask,
    const int64_t* __restrict__ positions, Dims dm, float* __restrict__ partials,
    T* __restrict__ out) {
  using namespace nvcuda;
  __shared__ __align__(32) T query[kMmaPairs][kStagedLd];
  __shared__ __align__(32) T staged[kHalfChunk][kStagedLd];  // keys, then values
  __shared__ __align__(32) float score[kMmaPairs][kScoreLd];  // scores, then the sums
  __shared__ __align__(32) T weight[kMmaPairs][kWeightLd];   // exp weights rounded to T
  __shared__ long long sources[kMmaRows][kChunk];            // each row's key of each slot
  __shared__ long long pass_sources[kChunk];                 // a pass's rows' keys
  __shared__ int new_col[kMmaRows][kChunk];
  __shared__ float pair_max[kMmaPairs], pair_sum[kMmaPairs];

  unsigned block = blockIdx.x;
  const unsigned chunks = static_cast<unsigned>(dm.chunks);
  const unsigned kv_heads = static_cast<unsigned>(dm.KV);
  const unsigned row_tiles = static_cast<unsigned>(dm.row_tiles);
  const int64_t c = block % chunks;
  block /= chunks;
  const int64_t g = block % kv_heads;
  block /= kv_heads;
  const int64_t r0 = static_cast<int64_t>(block % row_tiles) * dm.rows;
  const int64_t s = block / row_tiles;
  const int rows = static_cast<int>(dm.Q - r0 < dm.rows ? dm.Q - r0 : dm.rows);
  const int group = static_cast<int>(dm.H / dm.KV);
  const int D = static_cast<int>(dm.D);
  const int t = threadIdx.x, lane = t & 31, warp = t >> 5;
  const int64_t kv_offset = g * dm.D;
  static_assert(kKeys == 64 || kKeys == 128, "a chunk is one or two stages of keys");
  const int64_t first = c * kKeys, key = first + t;
  if constexpr (kOverlap) allow_dependents();

  // each row's key of each slot, as chunk_kernel picks it: the cell where the row sees it, else
  // the new token at that key index the row sees. Overlapped, this reads only the step's inputs
  // (the mask, the positions, the cell table: pair_kernel's note), so it runs before the wait for
  // the step's previous kernel; nothing global is written before the wait.
  for (int r = 0; r < rows; ++r) new_col[r][t] = -1;
  __syncthreads();
  for (int r = 0; r < rows; ++r) {
    const bool* mask_row = mask + (s * dm.Q + r0 + r) * (dm.N + dm.Q);
    for (int64_t i = t; i < dm.Q; i += kMmaThreads) {
      const bool sees = mask_row[dm.N + i];
      const int64_t at = dm.by_position ? positions[s * dm.Q + i] : dm.N + i;
      if (at >= first && at < first + kKeys && sees) new_col[r][at - first] = static_cast<int>(i);
    }
  }
  __syncthreads();
  const int64_t cell = t < kKeys && key < dm.N ? cell_table[s * dm.N + key] : 0;
  bool any = false, conflict = false;
  long long seen = kNoKey;
  for (int r = 0; r < rows; ++r) {
    long long source = kNoKey;
    if (t >= kKeys) {  // no slot of this chunk
    } else if (key < dm.N && mask[(s * dm.Q + r0 + r) * (dm.N + dm.Q) + key]) {
      source = cell;
    } else if (new_col[r][t] >= 0) {
      source = -1 - new_col[r][t];
    }
    sources[r][t] = source;
    if (source == kNoKey) continue;
    any = true;
    if (seen == kNoKey) seen = source;
    conflict |= source != seen;
  }
  const bool any_seen = __syncthreads_or(any);
  const bool shared_keys = !__syncthreads_or(conflict);
  if constexpr (kOverlap) wait_for_predecessor();

  auto write_pair = [&](int p, int row, int d, float value_sum) {
    const int64_t row_head = (s * dm.Q + r0 + row) * dm.H + g * group + p % group;
    if (dm.chunks > 1) {
      float* part = partials + (row_head * dm.chunks + c) * (dm.D + 2);
      if (d == 0) {
        part[0] = pair_max[p];
        part[1] = pair_sum[p];
      }
      part[2 + d] = value_sum;
    } else {
      const float l = pair_sum[p];
      out[row_head * dm.D + d] = from_float<T>(l > 0.f ? value_sum / l : 0.f);
    }
  };
  if (!any_seen) {  // no row of the tile sees a key of this chunk
    if (t < kMmaPairs) {
      pair_max[t] = -INFINITY;
      pair_sum[t] = 0.f;
    }
    __syncthreads();
    for (int i = t; i < rows * group * D; i += kMmaThreads)
      write_pair(i / D, i / D / group, i % D, 0.f);
    return;
  }

  using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
  using FragKeys = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;
  using FragValues = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
  using FragSum = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
  const int passes = shared_keys ? 1 : rows;
  const int pass_rows = shared_keys ? rows : 1;
  const int pairs = pass_rows * group;
#pragma unroll 1
  for (int pass = 0; pass < passes; ++pass) {
    const int row0 = shared_keys ? 0 : pass;  // the pass's first row in the tile
    {
      long long source = kNoKey;
      for (int r = row0; r < row0 + pass_rows; ++r)
        if (sources[r][t] != kNoKey) source = sources[r][t];  // all the same where seen
      pass_sources[t] = source;
    }
    for (int i = t; i < kMmaPairs * D; i += kMmaThreads) {
      const int p = i / D, d = i % D;
      T value = from_float<T>(0.f);
      if (p < pairs)
        value = q[((s * dm.Q + r0 + row0 + p / group) * dm.H + g * group + p % group) * dm.D + d];
      query[p][d] = value;
    }
    __syncthreads();

    // scores: warp w takes keys 16 w .. 16 w + 15 of each half
#pragma unroll 1
    for (int half = 0; half < kKeys / kHalfChunk; ++half) {
      stage_rows<T>(staged, pass_sources + half * kHalfChunk, k_pool, k_new, s, dm, kv_offset);
      __syncthreads();
      FragSum dot;
      wmma::fill_fragment(dot, 0.f);
      for (int k0 = 0; k0 < D; k0 += 16) {
        FragA a;
        FragKeys b;
        wmma::load_matrix_sync(a, &query[0][k0], kStagedLd);
        wmma::load_matrix_sync(b, &staged[warp * 16][k0], kStagedLd);
        wmma::mma_sync(dot, a, b, dot);
      }
      wmma::store_matrix_sync(&score[0][half * kHalfChunk + warp * 16], dot, kScoreLd,
                              wmma::mem_row_major);
      __syncthreads();  // the staged keys are read
    }

    // each pair's max, weights and sum over the chunk: warp w takes pairs w, w + 4, ...; lane l
    // slots l, l + 32, l + 64, l + 96, in that order, then warp_reduce's fixed tree
    for (int p = warp; p < kMmaPairs; p += kMmaWarps) {
      const int row = row0 + p / group;
      float e[kKeys / 32];
      float top = -INFINITY;
#pragma unroll
      for (int u = 0; u < kKeys / 32; ++u) {
        const int j = lane + 32 * u;
        const bool sees = p < pairs && sources[row < rows ? row : 0][j] != kNoKey;
        e[u] = sees ? score[p][j] * dm.scale : -INFINITY;
        top = fmaxf(top, e[u]);
      }
      top = __shfl_sync(0xffffffffu, warp_reduce<true>(top), 0);
      float total = 0.f;
#pragma unroll
      for (int u = 0; u < kKeys / 32; ++u) {
        e[u] = e[u] != -INFINITY ? expf(e[u] - top) : 0.f;
        total += e[u];
        weight[p][lane + 32 * u] = from_float<T>(e[u]);
      }
      total = warp_reduce<false>(total);
      if (lane == 0) {
        pair_max[p] = top;
        pair_sum[p] = total;
      }
    }

    // the weighted sum: warp w takes the output columns 16 n .. 16 n + 15, n = w, w + 4
    FragSum sums[kMaxHeadDim / 16 / kMmaWarps];
#pragma unroll
    for (int i = 0; i < kMaxHeadDim / 16 / kMmaWarps; ++i) wmma::fill_fragment(sums[i], 0.f);
#pragma unroll 1
    for (int half = 0; half < kKeys / kHalfChunk; ++half) {
      stage_rows<T>(staged, pass_sources + half * kHalfChunk, v_pool, v_new, s, dm, kv_offset);
      __syncthreads();  // (the first time also: the weights are written)
#pragma unroll
      for (int i = 0; i < kMaxHeadDim / 16 / kMmaWarps; ++i) {
        const int n = warp + kMmaWarps * i;
        if (16 * n >= D) break;
        for (int k0 = 0; k0 < kHalfChunk; k0 += 16) {
          FragA a;
          FragValues b;
          wmma::load_matrix_sync(a, &weight[0][half * kHalfChunk + k0], kWeightLd);
          wmma::load_matrix_sync(b, &staged[k0][16 * n], kStagedLd);
          wmma::mma_sync(sums[i], a, b, sums[i]);
        }
      }
      __syncthreads();  // the staged values are read
    }
#pragma unroll
    for (int i = 0; i < kMaxHeadDim / 16 / kMmaWarps; ++i) {
      const int n = warp + kMmaWarps * i;
      if (16 * n < D)
        wmma::store_matrix_sync(&score[0][16 * n], sums[i], kScoreLd, wmma::mem_row_major);
    }
    __syncthreads();
    for (int i = t; i < pairs * D; i += kMmaThreads)
      write_pair(i / D, row0 + i / D / group, i % D, score[i / D][i % D]);
    __syncthreads();  // before the next pass overwrites the scores
  }
}

// rows per block for mma_chunk_kernel (any choice gives the same bits): as many of the step's
// rows as one m16 tile of pairs holds, at most kMmaRows; and its chunks of `keys` keys
Dims mma_tiling(Dims dm, int keys) {
  dm.chunks = (dm.N + dm.Q + keys - 1) / keys;
  const int64_t group = dm.H / dm.KV;
  const int64_t rows = std::max<int64_t>(1, std::min<int64_t>({int64_t{kMmaRows}, kMmaPairs / group, dm.Q}));
  dm.rows = static_cast<int>(rows);
  dm.heads = static_cast<int>(group);
  dm.row_tiles = (dm.Q + rows - 1) / rows;
  return dm;
}

int64_t mma_blocks(const Dims& dm) { return dm.S * dm.row_tiles * dm.KV * dm.chunks; }
