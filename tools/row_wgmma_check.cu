// Check and time RowMatMul's prompt kernels without ONNX Runtime's libraries: this file includes
// the plugin's source (cellspec/plugins/cell_attention.cu; only ONNX Runtime's headers needed)
// and calls its launchers directly. For each shape, the rows in blocks of 64 (row_matmul_kernel's
// 16-row tiles: the rounding of a row alone, as the GPU tests establish) are the reference, and
// every prompt tiling (CELLSPEC_ROW_WIDE = g: row_wgmma_kernel, 4, 2, 0) must give its bits
// exactly; then each tiling is timed (CUDA events, 20 launches after 3). RowMatMul untiled and
// tiled, RowMatMulSwiGlu untiled. One JSON line per case; exit status 1 on any mismatch. Where
// cuBLAS can be loaded (libcublas.so.13 or .12 on the library path; opened at run time, so no
// cuBLAS is needed to build), the same product through cublasGemmEx (float16 in and out, float32
// accumulation; for SwiGlu the gate and up GEMM alone) is timed beside them ("cublas" line, its
// largest difference from the reference relative to the reference's largest value).
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a -DCELLSPEC_WGMMA=1 \
//     -I"$CELLSPEC_ORT_INCLUDE" tools/row_wgmma_check.cu -o /tmp/row_wgmma_check -ldl \
//     && /tmp/row_wgmma_check
#include "../cellspec/plugins/cell_attention.cu"

#include <dlfcn.h>

#include <cmath>
#include <cstdio>
#include <random>

#include "cuda_check.cuh"

namespace {

#define CHECK_CUDA(x) CUDA_CHECK(x, 2)

// cublasGemmEx by dlopen (the API's values: CUBLAS_OP_T 1, CUBLAS_OP_N 0, CUDA_R_16F 2,
// CUBLAS_COMPUTE_32F 68, CUBLAS_GEMM_DEFAULT -1)
using GemmEx = int (*)(void*, int, int, int, int, int, const void*, const void*, int, int,
                       const void*, int, int, const void*, void*, int, int, int, int);
struct Cublas {
  void* handle = nullptr;
  GemmEx gemm = nullptr;
};

Cublas open_cublas() {
  Cublas c;
  for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
    void* lib = dlopen(name, RTLD_NOW | RTLD_GLOBAL);
    if (!lib) continue;
    auto create = reinterpret_cast<int (*)(void**)>(dlsym(lib, "cublasCreate_v2"));
    c.gemm = reinterpret_cast<GemmEx>(dlsym(lib, "cublasGemmEx"));
    if (create && c.gemm && create(&c.handle) == 0) {
      std::printf("# cuBLAS: %s\n", name);
      return c;
    }
    c = Cublas{};
  }
  std::printf("# cuBLAS: not found (%s)\n", dlerror());
  return c;
}

// y [rows, n] = x [rows, K] . w [n, K]^T, all row-major: column-major y^T = (w as K x n)^T x^T
int cublas_product(const Cublas& c, const __half* x, const __half* w, int rows, int K, int n,
                   __half* y) {
  const float one = 1.f, zero = 0.f;
  return c.gemm(c.handle, 1, 0, n, rows, K, &one, w, 2, K, x, 2, K, &zero, y, 2, n, 68, -1);
}

// w [sets N, K] in the ops' tiled layout: [N / 8, K / 32, sets, 8, 32]
std::vector<__half> tiled_layout(const std::vector<__half>& w, int sets, int N, int K) {
  std::vector<__half> out(w.size());
  for (int set = 0; set < sets; ++set)
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < K; ++k)
        out[((((static_cast<int64_t>(n / 8) * (K / 32) + k / 32) * sets + set) * 8 + n % 8) * 32) +
            k % 32] = w[(static_cast<int64_t>(set) * N + n) * K + k];
  return out;
}

