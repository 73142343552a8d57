// Probe: can Hopper's warpgroup MMA (wgmma.mma_async m64nNk16, float32 accumulators) stand in for
// RowMatMul's mma.sync m16n8k16 bit for bit? RowMatMul (cellspec/plugins/cell_attention.cu) rounds
// a row the same alone and in a prompt because every row's sums are the same chain of
// 16-product tensor-core steps. A prompt tile on wgmma keeps that promise only if one wgmma k16
// step gives the same float32 as one mma.sync k16 step on the same 16 products and accumulator.
// Three questions, each answered by comparing bits (and, as a check of the layouts, the error
// against a float64 reference computed here on the host):
//   1. mma.sync with the 16 k of a step in another order (the same permutation on both operands):
//      does the order of the slots within a step change the float32 (P1)?
//   2. wgmma m64n64k16 (x from registers, weights from shared memory, no swizzle) against mma.sync
//      with the same slots: the same bits (P2)?
//   3. wgmma m64n8k16 against m64n64k16: does the width of the instruction change anything (P3)?
// Each for float16 and bfloat16, on normal data and on data whose exponents spread over 2^-12 ..
// 2^12 (where an alignment of the products to the largest one would show).
//   nvcc -std=c++17 -O3 -gencode arch=compute_90a,code=sm_90a tools/wgmma_probe.cu \
//     -o /tmp/wgmma_probe && /tmp/wgmma_probe
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "cuda_check.cuh"

#define CHECK(x) CUDA_CHECK(x, 1)

constexpr int kM = 64, kN = 64, kK = 1024;  // x [kM, kK], w [kN, kK], y [kM, kN]

__constant__ int c_perm[16];  // slot j of a step holds k = k0 + c_perm[j]

template <typename T>
__device__ __forceinline__ uint32_t pack(T lo, T hi) {
  uint16_t a, b;
  std::memcpy(&a, &lo, 2);
  std::memcpy(&b, &hi, 2);
  return static_cast<uint32_t>(a) | (static_cast<uint32_t>(b) << 16);
}

// x's fragment of a step for warp `warp` (rows 16 warp + g, + 8), the mma.sync/wgmma A layout
template <typename T>
__device__ __forceinline__ void a_fragment(const T* x, int warp, int k0, uint32_t (&a)[4]) {
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const T* r0 = x + (16 * warp + g) * kK + k0;
  const T* r8 = r0 + 8 * kK;
  a[0] = pack(r0[c_perm[2 * t]], r0[c_perm[2 * t + 1]]);
  a[1] = pack(r8[c_perm[2 * t]], r8[c_perm[2 * t + 1]]);
  a[2] = pack(r0[c_perm[2 * t + 8]], r0[c_perm[2 * t + 9]]);
  a[3] = pack(r8[c_perm[2 * t + 8]], r8[c_perm[2 * t + 9]]);
}

template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                          uint32_t b1) {
  if constexpr (std::is_same<T, __half>::value)
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 4 warps; warp w rows 16 w .. + 16, every output tile of 8, the k16 steps in order
template <typename T>
__global__ void mma_kernel(const T* x, const T* w, float* y) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  for (int tile = 0; tile < kN / 8; ++tile) {
    float d[4] = {0.f, 0.f, 0.f, 0.f};
    const T* wr = w + (tile * 8 + g) * kK;
    for (int k0 = 0; k0 < kK; k0 += 16) {
      uint32_t a[4];
      a_fragment(x, warp, k0, a);
      const uint32_t b0 = pack(wr[k0 + c_perm[2 * t]], wr[k0 + c_perm[2 * t + 1]]);
      const uint32_t b1 = pack(wr[k0 + c_perm[2 * t + 8]], wr[k0 + c_perm[2 * t + 9]]);
      mma_16816<T>(d, a, b0, b1);
    }
    const int r = 16 * warp + g, n = tile * 8 + 2 * t;
    y[r * kN + n] = d[0];
    y[r * kN + n + 1] = d[1];
    y[(r + 8) * kN + n] = d[2];
    y[(r + 8) * kN + n + 1] = d[3];
  }
}

// a shared-memory matrix descriptor, no swizzle: start, leading (k) and stride (n) byte offsets
__device__ __forceinline__ uint64_t descriptor(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint32_t addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  return (static_cast<uint64_t>((addr & 0x3FFFF) >> 4)) |
         (static_cast<uint64_t>(lbo >> 4) << 16) | (static_cast<uint64_t>(sbo >> 4) << 32);
}

