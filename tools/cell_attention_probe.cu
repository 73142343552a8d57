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
double to_double_host(float x) { return x; }
double to_double_host(__half x) { return __half2float(x); }

template <typename T>
std::vector<T> random_values(size_t n) {
  std::vector<T> v(n);
  for (auto& x : v) x = from_float_host<T>(0.01f * (rand() % 100 - 50));
  return v;
}

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

template <typename T>
void run(int S, int Q, int N, int H, int KV, int D, int heads, int rows, int reps,
         bool pair = false) {
  // the inputs a function of the shape alone, so that lines of one shape (other tilings, staged
  // or not, pair_kernel) get the same inputs and must print the same hash
  srand(static_cast<unsigned>(((S * 131 + Q) * 131 + N) * 131 + H * 7 + D));
  const int cells = S * N + 64;
  const std::vector<T> host_pool = random_values<T>((size_t)cells * KV * D);
  const std::vector<T> host_vpool = random_values<T>(host_pool.size());
  const std::vector<T> host_q = random_values<T>((size_t)S * Q * H * D);
  const std::vector<T> host_k = random_values<T>((size_t)S * Q * KV * D);
  const std::vector<T> host_v = random_values<T>(host_k.size());
  T *q, *k_new, *v_new, *k_pool, *v_pool, *out;
  int64_t *table, *positions;
  bool* mask;
  float* partials;
  cudaMalloc(&q, sizeof(T) * S * Q * H * D);
  cudaMalloc(&k_new, sizeof(T) * S * Q * KV * D);
  cudaMalloc(&v_new, sizeof(T) * S * Q * KV * D);
  cudaMalloc(&k_pool, sizeof(T) * host_pool.size());
  cudaMalloc(&v_pool, sizeof(T) * host_pool.size());
  cudaMemcpy(k_pool, host_pool.data(), sizeof(T) * host_pool.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(v_pool, host_vpool.data(), sizeof(T) * host_pool.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(q, host_q.data(), sizeof(T) * host_q.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(k_new, host_k.data(), sizeof(T) * host_k.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(v_new, host_v.data(), sizeof(T) * host_v.size(), cudaMemcpyHostToDevice);
  std::vector<int64_t> t((size_t)S * N), pos((size_t)S * Q);
  std::vector<char> m((size_t)S * Q * (N + Q), 0);
  const int length = std::max(N - Q - 2, 0);  // cells before the new tokens
  for (int s = 0; s < S; ++s) {
    for (int j = 0; j < N; ++j) t[(size_t)s * N + j] = 1 + s * N + j;
    for (int i = 0; i < Q; ++i) {
      pos[(size_t)s * Q + i] = length + i;
      for (int j = 0; j < length; ++j) m[((size_t)s * Q + i) * (N + Q) + j] = 1;
      for (int j = 0; j <= i; ++j) m[((size_t)s * Q + i) * (N + Q) + N + j] = 1;
    }
  }
  cudaMalloc(&table, 8 * t.size());
  cudaMalloc(&positions, 8 * pos.size());
  cudaMalloc(&mask, m.size());
  cudaMemcpy(table, t.data(), 8 * t.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(positions, pos.data(), 8 * pos.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(mask, m.data(), m.size(), cudaMemcpyHostToDevice);
  Dims dm{S, Q, N, H, KV, D, (N + Q + kChunk - 1) / kChunk, 0.125f, 1, 1, 1, 1};
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
  cudaMalloc(&partials, sizeof(float) * S * Q * H * dm.chunks * (D + 2));
  cudaMalloc(&out, sizeof(T) * S * Q * H * D);
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
  std::vector<T> got((size_t)S * Q * H * D);
  cudaMemcpy(got.data(), out, sizeof(T) * got.size(), cudaMemcpyDeviceToHost);
  uint64_t hash = 1469598103934665603ull;  // FNV-1a of the output's bytes
  for (size_t i = 0; i < got.size() * sizeof(T); ++i)
    hash = (hash ^ reinterpret_cast<const unsigned char*>(got.data())[i]) * 1099511628211ull;
  double max_err = 0.0;  // against float64 attention over the cells and new tokens each row sees
  // the inputs as floats once (a host conversion of a __half is a software routine: converted
  // at every use, eight sessions' reference took longer than the probe's time limit)
  auto floats = [](const std::vector<T>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = static_cast<float>(to_double_host(v[i]));
    return f;
  };
  const std::vector<float> f_pool = floats(host_pool), f_vpool = floats(host_vpool),
                           f_q = floats(host_q), f_k = floats(host_k), f_v = floats(host_v);
  std::vector<double> score(N + Q), acc(D);
  for (int s = 0; s < S; ++s)
    for (int i = 0; i < Q; ++i)
      for (int h = 0; h < H; ++h) {
        const int kv = h / (H / KV);
        const float* qr = &f_q[(((size_t)s * Q + i) * H + h) * D];
        auto key = [&](int j) {  // cell slot j < N, else new token j - N
          return j < N ? &f_pool[((size_t)t[(size_t)s * N + j] * KV + kv) * D]
                       : &f_k[(((size_t)s * Q + j - N) * KV + kv) * D];
        };
        auto value = [&](int j) {
          return j < N ? &f_vpool[((size_t)t[(size_t)s * N + j] * KV + kv) * D]
                       : &f_v[(((size_t)s * Q + j - N) * KV + kv) * D];
        };
        double top = -1e300, total = 0.0;
        for (int j = 0; j < N + Q; ++j) {
          if (!m[((size_t)s * Q + i) * (N + Q) + j]) continue;
          double dot = 0.0;
          const float* kr = key(j);
          for (int d = 0; d < D; ++d) dot += static_cast<double>(qr[d]) * kr[d];
          score[j] = dot * dm.scale;
          top = std::max(top, score[j]);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int j = 0; j < N + Q; ++j) {
          if (!m[((size_t)s * Q + i) * (N + Q) + j]) continue;
          const double e = std::exp(score[j] - top);
          total += e;
          const float* vr = value(j);
          for (int d = 0; d < D; ++d) acc[d] += e * vr[d];
        }
        for (int d = 0; d < D; ++d) {
          const double want = acc[d] / total;
          const double have = to_double_host(got[(((size_t)s * Q + i) * H + h) * D + d]);
          max_err = std::max(max_err, std::fabs(have - want));
        }
      }
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
  cudaFree(q); cudaFree(k_new); cudaFree(v_new); cudaFree(k_pool); cudaFree(v_pool); cudaFree(out);
  cudaFree(table); cudaFree(positions); cudaFree(mask); cudaFree(partials);
}

int main(int argc, char** argv) {
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
