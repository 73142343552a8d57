// Times cellspec's attention kernels (cellspec/plugins/cell_attention.cu) alone, with CUDA
// events, no ONNX Runtime session: chunk_kernel and combine_kernel per launch for the decode,
// verify and prompt shapes of bench/NOTES.md (SmolLM2 and Qwen3-8B heads, 1024 cells), with the
// launch's own tiling and with one row and one head per block. Each line also checks the
// output against a float64 reference on the host (max abs error) and prints a hash of its bytes,
// so two builds of the kernel can be compared bit for bit (a run's inputs depend on its shape
// only: every line of a shape must print the same hash, whatever its tiling). Needs a GPU, nvcc
// and ONNX Runtime's C++ API headers (the .cu includes them):
//
//   nvcc -std=c++17 -O3 -arch=native -I"$CELLSPEC_ORT_INCLUDE" tools/cell_attention_probe.cu \
//       -o /tmp/probe && /tmp/probe
//
// `/tmp/probe mma` times mma_chunk_kernel (cellspec/plugins/cell_attention_mma.cuh: the chunk on
// the tensor cores) next to the plugin's launch, and checks that it keeps the plugin's invariances.
// `/tmp/probe verify-qwen` times every tiling of Qwen3-8B-headed verifies (16 rows, 1024 cells).
// `/tmp/probe pair` times pair_kernel instead (steps tiled one (row, head) pair a block over 2-4
// chunks: decode steps and verifies over a few hundred cells), next to an empty kernel of the
// same launch shape. Built with -DCELLSPEC_STAGE_CLOCKS, it also prints the median
// multiprocessor cycles and microseconds each of the kernel's stages took over the blocks (the
// plugin's build has no clocks; the mode's hashes are the plugin's kernel's all the same).
// chunk_kernel reads its key rows through its staging buffer where the plugin would (the line's
// "staged"); CELLSPEC_PROBE_STAGED=0 or 1 forces the choice, whose hashes must agree.
#include "../cellspec/plugins/cell_attention.cu"
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

template <typename T> T from_float_host(float x);
template <> float from_float_host<float>(float x) { return x; }
template <> __half from_float_host<__half>(float x) { return __float2half(x); }
template <> __nv_bfloat16 from_float_host<__nv_bfloat16>(float x) { return __float2bfloat16(x); }
double to_double_host(float x) { return x; }
double to_double_host(__half x) { return __half2float(x); }
double to_double_host(__nv_bfloat16 x) { return __bfloat162float(x); }

#include "cell_attention_steps.h"

__global__ void empty_kernel() {}

#ifdef CELLSPEC_STAGE_CLOCKS
// the median over the first `blocks` blocks of each stage's cycles (stage_clocks[b][i + 1] -
// stage_clocks[b][i]), then of the whole kernel
void print_stages(int64_t blocks) {
  static long long clocks[kStageBlocks][kStages];
  cudaMemcpyFromSymbol(clocks, stage_clocks, sizeof(clocks));
  int device = 0, khz = 1;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device);
  const int64_t n = std::min<int64_t>(blocks, kStageBlocks);
  const char* names[kStages] = {"query, new columns", "new tokens' keys", "key rows", "seen",
                                "scores", "max", "sum", "weighted sum", "classes' tree",
                                "combine, output", "whole block"};
  std::vector<long long> d(n);
  for (int i = 0; i < kStages; ++i) {
    for (int64_t b = 0; b < n; ++b)
      d[b] = i + 1 < kStages ? clocks[b][i + 1] - clocks[b][i] : clocks[b][kStages - 1] - clocks[b][0];
    std::nth_element(d.begin(), d.begin() + n / 2, d.end());
    printf("    %-20s %7lld cycles %6.2f us\n", names[i], d[n / 2], 1e3 * d[n / 2] / khz);
  }
}
#endif

