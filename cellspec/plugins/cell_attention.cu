// cellspec.CellAttention*: attention over a sequence's cells, read where they lie in the pools,
// and its own new tokens, for ONNX Runtime's CUDA provider (an ONNX Runtime custom-op library;
// cellspec/plugins/build.py compiles it, cellspec/rewrite.py::cell_attention_for_cuda emits it).
//
// It replaces, per layer, Gather(k_pool, cell_table) + Concat(., k_new), the same for values, and
// the opset-23 Attention over [cells ; new tokens] under attn_mask (decomposed into ~15 standard
// ops on the CUDA provider): two kernels instead of ~19.
//
// inputs:  q [S, Q, H * D], k_new / v_new [S, Q, KV * D], k_pool / v_pool [cells, KV * D] (T),
//          cell_table [S, N] int64, attn_mask [S, 1, Q, N + Q] bool, positions [S, Q] int64
// outputs: out [S, Q, H * D] (T), partials [S * Q * H * chunks * (D + 2)] float32 (scratch)
// attrs:   num_heads, kv_num_heads, scale, by_position (1: see below)
//
// Query head h reads kv head h / (H / KV). Scores, softmax and the weighted sum are float32.
//
// Rounding does not depend on the step's shape. Keys are split into chunks of kChunk by a key
// index: cell column j (= the sequence's position j) is key j; new token i is key N + i, or with
// by_position key positions[s, i] (the target's causal steps, where a row's new tokens sit at
// positions after its cells). One block reduces one (token, head, chunk) in a fixed tree order,
// and chunks combine in index order, skipping empty ones. So a token's output is the same bit for
// bit whichever batch it is in, however many cells the step reads (a padded bucket adds masked
// keys only), and, with by_position, whether a key is still new (a verify) or a cell already (a
// later step): speculation and batching cannot change it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#define ORT_API_MANUAL_INIT
#include "onnxruntime_cxx_api.h"
#undef ORT_API_MANUAL_INIT

namespace {

constexpr int kChunk = 128;  // keys per block, one per thread
constexpr int kMaxHeadDim = kChunk;  // the weighted sum gives each of D lanes a thread

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
};

// tree reduction over the block's kChunk values, the same order every call
template <bool kMax>
__device__ float block_reduce(float* red, float value) {
  const int t = threadIdx.x;
  red[t] = value;
  __syncthreads();
  for (int stride = kChunk / 2; stride > 0; stride >>= 1) {
    if (t < stride) red[t] = kMax ? fmaxf(red[t], red[t + stride]) : red[t] + red[t + stride];
    __syncthreads();
  }
  const float result = red[0];
  __syncthreads();
  return result;
}

// 16 bytes of T as floats: 4 float32 or 8 float16 / bfloat16 (rows are 16-byte aligned when
// D * sizeof(T) is a multiple of 16; Kernel::Compute checks)
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

