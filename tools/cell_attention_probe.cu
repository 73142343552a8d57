// Times cellspec's attention kernels (cellspec/plugins/cell_attention.cu) alone, with CUDA
// events, no ONNX Runtime session: chunk_kernel and combine_kernel per launch for the decode,
// verify and prompt shapes of bench/NOTES.md (SmolLM2 and Qwen3-8B heads, 1024 cells), with the
// launch's own tiling and with one row and one head per block. Needs a GPU, nvcc and ONNX
// Runtime's C++ API headers (the .cu includes them):
//
//   nvcc -std=c++17 -O3 -arch=native -I"$CELLSPEC_ORT_INCLUDE" tools/cell_attention_probe.cu \
//       -o /tmp/probe && /tmp/probe
#include "../cellspec/plugins/cell_attention.cu"
#include <cstdio>
#include <cstdlib>
#include <vector>

template <typename T> T from_float_host(float x);
template <> float from_float_host<float>(float x) { return x; }
template <> __half from_float_host<__half>(float x) { return __float2half(x); }

template <typename T>
void run(int S, int Q, int N, int H, int KV, int D, int heads, int rows, int reps) {
  const int cells = S * N + 64;
  std::vector<T> host_pool((size_t)cells * KV * D);
  for (auto& x : host_pool) x = from_float_host<T>(0.01f * (rand() % 100 - 50));
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
  cudaMemcpy(v_pool, host_pool.data(), sizeof(T) * host_pool.size(), cudaMemcpyHostToDevice);
  cudaMemset(q, 0, sizeof(T) * S * Q * H * D);
  cudaMemset(k_new, 0, sizeof(T) * S * Q * KV * D);
  cudaMemset(v_new, 0, sizeof(T) * S * Q * KV * D);
  std::vector<int64_t> t((size_t)S * N), pos((size_t)S * Q);
  std::vector<char> m((size_t)S * Q * (N + Q), 0);
  const int length = N - Q - 2;
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
  if (heads > 0) {
    dm.heads = heads; dm.rows = rows; dm.row_tiles = (Q + rows - 1) / rows;
  } else {
    tile(dm);
  }
  cudaMalloc(&partials, sizeof(float) * S * Q * H * dm.chunks * (D + 2));
  cudaMalloc(&out, sizeof(T) * S * Q * H * D);
  const int64_t blocks = dm.S * dm.row_tiles * (dm.H / dm.heads) * dm.chunks;
  cudaEvent_t a, b, c;
  cudaEventCreate(&a); cudaEventCreate(&b); cudaEventCreate(&c);
  for (int w = 0; w < 3; ++w)
    chunk_kernel<T><<<blocks, kChunk>>>(q, k_new, v_new, k_pool, v_pool, table, mask, positions, dm, partials, out);
  cudaEventRecord(a);
  for (int r = 0; r < reps; ++r)
    chunk_kernel<T><<<blocks, kChunk>>>(q, k_new, v_new, k_pool, v_pool, table, mask, positions, dm, partials, out);
  cudaEventRecord(b);
  for (int r = 0; r < reps; ++r)
    combine_kernel<T><<<S * Q * H, D < 128 ? D : 128>>>(partials, dm, out);
  cudaEventRecord(c);
  cudaEventSynchronize(c);
  float chunk_ms, combine_ms;
  cudaEventElapsedTime(&chunk_ms, a, b);
  cudaEventElapsedTime(&combine_ms, b, c);
  printf("S=%d Q=%d N=%d H=%d KV=%d D=%d heads/block=%d rows/block=%d blocks=%lld chunks=%lld: chunk %.2f us, combine %.2f us  (%s)\n",
         S, Q, N, H, KV, D, dm.heads, dm.rows, (long long)blocks, (long long)dm.chunks,
         1e3 * chunk_ms / reps, 1e3 * combine_ms / reps, cudaGetErrorString(cudaGetLastError()));
  cudaFree(q); cudaFree(k_new); cudaFree(v_new); cudaFree(k_pool); cudaFree(v_pool); cudaFree(out);
  cudaFree(table); cudaFree(positions); cudaFree(mask); cudaFree(partials);
}

int main() {
  // A decode b1, b8, b32; A verify 8x16; B decode b1, b8; with the tile heuristic and forced
  run<__half>(1, 1, 1024, 9, 3, 64, 0, 0, 200);
  run<__half>(1, 1, 1024, 9, 3, 64, 1, 1, 200);
  run<__half>(1, 1, 128, 9, 3, 64, 1, 1, 200);
  run<__half>(8, 1, 1024, 9, 3, 64, 0, 0, 200);
  run<__half>(32, 1, 1024, 9, 3, 64, 0, 0, 200);
  run<__half>(8, 16, 1024, 9, 3, 64, 0, 0, 100);
  run<__half>(8, 16, 1024, 9, 3, 64, 1, 1, 100);
  run<__half>(1, 1, 1024, 32, 8, 128, 0, 0, 200);
  run<__half>(8, 1, 1024, 32, 8, 128, 0, 0, 200);
  run<__half>(8, 256, 256, 9, 3, 64, 0, 0, 20);
  return 0;
}