// the probe's steps: seeded by the shape (random_step)
template <typename T>
HostStep<T> probe_step(int S, int Q, int N, int H, int KV, int D) {
  return random_step<T>(S, Q, N, H, KV, D,
                        static_cast<unsigned>(((S * 131 + Q) * 131 + N) * 131 + H * 7 + D));
}

template <typename T>
Dims dims_of(const HostStep<T>& st) {
  return Dims{st.S, st.Q, st.N, st.H, st.KV, st.D, (st.N + st.Q + kChunk - 1) / kChunk, 0.125f,
              st.by_position, 1, 1, 1};
}

// a step's inputs, output and scratch on the device
template <typename T>
struct DeviceStep {
  T *q, *k_new, *v_new, *k_pool, *v_pool, *out;
  int64_t *table, *positions;
  bool* mask;
  float* partials;
  size_t out_size;
  template <typename V>
  static V* copy(const std::vector<V>& host) {
    V* device;
    cudaMalloc(&device, sizeof(V) * std::max<size_t>(host.size(), 1));
    cudaMemcpy(device, host.data(), sizeof(V) * host.size(), cudaMemcpyHostToDevice);
    return device;
  }
  explicit DeviceStep(const HostStep<T>& st) {
    q = copy(st.q); k_new = copy(st.k_new); v_new = copy(st.v_new);
    k_pool = copy(st.k_pool); v_pool = copy(st.v_pool);
    table = copy(st.table); positions = copy(st.positions);
    mask = reinterpret_cast<bool*>(copy(st.mask));
    out_size = (size_t)st.S * st.Q * st.H * st.D;
    cudaMalloc(&out, sizeof(T) * out_size);
    const int64_t chunks = (st.N + st.Q + 63) / 64;  // the most: chunks of 64 keys
    cudaMalloc(&partials, sizeof(float) * out_size / st.D * chunks * (st.D + 2));
  }
  ~DeviceStep() {
    cudaFree(q); cudaFree(k_new); cudaFree(v_new); cudaFree(k_pool); cudaFree(v_pool);
    cudaFree(out); cudaFree(table); cudaFree(positions); cudaFree(mask); cudaFree(partials);
  }
  std::vector<T> output() const {
    std::vector<T> got(out_size);
    cudaMemcpy(got.data(), out, sizeof(T) * got.size(), cudaMemcpyDeviceToHost);
    return got;
  }
};

template <typename T>
uint64_t hash_of(const std::vector<T>& got) {  // FNV-1a of the output's bytes
  uint64_t hash = 1469598103934665603ull;
  for (size_t i = 0; i < got.size() * sizeof(T); ++i)
    hash = (hash ^ reinterpret_cast<const unsigned char*>(got.data())[i]) * 1099511628211ull;
  return hash;
}

