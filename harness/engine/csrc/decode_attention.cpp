// Decode attention over the KV pool in one pass: for each request and KV head, read the key rows it
// attends to straight from the cache, score them, soft-cap, mask, softmax and sum the value rows,
// without materialising the gathered keys and values (harness/engine/cpu_kernels.py says when it is
// used; harness/engine/attention_backend.py:attend_over_rows is the torch reference it must match).
//
// Vectorised with ATen's own Vectorized<float> (its exp is the one torch's CPU kernels use),
// compiled at run time for the CPU capability torch itself dispatches to.

#include <torch/extension.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace {

using Vec = at::vec::Vectorized<float>;

constexpr int64_t kPrefetch = 8;  // rows ahead

inline void prefetch_row(const float* row, int64_t n) {
  for (int64_t i = 0; i < n; i += 64 / sizeof(float)) __builtin_prefetch(row + i);
}

inline float dot(const float* a, const float* b, int64_t n) {
  Vec acc(0.f);
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) acc = at::vec::fmadd(Vec::loadu(a + i), Vec::loadu(b + i), acc);
  float sum = at::vec::vec_reduce_all<float>([](Vec& x, Vec& y) { return x + y; }, acc);
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

inline void axpy(float alpha, const float* x, float* y, int64_t n) {  // y += alpha * x
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) at::vec::fmadd(Vec(alpha), Vec::loadu(x + i), Vec::loadu(y + i)).store(y + i);
  for (; i < n; ++i) y[i] += alpha * x[i];
}

// Soft-cap c * tanh(x / c), with tanh(y) = 1 - 2 / (1 + exp(2y)): an exp costs a fraction of a
// vectorised tanh. Near 0 the difference loses a few ulp of 1 (absolute error about c * 1e-7 on a score
// that softmax then exponentiates); exp overflowing to inf gives the limits c and -c.
inline Vec softcap(Vec x, float c) {
  return Vec(c) - Vec(2.f * c) / (Vec(1.f) + (x * Vec(2.f / c)).exp());
}

inline float softcap(float x, float c) { return c - 2.f * c / (1.f + std::exp(x * (2.f / c))); }

// o[g] = sum over visible l of p[g * L + l] * value row r[l], for the G query heads of one KV head.
// With NV vectors per row, the accumulators stay in registers (a row of o through memory at every key
// would chain each key's update to the previous one's store).
template <int64_t NV>
void weighted_sum_rows(const float* p, const float* vp, const int32_t* r, const float* m, int64_t L, int64_t G,
                       float* o) {
  constexpr int64_t D = NV * Vec::size();
  const float hidden = -std::numeric_limits<float>::infinity();
  for (int64_t g = 0; g < G; ++g) {
    Vec acc[NV];
    for (int64_t i = 0; i < NV; ++i) acc[i] = Vec(0.f);
    for (int64_t l = 0; l < L; ++l) {
      if (m[l] == hidden) continue;
      const float* value = vp + static_cast<int64_t>(r[l]) * D;
      const Vec w(p[g * L + l]);
      for (int64_t i = 0; i < NV; ++i) acc[i] = at::vec::fmadd(w, Vec::loadu(value + i * Vec::size()), acc[i]);
    }
    for (int64_t i = 0; i < NV; ++i) acc[i].store(o + g * D + i * Vec::size());
  }
}

void weighted_sum(const float* p, const float* vp, const int32_t* r, const float* m, int64_t L, int64_t G, int64_t D,
                  float* o) {
  switch (D % Vec::size() ? 0 : D / Vec::size()) {
    case 1: return weighted_sum_rows<1>(p, vp, r, m, L, G, o);
    case 2: return weighted_sum_rows<2>(p, vp, r, m, L, G, o);
    case 4: return weighted_sum_rows<4>(p, vp, r, m, L, G, o);
    case 8: return weighted_sum_rows<8>(p, vp, r, m, L, G, o);
    case 16: return weighted_sum_rows<16>(p, vp, r, m, L, G, o);
  }
  const float hidden = -std::numeric_limits<float>::infinity();
  std::fill(o, o + G * D, 0.f);
  for (int64_t l = 0; l < L; ++l) {
    if (m[l] == hidden) continue;
    const float* value = vp + static_cast<int64_t>(r[l]) * D;
    for (int64_t g = 0; g < G; ++g) axpy(p[g * L + l], value, o + g * D, D);
  }
}

// scores <- softmax(mask + softcap(scores)) in place (no cap: softmax(scores + mask)).
void softcap_mask_softmax(float* s, const float* mask, int64_t n, std::optional<double> cap) {
  const float c = cap.has_value() ? static_cast<float>(*cap) : 0.f;
  Vec vmax(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) {
    Vec x = Vec::loadu(s + i);
    x = (cap.has_value() ? softcap(x, c) : x) + Vec::loadu(mask + i);
    x.store(s + i);
    vmax = at::vec::maximum(vmax, x);
  }
  float mx = at::vec::vec_reduce_all<float>([](Vec& x, Vec& y) { return at::vec::maximum(x, y); }, vmax);
  for (; i < n; ++i) {
    s[i] = (cap.has_value() ? softcap(s[i], c) : s[i]) + mask[i];
    mx = std::isnan(s[i]) ? s[i] : std::max(mx, s[i]);  // NaN propagates, as at::vec::maximum
  }
  Vec vsum(0.f);
  i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) {
    Vec e = (Vec::loadu(s + i) - Vec(mx)).exp();
    e.store(s + i);
    vsum = vsum + e;
  }
  float sum = at::vec::vec_reduce_all<float>([](Vec& x, Vec& y) { return x + y; }, vsum);
  for (; i < n; ++i) {
    s[i] = std::exp(s[i] - mx);
    sum += s[i];
  }
  const float inv = 1.f / sum;
  i = 0;
  for (; i + Vec::size() <= n; i += Vec::size()) (Vec::loadu(s + i) * Vec(inv)).store(s + i);
  for (; i < n; ++i) s[i] *= inv;
}

