// Probe: does RowMatMul's one-row step read its weights faster when each warp's loads are one
// contiguous span? row_matmul_kernel (cellspec/plugins/cell_attention.cu) has lane (g, t) of a
// warp load 16 bytes at k = 32 c + 8 t of weight row n0 + g: one load instruction touches 8
// weight rows, 64 bytes of each. Here the same kernel (one row tile, plain outputs, float16)
// reads either that layout ("rows": w [N, K]) or a tiled one ("tiles": w [N / 8, K / 32, 8, 32],
// so that a warp's load of a chunk is 512 contiguous bytes and a run of chunks one span), with
// plain or streaming (ld.global.cs) loads and ROW_LOADS 4 or 8. The arithmetic is the same, so
// every variant's y must equal the first's bit for bit (checked). Each shape's launches are
// captured in one CUDA graph over 8 copies of the weights (the small ones would stay in L2).
//   nvcc -std=c++17 -O3 -arch=sm_90 tools/row_matmul_probe.cu -o /tmp/row_probe && /tmp/row_probe
#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda_check.cuh"

#define CHECK(x) CUDA_CHECK(x, 1)

constexpr int kRowWarps = 8;

__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                    uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

template <bool kStream>
__device__ __forceinline__ uint4 load16(const __half* p) {
  if constexpr (kStream)
    return __ldcs(reinterpret_cast<const uint4*>(p));
  else
    return *reinterpret_cast<const uint4*>(p);
}

template <int kSlices, bool kTiled, bool kStream, int kLoads>
__global__ void __launch_bounds__(32 * kRowWarps)
    row_kernel(const __half* __restrict__ x, const __half* __restrict__ w, int rows, int K, int N,
               __half* __restrict__ y) {
  __shared__ float sums[kSlices > 1 ? kRowWarps : 1][4][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, slice = warp % kSlices;
  const int g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.y * (kRowWarps / kSlices) + warp / kSlices;
  const int n0 = tile * 8, w_row = n0 + g;
  const bool has_n = w_row < N;
  const int chunks = (K + 31) / 32;
  const int begin = slice * chunks / kSlices, end = (slice + 1) * chunks / kSlices;
  float acc[4] = {};
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  for (int base = begin; base < end; base += kLoads) {
    uint4 wv[kLoads], xv[kLoads][2];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int c = base + u, k = c * 32 + 8 * t;
      const bool in_k = c < end && k < K;
      const int64_t at = kTiled ? (static_cast<int64_t>(tile) * chunks + c) * 256 + g * 32 + 8 * t
                                : static_cast<int64_t>(w_row) * K + k;
      wv[u] = in_k && has_n ? load16<kStream>(w + at) : zero;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = 8 * half + g;
        xv[u][half] = in_k && r < rows ? *reinterpret_cast<const uint4*>(
                                             x + static_cast<int64_t>(r) * K + k)
                                       : zero;
      }
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      if (base + u >= end) break;
      const uint4 lo = xv[u][0], hi = xv[u][1], b = wv[u];
      mma(acc, lo.x, hi.x, lo.y, hi.y, b.x, b.y);
      mma(acc, lo.z, hi.z, lo.w, hi.w, b.z, b.w);
    }
  }
  if (kSlices > 1) {
    if (slice > 0)
      for (int i = 0; i < 4; ++i) sums[warp][i][lane] = acc[i];
    __syncthreads();
    if (slice > 0) return;
  }
  for (int i = 0; i < 4; ++i) {
    float total = acc[i];
    for (int run = 1; run < kSlices; ++run) total += sums[kSlices > 1 ? warp + run : 0][i][lane];
    const int r = g + 8 * (i / 2), n = n0 + 2 * t + (i & 1);
    if (r < rows && n < N) y[static_cast<int64_t>(r) * N + n] = __float2half_rn(total);
  }
}

int row_slices(int K, int N) {
  const int tiles = (N + 7) / 8, chunks = (K + 31) / 32;
  int slices = 1;
  while (slices < kRowWarps && tiles * slices < 2048 && 2 * slices <= chunks) slices *= 2;
  return slices;
}

using Kernel = void (*)(const __half*, const __half*, int, int, int, __half*);

template <bool kTiled, bool kStream, int kLoads>
Kernel pick(int slices) {
  return slices == 1   ? row_kernel<1, kTiled, kStream, kLoads>
         : slices == 2 ? row_kernel<2, kTiled, kStream, kLoads>
         : slices == 4 ? row_kernel<4, kTiled, kStream, kLoads>
                       : row_kernel<8, kTiled, kStream, kLoads>;
}

struct Variant {
  const char* name;
  bool tiled;
  Kernel (*get)(int);
};