template <typename T>
void run(int S, int Q, int N, int H, int KV, int D, int heads, int rows, int reps,
         bool pair = false) {
  const HostStep<T> st = probe_step<T>(S, Q, N, H, KV, D);
  DeviceStep<T> dev(st);
  T *q = dev.q, *k_new = dev.k_new, *v_new = dev.v_new, *k_pool = dev.k_pool,
    *v_pool = dev.v_pool, *out = dev.out;
  int64_t *table = dev.table, *positions = dev.positions;
  bool* mask = dev.mask;
  float* partials = dev.partials;
  Dims dm = dims_of(st);
  if (pair) {  // one (row, head) pair a block, as the plugin launches pair_kernel
    if (dm.chunks < 2 || dm.chunks > kMaxInBlockChunks) {
      printf("S=%d Q=%d N=%d: %lld chunks, pair_kernel takes 2 to %d\n", S, Q, N,
             (long long)dm.chunks, kMaxInBlockChunks);
      return;
    }
    if (!pair_values_coalesce(D, sizeof(T))) {  // the plugin's gate: the layout needs it
      printf("D=%d, %zu-byte elements: pair_kernel's value classes do not fit (two kernels)\n", D,
             sizeof(T));
      return;
    }
    dm.row_tiles = Q;
  } else if (heads > 0) {
    dm.heads = heads; dm.rows = rows; dm.row_tiles = (Q + rows - 1) / rows;
  } else {
    tile(dm, resident_chunk_blocks<T>);
  }
  const int64_t blocks = dm.S * dm.row_tiles * (dm.H / dm.heads) * dm.chunks;
  // the plugin's choice of staged key rows, or CELLSPEC_PROBE_STAGED=0 / 1's
  const char* forced = std::getenv("CELLSPEC_PROBE_STAGED");
  const bool staged = forced ? std::string(forced) == "1" : staged_keys<T>(dm, blocks, false);
  cudaEvent_t a, b, c;
  cudaEventCreate(&a); cudaEventCreate(&b); cudaEventCreate(&c);
  auto launch = [&] {
    if (pair)
      pair_kernel<T, false><<<S * Q * H, kChunk * dm.chunks>>>(
          q, k_new, v_new, k_pool, v_pool, table, mask, positions, dm, out);
    else
      chunk_kernel_for<T>(dm.heads, false, staged)<<<blocks, kChunk>>>(q, k_new, v_new, k_pool, v_pool, table, mask, positions, dm, partials, out);
  };
  for (int w = 0; w < 3; ++w) launch();
  cudaEventRecord(a);
  for (int r = 0; r < reps; ++r) launch();
  cudaEventRecord(b);
  for (int r = 0; r < reps && dm.chunks > 1 && !pair; ++r)  // one chunk: chunk_kernel wrote the output
    combine_kernel<T, false><<<S * Q * H, D < 128 ? D : 128, combine_bytes(dm)>>>(partials, dm, out);
  cudaEventRecord(c);
  cudaEventSynchronize(c);
  float chunk_ms, combine_ms;
  cudaEventElapsedTime(&chunk_ms, a, b);
  cudaEventElapsedTime(&combine_ms, b, c);
  const std::vector<T> got = dev.output();
  const uint64_t hash = hash_of(got);
  const double max_err = reference_error(st, got, dm.scale);
  if (pair) {
    const unsigned grid = static_cast<unsigned>(S * Q * H), threads = kChunk * dm.chunks;
    for (int w = 0; w < 3; ++w) empty_kernel<<<grid, threads>>>();
    cudaEventRecord(a);
    for (int r = 0; r < reps; ++r) empty_kernel<<<grid, threads>>>();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float empty_ms;
    cudaEventElapsedTime(&empty_ms, a, b);
    printf("S=%d Q=%d N=%d H=%d KV=%d D=%d blocks=%u threads=%u: pair %.2f us, empty kernel %.2f us, max err %.1e, hash %016llx  (%s)\n",
           S, Q, N, H, KV, D, grid, threads, 1e3 * chunk_ms / reps, 1e3 * empty_ms / reps,
           max_err, (unsigned long long)hash, cudaGetErrorString(cudaGetLastError()));
#ifdef CELLSPEC_STAGE_CLOCKS
    launch();
    cudaDeviceSynchronize();
    print_stages(grid);
#endif
  } else {
    printf("S=%d Q=%d N=%d H=%d KV=%d D=%d heads/block=%d rows/block=%d blocks=%lld chunks=%lld staged=%d: chunk %.2f us, combine %.2f us, max err %.1e, hash %016llx  (%s)\n",
           S, Q, N, H, KV, D, dm.heads, dm.rows, (long long)blocks, (long long)dm.chunks, staged ? 1 : 0,
           1e3 * chunk_ms / reps, 1e3 * combine_ms / reps, max_err, (unsigned long long)hash,
           cudaGetErrorString(cudaGetLastError()));
  }
}