// one block per (token row, head, chunk): max, sum of exp and the weighted sum of its keys;
// written as the output when the step has one chunk, else as partials for the combine kernel.
// Thread t scores key t; for the weighted sum the threads form kChunk / D groups (D <= kChunk)
// of D lanes, group g summing keys g, g + groups, ... for lane d, the groups then added in order.
template <typename T>
__global__ void __launch_bounds__(kChunk) chunk_kernel(
    const T* __restrict__ q, const T* __restrict__ k_new, const T* __restrict__ v_new,
    const T* __restrict__ k_pool, const T* __restrict__ v_pool,
    const int64_t* __restrict__ cell_table, const bool* __restrict__ mask,
    const int64_t* __restrict__ positions, Dims dm, float* __restrict__ partials,
    T* __restrict__ out) {
  __shared__ float q_row[kMaxHeadDim];
  __shared__ int new_col[kChunk];  // the new token holding the slot's key, -1 none
  __shared__ float red[kChunk];
  __shared__ float weight[kChunk];
  __shared__ const T* value_row[kChunk];
  __shared__ float group_sum[kChunk];

  const int64_t block = blockIdx.x;
  const int64_t c = block % dm.chunks;
  const int64_t h = (block / dm.chunks) % dm.H;
  const int64_t row = block / (dm.chunks * dm.H);  // s * Q + i
  const int64_t s = row / dm.Q;
  const int t = threadIdx.x;
  const int D = static_cast<int>(dm.D);
  const int64_t kv_width = dm.KV * dm.D;
  const int64_t kv_offset = (h / (dm.H / dm.KV)) * dm.D;
  const int64_t first = c * kChunk;
  const bool* mask_row = mask + row * (dm.N + dm.Q);

  for (int d = t; d < D; d += kChunk) q_row[d] = to_float(q[(row * dm.H + h) * dm.D + d]);
  new_col[t] = -1;
  __syncthreads();
  for (int64_t i = t; i < dm.Q; i += kChunk) {
    const int64_t key = dm.by_position ? positions[s * dm.Q + i] : dm.N + i;
    if (key >= first && key < first + kChunk && mask_row[dm.N + i]) new_col[key - first] = i;
  }
  __syncthreads();

  const int64_t key = first + t;
  const T* key_row = nullptr;
  const T* val_row = v_pool + kv_offset;  // a row that exists: weight 0 keys read it, unused
  if (key < dm.N && mask_row[key]) {
    const int64_t cell = cell_table[s * dm.N + key];
    key_row = k_pool + cell * kv_width + kv_offset;
    val_row = v_pool + cell * kv_width + kv_offset;
  } else if (new_col[t] >= 0) {
    const int64_t at = (s * dm.Q + new_col[t]) * kv_width + kv_offset;
    key_row = k_new + at;
    val_row = v_new + at;
  }
  float score = -INFINITY;
  if (key_row != nullptr) {
    float dot = 0.f;
    float items[Vec<T>::kSize];
#pragma unroll 4
    for (int d = 0; d < D; d += Vec<T>::kSize) {
      Vec<T>::load(key_row + d, items);
#pragma unroll
      for (int i = 0; i < Vec<T>::kSize; ++i) dot += q_row[d + i] * items[i];
    }
    score = dot * dm.scale;
  }
  const float m = block_reduce<true>(red, score);
  const float e = (key_row != nullptr) ? expf(score - m) : 0.f;
  weight[t] = e;
  value_row[t] = val_row;
  const float l = block_reduce<false>(red, e);  // its barriers publish weight and value_row

  const int groups = kChunk / D;
  const int g = t / D, lane = t % D;
  float acc = 0.f;
  if (g < groups) {
#pragma unroll 8
    for (int j = g; j < kChunk; j += groups) {
      const float v = to_float(value_row[j][lane]);
      const float w = weight[j];
      acc += (w != 0.f) ? w * v : 0.f;  // a weight-0 row may hold anything: never summed
    }
  }
  group_sum[t] = acc;
  __syncthreads();
  if (t < D) {
    float total = 0.f;
    for (int k = 0; k < groups; ++k) total += group_sum[k * D + t];
    if (dm.chunks > 1) {
      float* part = partials + ((row * dm.H + h) * dm.chunks + c) * (dm.D + 2);
      if (t == 0) {
        part[0] = m;
        part[1] = l;
      }
      part[2 + t] = total;
    } else {
      out[(row * dm.H + h) * dm.D + t] = from_float<T>(l > 0.f ? total / l : 0.f);
    }
  }
}

// one block per (token row, head): the chunks' partials in index order
template <typename T>
__global__ void combine_kernel(const float* __restrict__ partials, Dims dm, T* __restrict__ out) {
  const int64_t row_head = blockIdx.x;
  const float* base = partials + row_head * dm.chunks * (dm.D + 2);
  float m = -INFINITY;
  for (int64_t c = 0; c < dm.chunks; ++c) {
    const float* part = base + c * (dm.D + 2);
    if (part[1] > 0.f) m = fmaxf(m, part[0]);
  }
  for (int64_t d = threadIdx.x; d < dm.D; d += blockDim.x) {
    float l = 0.f, acc = 0.f;
    for (int64_t c = 0; c < dm.chunks; ++c) {
      const float* part = base + c * (dm.D + 2);
      if (part[1] > 0.f) {
        const float f = expf(part[0] - m);
        l += part[1] * f;
        acc += part[2 + d] * f;
      }
    }
    out[row_head * dm.D + d] = from_float<T>(l > 0.f ? acc / l : 0.f);
  }
}

template <typename T>
struct CudaType;
template <>
struct CudaType<float> {
  using type = float;
  static constexpr ONNXTensorElementDataType onnx = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  static constexpr const char* name = "CellAttentionFloat";
};
template <>
struct CudaType<__half> {
  using type = __half;
  static constexpr ONNXTensorElementDataType onnx = ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT16;
  static constexpr const char* name = "CellAttentionFloat16";
};
template <>
struct CudaType<__nv_bfloat16> {
  using type = __nv_bfloat16;
  static constexpr ONNXTensorElementDataType onnx = ONNX_TENSOR_ELEMENT_DATA_TYPE_BFLOAT16;
  static constexpr const char* name = "CellAttentionBFloat16";
};

