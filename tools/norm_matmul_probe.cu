// Probe: what would a layer's two RMS norms save if each ran inside the projection that reads
// it? Today a layer on `ort-cuda` runs ONNX Runtime's SkipSimplifiedLayerNormalization (the
// residual add and the norm) before the q, k, v projection and again before gate/up, each its own
// kernel that takes no part in programmatic dependent launch (PDL), between RowMatMul kernels
// that do. Here the decode path of RowMatMul (row_matmul_kernel's one row tile: tiled weights,
// 4 chunks loaded ahead, plain outputs, float16) runs a layer's four projections (A: SmolLM2's
// shapes, 30 layers; B: Qwen3-8B's, 8 layers; each layer its own weights) in three forms:
//   norm   a norm kernel before qkv and gate/up, launched plainly (as ONNX Runtime's is);
//   pdl    the same norm kernel taking part in PDL (a plugin norm would);
//   fused  the norm in the projection: each block computes its rows' 1 / rms (one warp a row,
//          a fixed order) and normalizes x as it loads it; its first tile's warps write the
//          residual sum.
// The three give the same bits (checked: the same per-row function, the same roundings). Each
// form's layers are captured in one CUDA graph and replayed; prints us a layer and ms a step.
// The plugin's source is included (only ONNX Runtime's headers needed, as for
// tools/row_wgmma_check.cu), so the PDL calls, the mma, kRowWarps, ROW_LOADS and row_slices are
// the plugin's own.
//   nvcc -std=c++17 -O3 -arch=sm_90 -I"$CELLSPEC_ORT_INCLUDE" tools/norm_matmul_probe.cu \
//     -o /tmp/norm_probe && /tmp/norm_probe
// Exit status 1: a CUDA call failed; 2: the forms' outputs differ.
#include "../cellspec/plugins/cell_attention.cu"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cuda_check.cuh"

#define CHECK(x) CUDA_CHECK(x, 1)

constexpr int kLoads = ROW_LOADS;
constexpr float kEps = 1e-5f;

// the residual sum of 8 values: half(h + res), elementwise
__device__ __forceinline__ uint4 add8(uint4 a, uint4 b) {
  uint4 out;
  const __half* x = reinterpret_cast<const __half*>(&a);
  const __half* y = reinterpret_cast<const __half*>(&b);
  __half* s = reinterpret_cast<__half*>(&out);
#pragma unroll
  for (int e = 0; e < 8; ++e) s[e] = __float2half_rn(__half2float(x[e]) + __half2float(y[e]));
  return out;
}

// 8 summed values normalized: half(s * inv * gamma)
__device__ __forceinline__ uint4 scale8(uint4 sum, uint4 gamma, float inv) {
  uint4 out;
  const __half* s = reinterpret_cast<const __half*>(&sum);
  const __half* g = reinterpret_cast<const __half*>(&gamma);
  __half* o = reinterpret_cast<__half*>(&out);
#pragma unroll
  for (int e = 0; e < 8; ++e)
    o[e] = __float2half_rn(__half2float(s[e]) * inv * __half2float(g[e]));
  return out;
}

// 1 / rms of row r's residual sum, by one warp, in a fixed order: lane l adds the squares of
// k = 256 j + 8 l + e (e, then j, ascending), then the lanes' sums by xor butterfly (every lane
// gets the same bits). K a multiple of 8.
__device__ float row_inv_rms(const __half* h, const __half* res, int r, int K) {
  const int lane = threadIdx.x & 31;
  float acc = 0.0f;
  for (int k = 8 * lane; k < K; k += 256) {
    const int64_t at = static_cast<int64_t>(r) * K + k;
    const uint4 s = add8(*reinterpret_cast<const uint4*>(h + at),
                         *reinterpret_cast<const uint4*>(res + at));
    const __half* v = reinterpret_cast<const __half*>(&s);
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float f = __half2float(v[e]);
      acc += f * f;
    }
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, offset);
  return rsqrtf(acc / static_cast<float>(K) + kEps);
}