// the step's attention: mma_chunk_kernel, then combine_kernel where the step has several chunks
template <typename T>
void launch_mma(const T* q, const T* k_new, const T* v_new, const T* k_pool, const T* v_pool,
                const int64_t* table, const bool* mask, const int64_t* positions, const Dims& dm,
                float* partials, T* out, int keys, cudaStream_t stream) {
  (keys == 64 ? mma_chunk_kernel<T, 64, false> : mma_chunk_kernel<T, 128, false>)
      <<<static_cast<unsigned>(mma_blocks(dm)), kMmaThreads, 0, stream>>>(
          q, k_new, v_new, k_pool, v_pool, table, mask, positions, dm, partials, out);
  if (dm.chunks > 1)
    combine_kernel<T, false><<<static_cast<unsigned>(dm.S * dm.Q * dm.H),
                               dm.D < 128 ? static_cast<unsigned>(dm.D) : 128u,
                               combine_bytes(dm), stream>>>(partials, dm, out);
}

// `mma` mode: the plugin's launch of a step (attend's choice: pair_kernel, or chunk_kernel and
// combine_kernel) with keys 0, or mma_chunk_kernel's with chunks of `keys` (128 or 64), `reps`
// times after 3 warm-ups; the step's output, and the microseconds a launch took
template <typename T>
std::vector<T> attend_step(const HostStep<T>& st, int keys, int reps, float* us = nullptr) {
  DeviceStep<T> d(st);
  Dims dm = dims_of(st);
  auto launch = [&] {
    if (keys > 0) {
      launch_mma<T>(d.q, d.k_new, d.v_new, d.k_pool, d.v_pool, d.table, d.mask, d.positions,
                    dm, d.partials, d.out, keys, nullptr);
    } else if (pairs_in_one_launch(dm, sizeof(T))) {
      pair_kernel<T, false><<<st.S * st.Q * st.H, kChunk * dm.chunks>>>(
          d.q, d.k_new, d.v_new, d.k_pool, d.v_pool, d.table, d.mask, d.positions, dm, d.out);
    } else {
      const int64_t blocks = dm.S * dm.row_tiles * (dm.H / dm.heads) * dm.chunks;
      chunk_kernel_for<T>(dm.heads, false, staged_keys<T>(dm, blocks, false))<<<blocks, kChunk>>>(
          d.q, d.k_new, d.v_new, d.k_pool, d.v_pool, d.table, d.mask, d.positions, dm, d.partials,
          d.out);
      if (dm.chunks > 1)
        combine_kernel<T, false><<<st.S * st.Q * st.H, st.D < 128 ? st.D : 128,
                                   combine_bytes(dm)>>>(d.partials, dm, d.out);
    }
  };
  if (keys > 0)
    dm = mma_tiling(dm, keys);
  else
    tile(dm, resident_chunk_blocks<T>);
  for (int w = 0; w < 3; ++w) launch();
  cudaEvent_t a, b;
  cudaEventCreate(&a); cudaEventCreate(&b);
  cudaEventRecord(a);
  for (int r = 0; r < reps; ++r) launch();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0.f;
  cudaEventElapsedTime(&ms, a, b);
  if (us != nullptr) *us = 1e3f * ms / std::max(reps, 1);
  cudaEventDestroy(a); cudaEventDestroy(b);
  const cudaError_t status = cudaDeviceSynchronize();
  if (status != cudaSuccess) printf("  CUDA error: %s\n", cudaGetErrorString(status));
  return d.output();
}

// the name of attend_step's launch with chunks of `keys` keys (0: the plugin's)
const char* launch_name(int keys) {
  return keys == 0 ? "plugin" : keys == 128 ? "mma128" : "mma64";
}