#define WG_D8 "{%0, %1, %2, %3}"
#define WG_D64                                                                              \
  "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, " \
  "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define F4(i) "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])

template <typename T, int kWidth>
__device__ __forceinline__ void wgmma_step(float (&d)[kWidth / 2], const uint32_t (&a)[4],
                                           uint64_t desc) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr bool kHalf = std::is_same<T, __half>::value;
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
  if constexpr (kWidth == 8 && kHalf)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 " WG_D8
                 ", {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
                 : F4(0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
  else if constexpr (kWidth == 8)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 " WG_D8
                 ", {%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}\n"
                 : F4(0)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
  else if constexpr (kHalf)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " WG_D64
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : F4(0), F4(4), F4(8), F4(12), F4(16), F4(20), F4(24), F4(28)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
  else
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 " WG_D64
                 ", {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                 : F4(0), F4(4), F4(8), F4(12), F4(16), F4(20), F4(24), F4(28)
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc));
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
  for (int i = 0; i < kWidth / 2; ++i) asm volatile("" : "+f"(d[i])::"memory");  // after the wait
#else
  __trap();
#endif
}

// one warpgroup; every k16 step: the weights' 16 slots of kWidth rows written to shared memory as
// core matrices (8 rows x 16 bytes, 128 bytes each; the two halves of the step's slots 128 bytes
// apart, row groups 256 apart), then one wgmma per kWidth outputs
template <typename T, int kWidth>
__global__ void wgmma_kernel(const T* x, const T* w, float* y) {
  __shared__ __align__(128) T tile_w[kWidth * 16];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  for (int n_base = 0; n_base < kN; n_base += kWidth) {
    float d[kWidth / 2];
    for (int i = 0; i < kWidth / 2; ++i) d[i] = 0.f;
    for (int k0 = 0; k0 < kK; k0 += 16) {
      for (int e = threadIdx.x; e < kWidth * 16; e += blockDim.x) {
        const int n = e / 16, slot = e % 16;
        const int offset = ((n / 8) * 2 + slot / 8) * 64 + (n % 8) * 8 + slot % 8;
        tile_w[offset] = w[(n_base + n) * kK + k0 + c_perm[slot]];
      }
      asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
      __syncthreads();
      uint32_t a[4];
      a_fragment(x, warp, k0, a);
      wgmma_step<T, kWidth>(d, a, descriptor(tile_w, 128, 256));
      __syncthreads();
    }
    // accumulator i: output n_base + 8 (i / 4) + 2 t + i % 2, row 16 warp + g + 8 ((i / 2) % 2)
    for (int i = 0; i < kWidth / 2; ++i) {
      const int r = 16 * warp + g + 8 * ((i / 2) % 2), n = n_base + 8 * (i / 4) + 2 * t + i % 2;
      y[r * kN + n] = d[i];
    }
  }
}

template <typename T>
T from_double(double v);
template <>
__half from_double<__half>(double v) { return __float2half(static_cast<float>(v)); }
template <>
__nv_bfloat16 from_double<__nv_bfloat16>(double v) {
  return __float2bfloat16(static_cast<float>(v));
}
template <typename T>
double to_double(T v);
template <>
double to_double<__half>(__half v) { return __half2float(v); }
template <>
double to_double<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

struct Result {
  double max_rel_to_ref;
  int differing;
};

// a (its errors against the float64 sums) and how many of its outputs differ from b's bits
Result compare(const std::vector<float>& a, const std::vector<float>& b,
               const std::vector<double>& ref, const std::vector<double>& scale) {
  Result r{0.0, 0};
  for (size_t i = 0; i < a.size(); ++i) {
    r.max_rel_to_ref = std::fmax(r.max_rel_to_ref, std::fabs(a[i] - ref[i]) / scale[i]);
    uint32_t ua, ub;
    std::memcpy(&ua, &a[i], 4);
    std::memcpy(&ub, &b[i], 4);
    r.differing += ua != ub;
  }
  return r;
}

