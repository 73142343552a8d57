// cellspec/plugins/cell_attention_mma.cuh's kernel run on the CPU, its source as it is: a block's 128
// threads are host threads, shared memory is the kernel's statics (one block at a time), a
// warp's shuffles and a block's barriers are std::barrier, and a WMMA fragment is its whole
// 16 x 16 tile in every lane (an MMA sums each element in float32, k in order; not the tensor
// cores' rounding). It checks the kernel's logic where no GPU is at hand: the output against
// float64 attention, and the two invariances tools/cell_attention_probe.cu's `mma` mode checks
// on the device (a verify row equals its plain step, a session equals itself alone), which hold
// here for the same reasons as there if the kernel's indexing is right; also a tree's verify and
// a draft block's step against float64. Float16 only. Needs g++ 12 or newer (std::barrier,
// _Float16); about 3.5 minutes on 2 cores:
//
//   g++ -std=c++20 -O2 -pthread tools/cell_attention_mma_emulate.cpp -o /tmp/emulate && /tmp/emulate
#include <algorithm>
#include <atomic>
#include <barrier>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include <type_traits>

// --- what the kernel uses of CUDA and of cellspec/plugins/cell_attention.cu ---------------------
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
using __half = _Float16;
struct uint4 { unsigned x, y, z, w; };
inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
struct Index { unsigned x = 0; };
thread_local Index threadIdx, blockIdx;

namespace emu {
constexpr int kThreads = 128;
std::barrier<>* block_barrier;
std::barrier<>* warp_barriers[kThreads / 32];
float lanes[kThreads / 32][32];
std::atomic<bool> any_flag;
}  // namespace emu

inline void __syncthreads() { emu::block_barrier->arrive_and_wait(); }
inline bool __syncthreads_or(bool p) {
  __syncthreads();
  if (threadIdx.x == 0) emu::any_flag = false;
  __syncthreads();
  if (p) emu::any_flag = true;
  __syncthreads();
  const bool result = emu::any_flag;
  __syncthreads();
  return result;
}
inline float shuffle(float v, int source) {
  const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
  emu::warp_barriers[w]->arrive_and_wait();
  emu::lanes[w][lane] = v;
  emu::warp_barriers[w]->arrive_and_wait();
  const float got = emu::lanes[w][source];
  emu::warp_barriers[w]->arrive_and_wait();
  return got;
}
inline float __shfl_sync(unsigned, float v, int source) { return shuffle(v, source & 31); }
inline float __shfl_down_sync(unsigned, float v, int offset) {
  const int lane = threadIdx.x % 32;
  return shuffle(v, lane + offset < 32 ? lane + offset : lane);
}

namespace nvcuda::wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major };
template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment { float x[16][16]; };
template <typename Frag>
void fill_fragment(Frag& f, float v) {
  for (auto& row : f.x) std::fill(std::begin(row), std::end(row), v);
}
template <typename T, typename Layout>
void load_matrix_sync(fragment<matrix_a, 16, 16, 16, T, Layout>& f, const T* p, unsigned ld) {
  static_assert(std::is_same_v<Layout, row_major>);
  for (int m = 0; m < 16; ++m)
    for (int k = 0; k < 16; ++k) f.x[m][k] = static_cast<float>(p[m * ld + k]);
}
template <typename T, typename Layout>
void load_matrix_sync(fragment<matrix_b, 16, 16, 16, T, Layout>& f, const T* p, unsigned ld) {
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 16; ++n)
      f.x[k][n] = static_cast<float>(std::is_same_v<Layout, row_major> ? p[k * ld + n]
                                                                       : p[n * ld + k]);
}
template <typename A, typename B>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d, const A& a, const B& b,
              const fragment<accumulator, 16, 16, 16, float>& c) {
  fragment<accumulator, 16, 16, 16, float> r;
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) {
      float sum = c.x[m][n];
      for (int k = 0; k < 16; ++k) sum += a.x[m][k] * b.x[k][n];
      r.x[m][n] = sum;
    }
  d = r;
}
inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ld, layout_t) {
  if (threadIdx.x % 32 != 0) return;  // one lane writes the warp's tile
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 16; ++n) p[m * ld + n] = f.x[m][n];
}
}  // namespace nvcuda::wmma