int main() {
  struct Shape {
    const char* name;
    int K, N;
  } shapes[] = {{"A qkv", 576, 960},       {"A gate_up", 576, 3072},  {"A down", 1536, 576},
                {"A head", 576, 49152},    {"B qkv", 4096, 6144},     {"B o", 4096, 4096},
                {"B gate_up", 4096, 24576}, {"B down", 12288, 4096}, {"B head", 4096, 32000}};
  Variant variants[] = {{"rows", false, pick<false, false, 4>},
                        {"tiles", true, pick<true, false, 4>},
                        {"rows cs", false, pick<false, true, 4>},
                        {"tiles cs", true, pick<true, true, 4>},
                        {"tiles l8", true, pick<true, false, 8>},
                        {"tiles cs l8", true, pick<true, true, 8>}};
  const int kCopies = 8, kRepeats = 20, kRows = 1;
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  std::printf("%-10s %6s %6s %7s", "shape", "K", "N", "MB");
  for (auto& v : variants) std::printf(" %12s", v.name);
  std::printf("   (us a launch; GB/s of the best)\n");
  for (int round = 0; round < 2; ++round)
    for (auto& s : shapes) {
      const int64_t elems = static_cast<int64_t>(s.K) * s.N;
      std::vector<__half> host_w(elems), host_tiled(elems), host_x(static_cast<int64_t>(kRows) * s.K);
      uint32_t state = 12345u + s.K * 7 + s.N;
      auto rnd = [&] {
        state = state * 1664525u + 1013904223u;
        return static_cast<float>((state >> 8) & 0xffff) / 65536.0f - 0.5f;
      };
      for (auto& v : host_w) v = __float2half(rnd() * 0.1f);
      for (auto& v : host_x) v = __float2half(rnd());
      const int chunks = s.K / 32;
      for (int n = 0; n < s.N; ++n)
        for (int k = 0; k < s.K; ++k)
          host_tiled[((static_cast<int64_t>(n / 8) * chunks + k / 32) * 256) + (n % 8) * 32 + k % 32] =
              host_w[static_cast<int64_t>(n) * s.K + k];
      __half *w_rows, *w_tiles, *x, *y;
      CHECK(cudaMalloc(&w_rows, elems * 2 * kCopies));
      CHECK(cudaMalloc(&w_tiles, elems * 2 * kCopies));
      CHECK(cudaMalloc(&x, host_x.size() * 2));
      CHECK(cudaMalloc(&y, static_cast<int64_t>(kRows) * s.N * 2 * kCopies));
      for (int c = 0; c < kCopies; ++c) {
        CHECK(cudaMemcpy(w_rows + c * elems, host_w.data(), elems * 2, cudaMemcpyHostToDevice));
        CHECK(cudaMemcpy(w_tiles + c * elems, host_tiled.data(), elems * 2, cudaMemcpyHostToDevice));
      }
      CHECK(cudaMemcpy(x, host_x.data(), host_x.size() * 2, cudaMemcpyHostToDevice));
      const int slices = row_slices(s.K, s.N), per_block = kRowWarps / slices;
      const dim3 grid(1, ((s.N + 7) / 8 + per_block - 1) / per_block), block(32 * kRowWarps);
      std::vector<uint16_t> first;
      std::printf("%-10s %6d %6d %7.1f", s.name, s.K, s.N, elems * 2 / 1e6);
      float best = 1e30f;
      for (auto& v : variants) {
        Kernel kernel = v.get(slices);
        const __half* w = v.tiled ? w_tiles : w_rows;
        CHECK(cudaMemset(y, 0, static_cast<int64_t>(kRows) * s.N * 2));
        kernel<<<grid, block, 0, stream>>>(x, w, kRows, s.K, s.N, y);
        CHECK(cudaStreamSynchronize(stream));
        std::vector<uint16_t> out(static_cast<int64_t>(kRows) * s.N);
        CHECK(cudaMemcpy(out.data(), y, out.size() * 2, cudaMemcpyDeviceToHost));
        if (first.empty())
          first = out;
        else if (std::memcmp(first.data(), out.data(), out.size() * 2) != 0)
          std::printf(" [%s differs]", v.name);
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        for (int r = 0; r < kRepeats; ++r)
          for (int c = 0; c < kCopies; ++c)
            kernel<<<grid, block, 0, stream>>>(x, w + c * elems, kRows, s.K, s.N,
                                               y + static_cast<int64_t>(c) * kRows * s.N);
        CHECK(cudaStreamEndCapture(stream, &graph));
        CHECK(cudaGraphInstantiate(&exec, graph, 0));
        CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaStreamSynchronize(stream));
        cudaEvent_t a, b;
        CHECK(cudaEventCreate(&a));
        CHECK(cudaEventCreate(&b));
        float total = 0;
        const int kLaunches = 5;
        CHECK(cudaEventRecord(a, stream));
        for (int i = 0; i < kLaunches; ++i) CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaEventRecord(b, stream));
        CHECK(cudaEventSynchronize(b));
        CHECK(cudaEventElapsedTime(&total, a, b));
        const float us = total * 1000.0f / (kLaunches * kRepeats * kCopies);
        best = us < best ? us : best;
        std::printf(" %12.2f", us);
        CHECK(cudaGraphExecDestroy(exec));
        CHECK(cudaGraphDestroy(graph));
      }
      std::printf("   %.0f\n", elems * 2 / (best * 1e3));
      CHECK(cudaFree(w_rows));
      CHECK(cudaFree(w_tiles));
      CHECK(cudaFree(x));
      CHECK(cudaFree(y));
    }
  return 0;
}