// the standalone norm: one warp a row; x = normalized sum, sum_out = the residual sum
template <bool kPdl>
__global__ void __launch_bounds__(256) norm_kernel(const __half* __restrict__ h,
                                                   const __half* __restrict__ res,
                                                   const __half* __restrict__ gamma, int rows,
                                                   int K, __half* __restrict__ x,
                                                   __half* __restrict__ sum_out) {
  if constexpr (kPdl) {
    allow_dependents();
    wait_for_predecessor();
  }
  const int lane = threadIdx.x & 31, r = blockIdx.x * 8 + threadIdx.x / 32;
  if (r >= rows) return;
  const float inv = row_inv_rms(h, res, r, K);
  for (int k = 8 * lane; k < K; k += 256) {
    const int64_t at = static_cast<int64_t>(r) * K + k;
    const uint4 s = add8(*reinterpret_cast<const uint4*>(h + at),
                         *reinterpret_cast<const uint4*>(res + at));
    *reinterpret_cast<uint4*>(sum_out + at) = s;
    *reinterpret_cast<uint4*>(x + at) =
        scale8(s, *reinterpret_cast<const uint4*>(gamma + k), inv);
  }
}

// row_matmul_kernel's one-tile decode path over tiled weights [N / 8, K / 32, 8, 32], PDL as its
// kOverlap build (allow, prefetch the first loads' weights, wait). kNorm: x is h + res
// normalized by gamma here (see the file's comment); else x is read as it is (h).
template <int kSlices, bool kNorm>
__global__ void __launch_bounds__(32 * kRowWarps)
    row_kernel(const __half* __restrict__ h, const __half* __restrict__ res,
               const __half* __restrict__ gamma, const __half* __restrict__ w, int rows, int K,
               int N, __half* __restrict__ y, __half* __restrict__ sum_out) {
  __shared__ float sums[kSlices > 1 ? kRowWarps : 1][4][32];
  __shared__ float inv_rms[16];
  const int lane = threadIdx.x & 31, warp = threadIdx.x / 32, slice = warp % kSlices;
  const int g = lane >> 2, t = lane & 3;
  const int tile = blockIdx.y * (kRowWarps / kSlices) + warp / kSlices;
  const int n0 = tile * 8;
  const bool has_n = n0 < N;
  const int chunks = K / 32;
  const int begin = slice * chunks / kSlices, end = (slice + 1) * chunks / kSlices;
  const __half* weight = w + static_cast<int64_t>(tile) * chunks * 256 + g * 32 + 8 * t;
  allow_dependents();
  for (int u = 0; u < kLoads; ++u)
    if (begin + u < end && has_n) prefetch_l2(weight + (begin + u) * 256);
  wait_for_predecessor();
  const bool writes_sum = kNorm && blockIdx.y == 0 && warp / kSlices == 0;
  if constexpr (kNorm) {
    for (int r = warp; r < 16 && r < rows; r += kRowWarps) {
      const float inv = row_inv_rms(h, res, r, K);
      if (lane == 0) inv_rms[r] = inv;
    }
    __syncthreads();
  }
  float acc[4] = {};
  const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
  for (int base = begin; base < end; base += kLoads) {
    uint4 wv[kLoads], xv[kLoads][2];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const int c = base + u, k = c * 32 + 8 * t;
      const bool in_k = c < end;
      wv[u] = in_k && has_n ? *reinterpret_cast<const uint4*>(weight + c * 256) : zero;
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int r = 8 * half + g;
        const int64_t at = static_cast<int64_t>(r) * K + k;
        if (!(in_k && r < rows)) {
          xv[u][half] = zero;
        } else if constexpr (kNorm) {
          const uint4 s = add8(*reinterpret_cast<const uint4*>(h + at),
                               *reinterpret_cast<const uint4*>(res + at));
          if (writes_sum) *reinterpret_cast<uint4*>(sum_out + at) = s;
          xv[u][half] = scale8(s, *reinterpret_cast<const uint4*>(gamma + k), inv_rms[r]);
        } else {
          xv[u][half] = *reinterpret_cast<const uint4*>(h + at);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      if (base + u >= end) break;
      const uint4 lo = xv[u][0], hi = xv[u][1], b = wv[u];
      mma_16816<__half>(acc, lo.x, hi.x, lo.y, hi.y, b.x, b.y);
      mma_16816<__half>(acc, lo.z, hi.z, lo.w, hi.w, b.z, b.w);
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

using RowKernel = void (*)(const __half*, const __half*, const __half*, const __half*, int, int,
                           int, __half*, __half*);

template <bool kNorm>
RowKernel pick(int slices) {
  return slices == 1   ? row_kernel<1, kNorm>
         : slices == 2 ? row_kernel<2, kNorm>
         : slices == 4 ? row_kernel<4, kNorm>
                       : row_kernel<8, kNorm>;
}

// a kernel launch on `stream`, with PDL's attribute where `pdl`
template <typename... Params, typename... Args>
void launch(bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
            Args... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl ? 1 : 0;
  CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

struct Proj {
  int K, N;
};

// device memory of a shape's layers: each layer's 4 tiled weights and gamma pair, the step's
// activations
struct Model {
  int layers, K, I;
  Proj qkv, o, gate_up, down;
  std::vector<__half*> w;  // layer * 4 + projection
  std::vector<__half*> gamma;  // layer * 2 + norm
  __half *h, *res, *x, *q, *attn, *h2, *res2, *gu, *act, *h3;
};

uint32_t state = 12345u;
float rnd() {
  state = state * 1664525u + 1013904223u;
  return static_cast<float>((state >> 8) & 0xffff) / 65536.0f - 0.5f;
}

__half* random_device(int64_t count, float scale) {
  std::vector<__half> host(count);
  for (auto& v : host) v = __float2half(rnd() * scale);
  __half* device;
  CHECK(cudaMalloc(&device, count * 2));
  CHECK(cudaMemcpy(device, host.data(), count * 2, cudaMemcpyHostToDevice));
  return device;
}

Model make_model(int layers, int K, int qkv_n, int I) {
  Model m{layers, K, I, {K, qkv_n}, {K, K}, {K, 2 * I}, {I, K}, {}, {}};
  const int kRowsMax = 16;
  for (int l = 0; l < layers; ++l) {
    for (const Proj& p : {m.qkv, m.o, m.gate_up, m.down})  // (tiled or not: random either way)
      m.w.push_back(random_device(static_cast<int64_t>(p.K) * p.N, 0.05f));
    for (int n = 0; n < 2; ++n) {
      std::vector<__half> host(K);
      for (auto& v : host) v = __float2half(1.0f + rnd() * 0.2f);
      __half* device;
      CHECK(cudaMalloc(&device, K * 2));
      CHECK(cudaMemcpy(device, host.data(), K * 2, cudaMemcpyHostToDevice));
      m.gamma.push_back(device);
    }
  }
  m.h = random_device(kRowsMax * K, 2.0f);
  m.res = random_device(kRowsMax * K, 2.0f);
  m.attn = random_device(kRowsMax * K, 1.0f);
  m.act = random_device(static_cast<int64_t>(kRowsMax) * I, 1.0f);
  for (__half** p : {&m.x, &m.h2, &m.res2, &m.h3})
    CHECK(cudaMalloc(p, kRowsMax * K * 2));
  CHECK(cudaMalloc(&m.q, static_cast<int64_t>(kRowsMax) * qkv_n * 2));
  CHECK(cudaMalloc(&m.gu, static_cast<int64_t>(kRowsMax) * 2 * I * 2));
  return m;
}

// one projection of `rows` rows; form 0 norm, 1 pdl, 2 fused; `norm`: the projection reads a
// norm's output (qkv: gamma 0 of h and res; gate/up: gamma 1 of h2 and res2)
void project(const Model& m, int layer, int which, int form, int rows, cudaStream_t stream) {
  const Proj p = which == 0 ? m.qkv : which == 1 ? m.o : which == 2 ? m.gate_up : m.down;
  const bool normed = which == 0 || which == 2;
  const __half* h = which == 0 ? m.h : m.h2;
  const __half* res = which == 0 ? m.res : m.res2;
  __half* sum = which == 0 ? m.h2 + 0 : m.h3;  // (any buffer: only the timing and bits matter)
  const __half* gamma = m.gamma[layer * 2 + (which == 2)];
  const __half* w = m.w[layer * 4 + which];
  __half* y = which == 0 ? m.q : which == 1 ? m.res2 : which == 2 ? m.gu : m.h;
  const int slices = row_slices(p.K, p.N), per_block = kRowWarps / slices;
  const dim3 grid(1, ((p.N + 7) / 8 + per_block - 1) / per_block), block(32 * kRowWarps);
  if (normed && form < 2) {
    launch(form == 1, form == 1 ? norm_kernel<true> : norm_kernel<false>,
           dim3((rows + 7) / 8), dim3(256), stream, h, res, gamma, rows, p.K, m.x, sum);
    launch(true, pick<false>(slices), grid, block, stream, static_cast<const __half*>(m.x),
           res, gamma, w, rows, p.K, p.N, y, sum);
  } else if (normed) {
    launch(true, pick<true>(slices), grid, block, stream, h, res, gamma, w, rows, p.K, p.N, y,
           sum);
  } else {
    const __half* in = which == 1 ? m.attn : m.act;
    launch(true, pick<false>(slices), grid, block, stream, in, res, gamma, w, rows, p.K, p.N, y,
           sum);
  }
}

int main() {
  struct Shape {
    const char* name;
    int layers, K, qkv_n, I;
  } shapes[] = {{"A", 30, 576, 960, 1536}, {"B", 8, 4096, 6144, 12288}};
  const char* forms[] = {"norm", "pdl", "fused"};
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int status = 0;
  std::printf("%-6s %5s %10s %10s %10s   (us a layer; a step's ms in brackets)\n", "shape",
              "rows", forms[0], forms[1], forms[2]);
  for (auto& s : shapes) {
    Model m = make_model(s.layers, s.K, s.qkv_n, s.I);
    for (int rows : {1, 8, 16}) {
      // bits: one layer's qkv and gate/up outputs in every form
      std::vector<uint16_t> first;
      for (int form = 0; form < 3; ++form) {
        project(m, 0, 0, form, rows, stream);
        project(m, 0, 2, form, rows, stream);
        CHECK(cudaStreamSynchronize(stream));
        std::vector<uint16_t> out(static_cast<int64_t>(rows) * (s.qkv_n + 2 * s.I));
        CHECK(cudaMemcpy(out.data(), m.q, static_cast<int64_t>(rows) * s.qkv_n * 2,
                         cudaMemcpyDeviceToHost));
        CHECK(cudaMemcpy(out.data() + static_cast<int64_t>(rows) * s.qkv_n, m.gu,
                         static_cast<int64_t>(rows) * 2 * s.I * 2, cudaMemcpyDeviceToHost));
        if (first.empty()) {
          first = out;
        } else if (std::memcmp(first.data(), out.data(), out.size() * 2) != 0) {
          std::printf("[%s rows %d: %s differs from %s]\n", s.name, rows, forms[form], forms[0]);
          status = 2;
        }
      }
      std::printf("%-6s %5d", s.name, rows);
      for (int form = 0; form < 3; ++form) {
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
        for (int layer = 0; layer < s.layers; ++layer)
          for (int which = 0; which < 4; ++which) project(m, layer, which, form, rows, stream);
        CHECK(cudaStreamEndCapture(stream, &graph));
        CHECK(cudaGraphInstantiate(&exec, graph, 0));
        for (int i = 0; i < 3; ++i) CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaStreamSynchronize(stream));
        cudaEvent_t a, b;
        CHECK(cudaEventCreate(&a));
        CHECK(cudaEventCreate(&b));
        const int kLaunches = 50;
        CHECK(cudaEventRecord(a, stream));
        for (int i = 0; i < kLaunches; ++i) CHECK(cudaGraphLaunch(exec, stream));
        CHECK(cudaEventRecord(b, stream));
        CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        const float step = ms / kLaunches;
        std::printf(" %6.2f [%.3f]", 1e3f * step / s.layers, step);
        CHECK(cudaGraphExecDestroy(exec));
        CHECK(cudaGraphDestroy(graph));
        CHECK(cudaEventDestroy(a));
        CHECK(cudaEventDestroy(b));
      }
      std::printf("\n");
    }
  }
  return status;
}