// q [B, H, D] (last dim contiguous); k_cache, v_cache [S, KVH, D] contiguous, read as rows [S * KVH, D];
// rows int32 [B * KVH * L]: row (b, kv head, l) of the cache; mask float32 [B, L], additive; out [B, H, D].
// Query head h reads KV head h / (H / KVH), as in attend_over_rows.
void decode_attention(const at::Tensor& q, const at::Tensor& k_cache, const at::Tensor& v_cache,
                      const at::Tensor& rows, const at::Tensor& mask, double scaling, std::optional<double> cap,
                      at::Tensor& out) {
  TORCH_CHECK(q.dim() == 3 && q.scalar_type() == at::kFloat && q.stride(2) == 1,
              "decode_attention: q must be float32 [B, H, D] with a contiguous last dim, got ", q.sizes(), " ", q.scalar_type());
  const int64_t B = q.size(0), H = q.size(1), D = q.size(2);
  TORCH_CHECK(k_cache.scalar_type() == at::kFloat && v_cache.scalar_type() == at::kFloat && k_cache.is_contiguous() &&
                  v_cache.is_contiguous() && k_cache.sizes() == v_cache.sizes() && k_cache.size(-1) == D,
              "decode_attention: k_cache and v_cache must be contiguous float32 [S, KVH, ", D, "], got ", k_cache.sizes(),
              " and ", v_cache.sizes());
  TORCH_CHECK(mask.dim() == 2 && mask.size(0) == B && mask.scalar_type() == at::kFloat && mask.is_contiguous(),
              "decode_attention: mask must be contiguous float32 [", B, ", L], got ", mask.sizes(), " ", mask.scalar_type());
  const int64_t L = mask.size(1);
  TORCH_CHECK(rows.scalar_type() == at::kInt && rows.is_contiguous() && L > 0 && rows.numel() % (B * L) == 0,
              "decode_attention: rows must be contiguous int32 [B * KVH * L], got ", rows.sizes(), " ", rows.scalar_type());
  const int64_t KVH = rows.numel() / (B * L);
  TORCH_CHECK(KVH > 0 && H % KVH == 0 && k_cache.numel() % (KVH * D) == 0,
              "decode_attention: ", H, " query heads cannot share ", KVH, " KV heads");
  TORCH_CHECK(out.sizes() == q.sizes() && out.scalar_type() == at::kFloat && out.is_contiguous(),
              "decode_attention: out must be contiguous float32 ", q.sizes());
  const int64_t G = H / KVH, cache_rows = k_cache.numel() / D;
  const int32_t* rp = rows.data_ptr<int32_t>();
  for (int64_t i = 0; i < rows.numel(); ++i) {
    TORCH_CHECK_INDEX(rp[i] >= 0 && rp[i] < cache_rows, "decode_attention: cache row ", rp[i],
                      " out of range [0, ", cache_rows, ")");
  }
  const float* qp = q.data_ptr<float>();
  const float* kp = k_cache.data_ptr<float>();
  const float* vp = v_cache.data_ptr<float>();
  const float* mp = mask.data_ptr<float>();
  float* op = out.data_ptr<float>();
  const int64_t qs0 = q.stride(0), qs1 = q.stride(1);
  const float scale = static_cast<float>(scaling);
  const float hidden = -std::numeric_limits<float>::infinity();
  std::vector<float> scores(G * L);
  for (int64_t b = 0; b < B; ++b) {
    // Keys the mask hides are not read (their probability is exactly 0), as a real kernel reads only a
    // request's own tokens: rows past seq_len in a graph's KV bucket cost nothing.
    const float* m = mp + b * L;
    const bool any_visible = std::any_of(m, m + L, [&](float x) { return x != hidden; });
    for (int64_t kh = 0; kh < KVH; ++kh) {
      const int32_t* r = rp + (b * KVH + kh) * L;
      for (int64_t l = 0; l < L; ++l) {
        // Rows are scattered over the pool (a request's tokens are a batch apart): fetch the key and
        // value rows a few keys ahead, so both are in cache when the loops below reach them.
        if (l + kPrefetch < L && m[l + kPrefetch] != hidden) {
          prefetch_row(kp + static_cast<int64_t>(r[l + kPrefetch]) * D, D);
          prefetch_row(vp + static_cast<int64_t>(r[l + kPrefetch]) * D, D);
        }
        const float* key = kp + static_cast<int64_t>(r[l]) * D;
        for (int64_t g = 0; g < G; ++g) {
          scores[g * L + l] = m[l] == hidden ? hidden : dot(qp + b * qs0 + (kh * G + g) * qs1, key, D) * scale;
        }
      }
      float* o = op + (b * H + kh * G) * D;  // the G query heads of this KV head: G rows of D
      if (!any_visible) {  // softmax over nothing: NaN, as torch's softmax of an all -inf row
        std::fill(o, o + G * D, std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      for (int64_t g = 0; g < G; ++g) softcap_mask_softmax(scores.data() + g * L, m, L, cap);
      weighted_sum(scores.data(), vp, r, m, L, G, D, o);
    }
  }
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(harness, m) {
  m.def("decode_attention(Tensor q, Tensor k_cache, Tensor v_cache, Tensor rows, Tensor mask, float scaling, "
        "float? cap, *, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(harness, CPU, m) { m.impl("decode_attention", &decode_attention); }