namespace {
constexpr int kChunk = 128;
constexpr int kMaxHeadDim = kChunk;
struct Dims {
  int64_t S, Q, N, H, KV, D, chunks;
  float scale;
  int by_position;
  int rows;
  int heads;
  int64_t row_tiles;
};
inline void allow_dependents() {}
inline void wait_for_predecessor() {}
template <typename T> T from_float(float x) { return static_cast<T>(x); }
template <bool kMax>
float warp_reduce(float value) {  // the plugin's, word for word
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_down_sync(0xffffffffu, value, offset);
    value = kMax ? fmaxf(value, other) : value + other;
  }
  return value;
}
#include "../cellspec/plugins/cell_attention_mma.cuh"
}  // namespace

// --- the emulated launch -----------------------------------------------------------------------
template <typename T> T from_float_host(float x) { return static_cast<T>(x); }
double to_double_host(float x) { return x; }
double to_double_host(__half x) { return static_cast<double>(x); }
#include "cell_attention_steps.h"

using Step = HostStep<__half>;

// the emulator's steps: sessions of different lengths, 37 cells short of the bucket and 29 fewer
// each
Step random_step(int S, int Q, int N, int H, int KV, int D, unsigned seed) {
  return random_step<__half>(S, Q, N, H, KV, D, seed, 37, 29);
}

Dims dims_of(const Step& st) {
  return Dims{st.S, st.Q, st.N, st.H, st.KV, st.D, (st.N + st.Q + kChunk - 1) / kChunk, 0.125f,
              st.by_position, 1, 1, 1};
}

// mma_chunk_kernel in chunks of `keys` keys (128 or 64) over every block (one at a time, 128 host
// threads each; `rows` > 0: that many rows a block), then combine_kernel's arithmetic (the
// plugin's, in C++): the output as floats
std::vector<float> attend(const Step& st, int keys, int rows = 0) {
  Dims dm = mma_tiling(dims_of(st), keys);
  if (rows > 0) {
    dm.rows = rows;
    dm.row_tiles = (dm.Q + rows - 1) / rows;
  }
  const size_t row_heads = (size_t)st.S * st.Q * st.H;
  std::vector<float> partials(row_heads * dm.chunks * (st.D + 2), NAN);
  std::vector<__half> out(row_heads * st.D, static_cast<__half>(NAN));
  std::barrier<> block(emu::kThreads);
  for (int w = 0; w < emu::kThreads / 32; ++w) emu::warp_barriers[w] = new std::barrier<>(32);
  emu::block_barrier = &block;
  const auto kernel = keys == 64 ? mma_chunk_kernel<__half, 64, false>
                                 : mma_chunk_kernel<__half, 128, false>;
  for (int64_t b = 0; b < mma_blocks(dm); ++b) {
    std::vector<std::thread> threads;
    for (int t = 0; t < emu::kThreads; ++t)
      threads.emplace_back([&, t, b] {
        threadIdx.x = t;
        blockIdx.x = static_cast<unsigned>(b);
        kernel(st.q.data(), st.k_new.data(), st.v_new.data(), st.k_pool.data(), st.v_pool.data(),
               st.table.data(), reinterpret_cast<const bool*>(st.mask.data()),
               st.positions.data(), dm, partials.data(), out.data());
      });
    for (auto& thread : threads) thread.join();
  }
  for (auto* w : emu::warp_barriers) delete w;
  std::vector<float> result(out.size());
  if (dm.chunks == 1) {
    for (size_t i = 0; i < out.size(); ++i) result[i] = static_cast<float>(out[i]);
    return result;
  }
  const int64_t stride = st.D + 2;
  for (size_t rh = 0; rh < row_heads; ++rh) {  // combine_kernel's arithmetic
    const float* base = &partials[rh * dm.chunks * stride];
    float m = -INFINITY;
    for (int64_t c = 0; c < dm.chunks; ++c)
      if (base[c * stride + 1] > 0.f) m = fmaxf(m, base[c * stride]);
    for (int d = 0; d < st.D; ++d) {
      float l = 0.f, acc = 0.f;
      for (int64_t c = 0; c < dm.chunks; ++c)
        if (base[c * stride + 1] > 0.f) {
          const float f = expf(base[c * stride] - m);
          l += base[c * stride + 1] * f;
          acc += base[c * stride + 2 + d] * f;
        }
      result[rh * st.D + d] = static_cast<float>(static_cast<__half>(l > 0.f ? acc / l : 0.f));
    }
  }
  return result;
}

