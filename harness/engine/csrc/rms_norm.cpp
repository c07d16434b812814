// RMSNorm over the last dim, optionally added to a residual, in one pass per row (SGLang's rmsnorm and
// fused_add_rmsnorm): out = [residual +] x * (1 / sqrt(sum(x^2) / n + eps)) * scale. In torch ops an fp32
// norm is four or five ops over [T, n] (harness/model/norm.py, the reference), at decode sizes each
// costing mostly its own dispatch. scale is the effective multiplier the weight loader prepared (1 + w for
// Gemma), so one kernel serves both flavours in fp32.

#include <torch/extension.h>
#include <ATen/cpu/vec/functional.h>
#include <ATen/cpu/vec/vec.h>

#include <cmath>
#include <optional>

namespace {

using Vec = at::vec::Vectorized<float>;

void rms_norm(const at::Tensor& x, const at::Tensor& scale, double eps, const std::optional<at::Tensor>& residual,
              at::Tensor& out) {
  TORCH_CHECK(x.scalar_type() == at::kFloat && x.is_contiguous() && x.dim() >= 1,
              "rms_norm: x must be contiguous float32, got ", x.sizes(), " ", x.scalar_type());
  const int64_t n = x.size(-1), rows = n ? x.numel() / n : 0;
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.dim() == 1 && scale.size(0) == n && scale.is_contiguous(),
              "rms_norm: scale must be contiguous float32 [", n, "], got ", scale.sizes(), " ", scale.scalar_type());
  TORCH_CHECK(out.sizes() == x.sizes() && out.scalar_type() == at::kFloat && out.is_contiguous(),
              "rms_norm: out must be contiguous float32 ", x.sizes(), ", got ", out.sizes());
  if (residual.has_value()) {
    TORCH_CHECK(residual->sizes() == x.sizes() && residual->scalar_type() == at::kFloat && residual->is_contiguous(),
                "rms_norm: residual must be contiguous float32 ", x.sizes(), ", got ", residual->sizes());
  }
  const float* xp = x.data_ptr<float>();
  const float* sp = scale.data_ptr<float>();
  const float* rp = residual.has_value() ? residual->data_ptr<float>() : nullptr;
  float* op = out.data_ptr<float>();
  const float feps = static_cast<float>(eps), inv_n = 1.f / static_cast<float>(n);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = xp + r * n;
    float* o = op + r * n;
    Vec acc(0.f);
    int64_t i = 0;
    for (; i + Vec::size() <= n; i += Vec::size()) {
      const Vec v = Vec::loadu(xr + i);
      acc = at::vec::fmadd(v, v, acc);
    }
    float sum = at::vec::vec_reduce_all<float>([](Vec& a, Vec& b) { return a + b; }, acc);
    for (; i < n; ++i) sum += xr[i] * xr[i];
    const float inv = 1.f / std::sqrt(sum * inv_n + feps);
    const float* res = rp ? rp + r * n : nullptr;
    i = 0;
    for (; i + Vec::size() <= n; i += Vec::size()) {
      Vec y = Vec::loadu(xr + i) * Vec(inv) * Vec::loadu(sp + i);
      if (res) y = y + Vec::loadu(res + i);
      y.store(o + i);
    }
    for (; i < n; ++i) o[i] = (res ? res[i] : 0.f) + xr[i] * inv * sp[i];
  }
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(harness, m) {
  m.def("rms_norm(Tensor x, Tensor scale, float eps, Tensor? residual, *, Tensor(a!) out) -> ()");
}

TORCH_LIBRARY_IMPL(harness, CPU, m) { m.impl("rms_norm", &rms_norm); }