// the launches of one step (the plugin's, mma_chunk_kernel's with chunks of 128 and of 64 keys):
// time, error against float64, hash; by_position 0: a draft block's step (every row sees every
// new token, new token i at key N + i)
template <typename T>
void compare_paths(int S, int Q, int N, int H, int KV, int D, int reps, int by_position = 1) {
  HostStep<T> st = probe_step<T>(S, Q, N, H, KV, D);
  if (!by_position) st = block_step(st);
  printf("%s S=%d Q=%d N=%d H=%d KV=%d D=%d%s:", std::is_same<T, __half>::value ? "f16" : "bf16",
         S, Q, N, H, KV, D, by_position ? "" : " (draft block)");
  float plugin_us = 0.f;
  for (const int keys : {0, 128, 64}) {
    float us = 0.f;
    const std::vector<T> got = attend_step(st, keys, reps, &us);
    if (keys == 0) plugin_us = us;
    printf(" %s %.2f us (err %.1e, hash %016llx", launch_name(keys), us,
           reference_error(st, got, 0.125f), (unsigned long long)hash_of(got));
    if (keys) printf(", %.2fx", plugin_us / std::max(us, 1e-3f));
    printf(")");
  }
  printf("\n");
}

// whether each row's output bytes of a one-session verify equal its plain step's, and each
// session's of a batch equal it alone, for the three launches
template <typename T>
void check_invariance(int Q, int N, int H, int KV, int D, int S) {
  const HostStep<T> v = probe_step<T>(1, Q, N, H, KV, D);
  const HostStep<T> b = probe_step<T>(S, Q, N, H, KV, D);
  const size_t row = (size_t)H * D;
  for (const int keys : {0, 128, 64}) {
    const std::vector<T> verify = attend_step(v, keys, 0), batch = attend_step(b, keys, 0);
    int rows_equal = 0, sessions_equal = 0;
    for (int r = 0; r < Q; ++r) {
      const std::vector<T> plain = attend_step(plain_step_of_row(v, r), keys, 0);
      rows_equal += memcmp(plain.data(), &verify[r * row], row * sizeof(T)) == 0;
    }
    for (int s = 0; s < S; ++s) {
      const std::vector<T> alone = attend_step(session_alone(b, s), keys, 0);
      sessions_equal += memcmp(alone.data(), &batch[s * Q * row], Q * row * sizeof(T)) == 0;
    }
    printf("%-6s Q=%d N=%d H=%d KV=%d D=%d: verify rows equal to their plain steps %d/%d, "
           "sessions of %d equal to each alone %d/%d\n", launch_name(keys), Q, N, H, KV, D,
           rows_equal, Q, S, sessions_equal, S);
  }
}

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "mma") {
    // mma_chunk_kernel against the plugin's launch: Qwen3-8B's heads (shape C) and SmolLM2's,
    // decode steps and 16-row verifies at 1,024 and 256 cells, 1, 8 and 32 sessions, C's draft
    // block, bfloat16 once; then the invariances
    const int shapes[][3] = {{1, 1, 1024}, {1, 16, 1024}, {8, 1, 1024}, {8, 16, 1024},
                             {1, 1, 256}, {1, 16, 256}, {32, 1, 1024}};
    for (const auto& sqn : shapes) {
      compare_paths<__half>(sqn[0], sqn[1], sqn[2], 32, 8, 128, 50);
      compare_paths<__half>(sqn[0], sqn[1], sqn[2], 9, 3, 64, 50);
    }
    compare_paths<__half>(1, 16, 1024, 32, 8, 128, 50, 0);  // C's draft block
    compare_paths<__nv_bfloat16>(1, 16, 1024, 32, 8, 128, 50);
    check_invariance<__half>(16, 1024, 32, 8, 128, 4);
    check_invariance<__half>(16, 256, 9, 3, 64, 4);
    check_invariance<__half>(1, 1024, 32, 8, 128, 8);
    check_invariance<__nv_bfloat16>(16, 1024, 32, 8, 128, 2);
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "pair") {
    // the gpu_bench.py kernels shapes at 256 cells (3 chunks): SmolLM2's heads (A) and Qwen3-8B's
    // (B), one row and a 16-row verify, and A's decode at 8 sessions
    run<__half>(1, 1, 256, 9, 3, 64, 0, 0, 200, true);
    run<__half>(1, 16, 256, 9, 3, 64, 0, 0, 200, true);
    run<__half>(8, 1, 256, 9, 3, 64, 0, 0, 200, true);
    run<__half>(1, 1, 256, 32, 8, 128, 0, 0, 200, true);
    run<__half>(1, 16, 256, 32, 8, 128, 0, 0, 100, true);
    run<__half>(1, 1, 128, 9, 3, 64, 0, 0, 200, true);  // 2 chunks
    run<__half>(1, 1, 500, 9, 3, 64, 0, 0, 200, true);  // 4 chunks
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "verify") {
    // verify-shaped steps of SmolLM2's heads at 1024 cells: the launch's tiling, then 3 heads a
    // block with each row count (the hashes must all agree within a shape)
    const int shapes[][2] = {{1, 8}, {1, 16}, {2, 8}, {4, 8}, {8, 8}, {8, 16}};
    for (const auto& sq : shapes) {
      run<__half>(sq[0], sq[1], 1024, 9, 3, 64, 0, 0, 100);
      for (int rows = 1; rows <= 5 && rows <= sq[1]; ++rows)
        run<__half>(sq[0], sq[1], 1024, 9, 3, 64, 3, rows, 100);
    }
    return 0;
  }
  if (argc > 1 && std::string(argv[1]) == "verify-qwen") {
    // verify-shaped steps of Qwen3-8B's heads (32 query heads over 8 kv heads of 128) at 1024
    // cells, one session and eight: the launch's tiling, then every tiling it could choose
    // (heads 1, 2 or 4 a block, each row count); the hashes must all agree within a shape
    const int sessions[] = {1, 8};
    for (const int S : sessions) {
      run<__half>(S, 16, 1024, 32, 8, 128, 0, 0, 50);
      for (int heads = 1; heads <= 4; heads *= 2)
        for (int rows = 1; rows <= kMaxRows && rows * heads <= kMaxPairs; ++rows)
          run<__half>(S, 16, 1024, 32, 8, 128, heads, rows, 50);
    }
    return 0;
  }
  // A decode b1, b8, b32; A verify 8x16; B decode b1, b8 (and b1 with 2 and 1 heads a block, b2,
  // b4); A prompts; with the tile heuristic and forced
  run<__half>(1, 1, 1024, 9, 3, 64, 0, 0, 200);
  run<__half>(1, 1, 1024, 9, 3, 64, 1, 1, 200);
  run<__half>(1, 1, 128, 9, 3, 64, 1, 1, 200);
  run<__half>(8, 1, 1024, 9, 3, 64, 0, 0, 200);
  run<__half>(8, 1, 1024, 9, 3, 64, 3, 1, 200);  // A decode b8 with 3 heads a block
  run<__half>(32, 1, 1024, 9, 3, 64, 0, 0, 200);
  run<__half>(8, 16, 1024, 9, 3, 64, 0, 0, 100);
  run<__half>(8, 16, 1024, 9, 3, 64, 1, 1, 100);
  run<__half>(1, 1, 1024, 32, 8, 128, 0, 0, 200);
  run<__half>(8, 1, 1024, 32, 8, 128, 0, 0, 200);
  run<__half>(1, 1, 1024, 32, 8, 128, 2, 1, 200);  // B decode b1 with 2 and 1 heads a block
  run<__half>(1, 1, 1024, 32, 8, 128, 1, 1, 200);
  run<__half>(2, 1, 1024, 32, 8, 128, 0, 0, 200);  // B decode b2, b4
  run<__half>(4, 1, 1024, 32, 8, 128, 0, 0, 200);
  run<__half>(8, 256, 256, 9, 3, 64, 0, 0, 20);
  // float32, whose rows are twice as wide (the largest staging buffer at head size 128)
  run<float>(1, 1, 1024, 32, 8, 128, 0, 0, 100);
  run<float>(8, 16, 1024, 9, 3, 64, 0, 0, 50);
  return 0;
}