// a tree's verify: row i's parent (i - 1) / 2, so that siblings sit at one position, each row
// seeing its ancestors only (the kernel's rows then disagree on a slot's key: one row a pass)
Step tree_step(Step st) {
  const int Q = st.Q, N = st.N;
  for (int i = 0; i < Q; ++i) {
    int depth = 0;
    for (int a = i; a > 0; a = (a - 1) / 2) ++depth;
    st.positions[i] = st.positions[0] + depth;
    char* m = &st.mask[(size_t)i * (N + Q) + N];
    std::fill(m, m + Q, 0);
    for (int a = i;; a = (a - 1) / 2) {
      m[a] = 1;
      if (a == 0) break;
    }
  }
  return st;
}

int main() {
  int failures = 0;
  auto check = [&](const char* what, bool ok) {
    printf("%-76s %s\n", what, ok ? "ok" : "FAILED");
    failures += !ok;
  };
  struct Shape { int Q, N, H, KV, D; };
  for (const int keys : {128, 64})
  for (const Shape& sh : {Shape{16, 300, 32, 8, 128}, Shape{16, 200, 9, 3, 64},
                          Shape{5, 140, 6, 2, 80}, Shape{7, 150, 4, 4, 32}}) {
    char line[192];
    const Step v = random_step(1, sh.Q, sh.N, sh.H, sh.KV, sh.D, 7u);
    const std::vector<float> verify = attend(v, keys);
    const double err = reference_error(v, verify, 0.125f);
    snprintf(line, sizeof line, "chunks of %d, H=%d KV=%d D=%d: a %d-row verify over %d cells, "
             "max err %.1e", keys, sh.H, sh.KV, sh.D, sh.Q, sh.N, err);
    check(line, err < 4e-3);
    const size_t row = (size_t)sh.H * sh.D;
    int equal = 0;
    for (int r = 0; r < sh.Q; ++r) {
      const std::vector<float> plain = attend(plain_step_of_row(v, r), keys);
      equal += std::equal(plain.begin(), plain.end(), verify.begin() + r * row);
    }
    snprintf(line, sizeof line, "  verify rows equal to their plain steps: %d/%d", equal, sh.Q);
    check(line, equal == sh.Q);
    const std::vector<float> one_a_block = attend(v, keys, 1);
    check("  the same with one row a block",
          std::equal(one_a_block.begin(), one_a_block.end(), verify.begin()));
    const Step b = random_step(3, sh.Q, sh.N, sh.H, sh.KV, sh.D, 9u);
    const std::vector<float> batch = attend(b, keys);
    snprintf(line, sizeof line, "  3 sessions of different lengths, max err %.1e",
             reference_error(b, batch, 0.125f));
    check(line, reference_error(b, batch, 0.125f) < 4e-3);
    int alone = 0;
    for (int s = 0; s < 3; ++s) {
      const std::vector<float> a = attend(session_alone(b, s), keys);
      alone += std::equal(a.begin(), a.end(), batch.begin() + s * sh.Q * row);
    }
    snprintf(line, sizeof line, "  sessions equal to each alone: %d/3", alone);
    check(line, alone == 3);
    const Step tree = tree_step(v);
    const std::vector<float> tree_out = attend(tree, keys);
    snprintf(line, sizeof line, "  a tree's verify (rows one a pass), max err %.1e",
             reference_error(tree, tree_out, 0.125f));
    check(line, reference_error(tree, tree_out, 0.125f) < 4e-3);
    const Step block = block_step(b);
    const std::vector<float> block_out = attend(block, keys);
    snprintf(line, sizeof line, "  a draft block's step (keys N + i, not causal), max err %.1e",
             reference_error(block, block_out, 0.125f));
    check(line, reference_error(block, block_out, 0.125f) < 4e-3);
  }
  printf("%s\n", failures ? "FAILED" : "all ok");
  return failures ? 1 : 0;
}
