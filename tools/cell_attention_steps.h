// Host-side attention steps for tools/cell_attention_probe.cu (nvcc) and
// tools/cell_attention_mma_emulate.cpp (g++): a step's inputs, the steps the invariance checks
// derive from one (a verify row's plain step, a session alone), and a float64 reference. Plain
// C++: the includer defines, for its element type T, `T from_float_host<T>(float)` and
// `double to_double_host(T)` (and for float).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <vector>

template <typename T>
std::vector<T> random_values(size_t n) {
  std::vector<T> v(n);
  for (auto& x : v) x = from_float_host<T>(0.01f * (rand() % 100 - 50));
  return v;
}

// one step's inputs on the host: session s's new tokens at positions length_s + i after length_s
// cells (length_s = N - Q - 2 - gap - stagger s, at least 0), each row seeing the cells and the
// new tokens up to its own, the cells of session s at pool rows 1 + s N + j (the pool's last 63
// rows free); by_position 0: new token i is key N + i (a draft block's step)
template <typename T>
struct HostStep {
  int S, Q, N, H, KV, D;
  int by_position = 1;
  std::vector<T> k_pool, v_pool, q, k_new, v_new;
  std::vector<int64_t> table, positions;
  std::vector<char> mask;
};

// the inputs a function of (seed, shape) alone: the probe seeds by the shape, so that lines of
// one shape (other tilings, staged or not, pair_kernel) get the same inputs and must print the
// same hash
template <typename T>
HostStep<T> random_step(int S, int Q, int N, int H, int KV, int D, unsigned seed, int gap = 0,
                        int stagger = 0) {
  srand(seed);
  HostStep<T> st{S, Q, N, H, KV, D};
  const int cells = S * N + 64;
  st.k_pool = random_values<T>((size_t)cells * KV * D);
  st.v_pool = random_values<T>(st.k_pool.size());
  st.q = random_values<T>((size_t)S * Q * H * D);
  st.k_new = random_values<T>((size_t)S * Q * KV * D);
  st.v_new = random_values<T>(st.k_new.size());
  st.table.resize((size_t)S * N);
  st.positions.resize((size_t)S * Q);
  st.mask.assign((size_t)S * Q * (N + Q), 0);
  for (int s = 0; s < S; ++s) {
    const int length = std::max(N - Q - 2 - gap - stagger * s, 0);  // cells before the new tokens
    for (int j = 0; j < N; ++j) st.table[(size_t)s * N + j] = 1 + s * N + j;
    for (int i = 0; i < Q; ++i) {
      st.positions[(size_t)s * Q + i] = length + i;
      for (int j = 0; j < length; ++j) st.mask[((size_t)s * Q + i) * (N + Q) + j] = 1;
      for (int j = 0; j <= i; ++j) st.mask[((size_t)s * Q + i) * (N + Q) + N + j] = 1;
    }
  }
  return st;
}

// the plain step of row r of a one-session verify `v`, after the verify: rows 0 .. r - 1 are cells
// now (the pool's free rows), at their positions' columns, and row r is the step's one token
template <typename T>
HostStep<T> plain_step_of_row(const HostStep<T>& v, int r) {
  HostStep<T> p = v;
  const size_t kv = (size_t)v.KV * v.D, hd = (size_t)v.H * v.D;
  const int64_t length = v.positions[0];
  for (int j = 0; j < r; ++j) {
    const size_t cell = (size_t)v.N + 1 + j;  // free: the table uses rows 1 .. N
    std::copy_n(&v.k_new[j * kv], kv, &p.k_pool[cell * kv]);
    std::copy_n(&v.v_new[j * kv], kv, &p.v_pool[cell * kv]);
    p.table[length + j] = static_cast<int64_t>(cell);
  }
  p.Q = 1;
  p.q.assign(&v.q[r * hd], &v.q[(r + 1) * hd]);
  p.k_new.assign(&v.k_new[r * kv], &v.k_new[(r + 1) * kv]);
  p.v_new.assign(&v.v_new[r * kv], &v.v_new[(r + 1) * kv]);
  p.positions = {length + r};
  p.mask.assign((size_t)v.N + 1, 0);
  for (int64_t j = 0; j < length + r; ++j) p.mask[j] = 1;
  p.mask[v.N] = 1;
  return p;
}

// session s of a step alone (the same pool)
template <typename T>
HostStep<T> session_alone(const HostStep<T>& b, int s) {
  HostStep<T> a = b;
  const size_t q = (size_t)b.Q, hd = q * b.H * b.D, kv = q * b.KV * b.D, cols = b.N + b.Q;
  a.S = 1;
  a.q.assign(&b.q[s * hd], &b.q[(s + 1) * hd]);
  a.k_new.assign(&b.k_new[s * kv], &b.k_new[(s + 1) * kv]);
  a.v_new.assign(&b.v_new[s * kv], &b.v_new[(s + 1) * kv]);
  a.table.assign(&b.table[(size_t)s * b.N], &b.table[(size_t)(s + 1) * b.N]);
  a.positions.assign(&b.positions[s * q], &b.positions[(s + 1) * q]);
  a.mask.assign(&b.mask[s * q * cols], &b.mask[(s + 1) * q * cols]);
  return a;
}

// a draft block's step of the same inputs: every row sees every new token of its session, new
// token i at key N + i
template <typename T>
HostStep<T> block_step(HostStep<T> st) {
  st.by_position = 0;
  for (size_t row = 0; row < (size_t)st.S * st.Q; ++row)
    std::fill_n(&st.mask[row * (st.N + st.Q) + st.N], st.Q, 1);
  return st;
}

// the largest difference of `got` (outputs of any element type U) from float64 attention over
// the cells and new tokens each row sees
template <typename T, typename U>
double reference_error(const HostStep<T>& st, const std::vector<U>& got, float scale) {
  const int S = st.S, Q = st.Q, N = st.N, H = st.H, KV = st.KV, D = st.D;
  // the inputs as floats once (a host conversion of a __half is a software routine: converted
  // at every use, eight sessions' reference took longer than the probe's time limit)
  auto floats = [](const std::vector<T>& v) {
    std::vector<float> f(v.size());
    for (size_t i = 0; i < v.size(); ++i) f[i] = static_cast<float>(to_double_host(v[i]));
    return f;
  };
  const std::vector<float> f_pool = floats(st.k_pool), f_vpool = floats(st.v_pool),
                           f_q = floats(st.q), f_k = floats(st.k_new), f_v = floats(st.v_new);
  const std::vector<int64_t>& t = st.table;
  const std::vector<char>& m = st.mask;
  double max_err = 0.0;
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
          score[j] = dot * scale;
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
  return max_err;
}