template <int kKind>
int check(const char* name, int rows, int K, int N, bool tiled, std::mt19937& rng,
          const Cublas& cublas) {
  constexpr int sets = kKind == kRowSwiGlu ? 2 : 1;
  std::normal_distribution<float> normal;
  std::vector<__half> x(static_cast<size_t>(rows) * K), w(static_cast<size_t>(sets) * N * K);
  for (auto& v : x) v = __float2half(normal(rng));
  for (auto& v : w) v = __float2half(normal(rng) / std::sqrt(static_cast<float>(K)));
  if (tiled) w = tiled_layout(w, sets, N, K);
  __half *dx, *dw, *dy;
  const size_t y_count = static_cast<size_t>(rows) * N;
  CHECK_CUDA(cudaMalloc(&dx, x.size() * 2));
  CHECK_CUDA(cudaMalloc(&dw, w.size() * 2));
  CHECK_CUDA(cudaMalloc(&dy, y_count * sets * 2));  // sets: room for cuBLAS's gate and up
  CHECK_CUDA(cudaMemcpy(dx, x.data(), x.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dw, w.data(), w.size() * 2, cudaMemcpyHostToDevice));
  prepare_row_wide<__half, kKind>();
  auto run = [&](const char* setting) {
    setenv("CELLSPEC_ROW_WIDE", setting, 1);
    launch_row_matmul<__half, kKind>(dx, dw, rows, K, N, dy, true, tiled, nullptr);
  };
  auto result = [&] {
    CHECK_CUDA(cudaDeviceSynchronize());
    std::vector<uint16_t> y(y_count);
    CHECK_CUDA(cudaMemcpy(y.data(), dy, y_count * 2, cudaMemcpyDeviceToHost));
    return y;
  };
  // the reference: blocks of at most 64 rows (row_matmul_kernel's decode/verify tiles)
  CHECK_CUDA(cudaMemset(dy, 0xff, y_count * 2));
  for (int r = 0; r < rows; r += 64)
    launch_row_matmul<__half, kKind>(dx + static_cast<int64_t>(r) * K, dw, std::min(64, rows - r),
                                     K, N, dy + static_cast<int64_t>(r) * N, true, tiled, nullptr);
  const std::vector<uint16_t> want = result();
  int failures = 0;
  auto time_launches = [&](auto&& launch) {
    cudaEvent_t start, stop;
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&stop));
    for (int i = 0; i < 3; ++i) launch();
    CHECK_CUDA(cudaEventRecord(start));
    for (int i = 0; i < 20; ++i) launch();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0.f;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaEventDestroy(start));
    CHECK_CUDA(cudaEventDestroy(stop));
    return ms / 20;
  };
  for (const char* setting : {"g", "4", "2", "0", "choice"}) {
    CHECK_CUDA(cudaMemset(dy, 0xff, y_count * 2));
    run(setting);
    const std::vector<uint16_t> got = result();
    int64_t differing = 0;
    for (size_t i = 0; i < y_count; ++i) differing += got[i] != want[i];
    const float ms = time_launches([&] { run(setting); });
    std::printf("{\"op\": \"%s\", \"rows\": %d, \"K\": %d, \"N\": %d, \"tiled\": %s, "
                "\"setting\": \"%s\", \"differing\": %lld, \"of\": %zu, \"us\": %.1f, "
                "\"tflops\": %.0f}\n",
                name, rows, K, N, tiled ? "true" : "false", setting,
                static_cast<long long>(differing), y_count, 1e3 * ms,
                2.0 * rows * K * N * sets / (1e-3 * ms) / 1e12);
    std::fflush(stdout);
    failures += differing != 0;
    unsetenv("CELLSPEC_ROW_WIDE");
  }
  if (cublas.gemm && kKind == kRowPlain && !tiled) {
    // the same product (a plain RowMatMul's weights are cuBLAS's layout); its rounding differs
    CHECK_CUDA(cudaMemset(dy, 0xff, y_count * 2));
    const int status = cublas_product(cublas, dx, dw, rows, K, N, dy);
    const std::vector<uint16_t> got = result();
    float largest = 0.f, worst = 0.f;
    for (size_t i = 0; i < y_count; ++i) {
      const float a = __half2float(__ushort_as_half(got[i]));
      const float b = __half2float(__ushort_as_half(want[i]));
      largest = std::fmax(largest, std::fabs(b));
      worst = std::fmax(worst, std::fabs(a - b));
    }
    const float ms = time_launches([&] { cublas_product(cublas, dx, dw, rows, K, N, dy); });
    std::printf("{\"op\": \"%s\", \"rows\": %d, \"K\": %d, \"N\": %d, \"setting\": \"cublas\", "
                "\"status\": %d, \"relative_difference\": %.2e, \"us\": %.1f, \"tflops\": %.0f}\n",
                name, rows, K, N, status, worst / largest, 1e3 * ms,
                2.0 * rows * K * N / (1e-3 * ms) / 1e12);
  } else if (cublas.gemm) {
    // tiled or two sets: the GEMM of the same size on the buffers as they are (time only)
    const float ms = time_launches([&] {
      cublas_product(cublas, dx, dw, rows, K, N * sets, reinterpret_cast<__half*>(dy));
    });
    std::printf("{\"op\": \"%s\", \"rows\": %d, \"K\": %d, \"N\": %d, \"setting\": \"cublas\", "
                "\"time_only\": true, \"us\": %.1f, \"tflops\": %.0f}\n",
                name, rows, K, N * sets, 1e3 * ms, 2.0 * rows * K * N * sets / (1e-3 * ms) / 1e12);
  }
  CHECK_CUDA(cudaFree(dx));
  CHECK_CUDA(cudaFree(dw));
  CHECK_CUDA(cudaFree(dy));
  return failures;
}

}  // namespace

int main() {
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s sm_%d%d, wgmma built: %d\n", prop.name, prop.major, prop.minor,
              wgmma_built() ? 1 : 0);
  const Cublas cublas = open_cublas();
  std::mt19937 rng(20261206);
  int failures = 0;
  // the GPU tests' shapes (runs of K 8, 8, 4, 1; K 1,544 ends in a part chunk), then shape B's
  // projections (Qwen3-8B: qkv 4,096 x 6,144, gate/up 4,096 x 2 x 12,288, down 12,288 x 4,096)
  failures += check<kRowPlain>("RowMatMul", 300, 4096, 1024, false, rng, cublas);
  failures += check<kRowPlain>("RowMatMul", 200, 1544, 576, false, rng, cublas);
  failures += check<kRowPlain>("RowMatMul", 129, 576, 6144, true, rng, cublas);
  failures += check<kRowSwiGlu>("RowMatMulSwiGlu", 130, 576, 8192, false, rng, cublas);
  for (int rows : {256, 2048}) {
    failures += check<kRowPlain>("RowMatMul", rows, 4096, 6144, true, rng, cublas);
    failures += check<kRowSwiGlu>("RowMatMulSwiGlu", rows, 4096, 12288, false, rng, cublas);
    failures += check<kRowPlain>("RowMatMul", rows, 12288, 4096, false, rng, cublas);
  }
  std::printf("# failures: %d\n", failures);
  return failures ? 1 : 0;
}