OrtStatus* error(const std::string& message) {
  return Ort::GetApi().CreateStatus(ORT_INVALID_ARGUMENT, ("CellAttention: " + message).c_str());
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

template <typename T>
struct Kernel {
  int64_t heads, kv_heads, by_position;
  float scale;

  explicit Kernel(const OrtKernelInfo* info) {
    Ort::ConstKernelInfo attrs(info);
    heads = attrs.GetAttribute<int64_t>("num_heads");
    kv_heads = attrs.GetAttribute<int64_t>("kv_num_heads");
    by_position = attrs.GetAttribute<int64_t>("by_position");
    scale = attrs.GetAttribute<float>("scale");
  }

  OrtStatus* ComputeV2(OrtKernelContext* context) {
    try {
      return Compute(context);
    } catch (const Ort::Exception& e) {
      return error(e.what());
    }
  }

  OrtStatus* Compute(OrtKernelContext* context) {
    Ort::KernelContext ctx(context);
    auto shape_of = [&](size_t i) { return ctx.GetInput(i).GetTensorTypeAndShapeInfo().GetShape(); };
    const std::vector<int64_t> q_shape = shape_of(0), table = shape_of(5), mask = shape_of(6);
    if (q_shape.size() != 3 || table.size() != 2 || q_shape[2] % heads != 0)
      return error("q " + shape_text(q_shape) + ", cell_table " + shape_text(table));
    Dims dm{q_shape[0], q_shape[1], table[1], heads, kv_heads, q_shape[2] / heads, 0, scale,
            static_cast<int>(by_position)};
    if (table[0] != dm.S || dm.D > kMaxHeadDim || heads % kv_heads != 0 ||
        (dm.D * sizeof(T)) % 16 != 0)
      return error("q " + shape_text(q_shape) + " with cell_table " + shape_text(table) +
                   " (head size at most 128, a multiple of 16 bytes)");
    if (mask != std::vector<int64_t>{dm.S, 1, dm.Q, dm.N + dm.Q})
      return error("attn_mask " + shape_text(mask) + ", expected [S, 1, Q, N + Q] for q " +
                   shape_text(q_shape) + " and cell_table " + shape_text(table));
    dm.chunks = (dm.N + dm.Q + kChunk - 1) / kChunk;
    auto out = ctx.GetOutput(0, q_shape);
    const int64_t num_blocks = dm.S * dm.Q * dm.H;
    auto partials = ctx.GetOutput(1, {num_blocks * dm.chunks * (dm.D + 2)});
    if (num_blocks == 0) return nullptr;
    auto stream = static_cast<cudaStream_t>(ctx.GetGPUComputeStream());
    using C = typename CudaType<T>::type;
    auto in = [&](size_t i) { return ctx.GetInput(i).GetTensorData<C>(); };
    chunk_kernel<C><<<num_blocks * dm.chunks, kChunk, 0, stream>>>(
        in(0), in(1), in(2), in(3), in(4), ctx.GetInput(5).GetTensorData<int64_t>(),
        ctx.GetInput(6).GetTensorData<bool>(), ctx.GetInput(7).GetTensorData<int64_t>(), dm,
        partials.GetTensorMutableData<float>(), out.GetTensorMutableData<C>());
    if (dm.chunks > 1) {
      const int threads = dm.D < 128 ? static_cast<int>(dm.D) : 128;
      combine_kernel<C><<<num_blocks, threads, 0, stream>>>(
          partials.GetTensorData<float>(), dm, out.GetTensorMutableData<C>());
    }
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return error(std::string("launch: ") + cudaGetErrorString(status));
    return nullptr;
  }
};

template <typename T>
struct Op : Ort::CustomOpBase<Op<T>, Kernel<T>, true> {
  OrtStatus* CreateKernelV2(const OrtApi&, const OrtKernelInfo* info, void** kernel) const {
    try {
      *kernel = new Kernel<T>(info);
      return nullptr;
    } catch (const Ort::Exception& e) {
      return error(e.what());
    }
  }
  const char* GetName() const { return CudaType<T>::name; }
  const char* GetExecutionProviderType() const { return "CUDAExecutionProvider"; }
  size_t GetInputTypeCount() const { return 8; }
  ONNXTensorElementDataType GetInputType(size_t i) const {
    if (i == 5 || i == 7) return ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64;
    if (i == 6) return ONNX_TENSOR_ELEMENT_DATA_TYPE_BOOL;
    return CudaType<T>::onnx;
  }
  size_t GetOutputTypeCount() const { return 2; }
  ONNXTensorElementDataType GetOutputType(size_t i) const {
    return i == 0 ? CudaType<T>::onnx : ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT;
  }
};

}  // namespace

extern "C" OrtStatus* ORT_API_CALL RegisterCustomOps(OrtSessionOptions* options,
                                                     const OrtApiBase* api_base) {
  Ort::InitApi(api_base->GetApi(ORT_API_VERSION));
  static Op<float> op_float;
  static Op<__half> op_half;
  static Op<__nv_bfloat16> op_bfloat16;
  static Ort::CustomOpDomain* domain = nullptr;
  try {
    if (domain == nullptr) {
      domain = new Ort::CustomOpDomain("cellspec");  // lives as long as the process
      domain->Add(&op_float);
      domain->Add(&op_half);
      domain->Add(&op_bfloat16);
    }
    Ort::UnownedSessionOptions(options).Add(*domain);
  } catch (const Ort::Exception& e) {
    return Ort::GetApi().CreateStatus(ORT_FAIL, e.what());
  }
  return nullptr;
}