template <typename T>
void run(const char* type, bool spread, std::mt19937& rng) {
  std::normal_distribution<double> normal;
  std::uniform_real_distribution<double> exponent(-12.0, 12.0);
  std::vector<T> x(kM * kK), w(kN * kK);
  for (auto* v : {&x, &w})
    for (auto& e : *v)
      e = from_double<T>(spread ? normal(rng) * std::exp2(exponent(rng)) : normal(rng));
  std::vector<double> ref(kM * kN), scale(kM * kN);
  for (int r = 0; r < kM; ++r)
    for (int n = 0; n < kN; ++n) {
      double s = 0, a = 0;
      for (int k = 0; k < kK; ++k) {
        const double p = to_double(x[r * kK + k]) * to_double(w[n * kK + k]);
        s += p;
        a += std::fabs(p);
      }
      ref[r * kN + n] = s;
      scale[r * kN + n] = a > 0 ? a : 1;
    }
  T *dx, *dw;
  float* dy;
  CHECK(cudaMalloc(&dx, x.size() * sizeof(T)));
  CHECK(cudaMalloc(&dw, w.size() * sizeof(T)));
  CHECK(cudaMalloc(&dy, kM * kN * sizeof(float)));
  CHECK(cudaMemcpy(dx, x.data(), x.size() * sizeof(T), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dw, w.data(), w.size() * sizeof(T), cudaMemcpyHostToDevice));
  auto launch = [&](void (*kernel)(const T*, const T*, float*), const int (&perm)[16]) {
    CHECK(cudaMemcpyToSymbol(c_perm, perm, sizeof(perm)));
    CHECK(cudaMemset(dy, 0xff, kM * kN * sizeof(float)));
    kernel<<<1, 128>>>(dx, dw, dy);
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::vector<float> y(kM * kN);
    CHECK(cudaMemcpy(y.data(), dy, y.size() * sizeof(float), cudaMemcpyDeviceToHost));
    return y;
  };
  int identity[16], reversed[16], shuffled[16], halves[16];
  for (int j = 0; j < 16; ++j) identity[j] = j, reversed[j] = 15 - j, halves[j] = (j + 8) % 16;
  std::memcpy(shuffled, identity, sizeof(identity));
  std::shuffle(shuffled, shuffled + 16, rng);
  // RowMatMul's slots: lane t's 16-byte load of k in [8 t, + 8) gives its first four k to slots
  // {2 t, 2 t + 1, 2 t + 8, 2 t + 9} of the chunk's first mma (here: of a 16-k step, k
  // {0..3, 8..11, ...} of a 32-k chunk folded to 16: slot 2 t + i -> 4 t + i,
  // 2 t + 8 + i -> 4 t + 2 + i)
  int rowmatmul[16];
  for (int t = 0; t < 4; ++t)
    for (int i = 0; i < 2; ++i)
      rowmatmul[2 * t + i] = 4 * t + i, rowmatmul[2 * t + 8 + i] = 4 * t + 2 + i;
  const auto m_id = launch(mma_kernel<T>, identity);
  const auto m_rev = launch(mma_kernel<T>, reversed);
  const auto m_shuf = launch(mma_kernel<T>, shuffled);
  const auto m_halves = launch(mma_kernel<T>, halves);
  const auto m_row = launch(mma_kernel<T>, rowmatmul);
  const auto g64 = launch(wgmma_kernel<T, 64>, identity);
  const auto g8 = launch(wgmma_kernel<T, 8>, identity);
  const auto g64_row = launch(wgmma_kernel<T, 64>, rowmatmul);
  const auto g64_shuf = launch(wgmma_kernel<T, 64>, shuffled);
  auto line = [&](const char* what, const std::vector<float>& a, const std::vector<float>& b) {
    const Result r = compare(a, b, ref, scale);
    std::printf("{\"type\": \"%s\", \"data\": \"%s\", \"case\": \"%s\", \"differing\": %d, "
                "\"of\": %d, \"max_rel_to_float64\": %.3e}\n",
                type, spread ? "spread" : "normal", what, r.differing, kM * kN, r.max_rel_to_ref);
  };
  line("P1 mma reversed vs mma", m_rev, m_id);
  line("P1 mma shuffled vs mma", m_shuf, m_id);
  line("P1 mma halves swapped vs mma", m_halves, m_id);
  line("P1 mma rowmatmul slots vs mma", m_row, m_id);
  line("P2 wgmma n64 vs mma", g64, m_id);
  line("P2 wgmma n64 rowmatmul slots vs mma rowmatmul slots", g64_row, m_row);
  line("P2 wgmma n64 shuffled vs mma shuffled", g64_shuf, m_shuf);
  line("P3 wgmma n8 vs wgmma n64", g8, g64);
  CHECK(cudaFree(dx));
  CHECK(cudaFree(dw));
  CHECK(cudaFree(dy));
}

int main() {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# %s sm_%d%d\n", prop.name, prop.major, prop.minor);
  std::mt19937 rng(20261206);
  for (bool spread : {false, true}) {
    run<__half>("float16", spread, rng);
    run<__nv_bfloat16>("bfloat16", spread, rng);
  }
  return 0;
}
