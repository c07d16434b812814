// gelu_tanh(gate) * up for a gated MLP's fused projection [T, 2I] = [gate | up], in one pass (SGLang's
// gelu_tanh_and_mul). torch runs it as gelu then mul over [T, I] each, and its tanh-approximate gelu
// costs a vectorised tanh per element, several times an exp. This kernel uses the identity
// 0.5 * (1 + tanh(z)) = 1 / (1 + exp(-2z)):
//   gelu_tanh(x) = 0.5 * x * (1 + tanh(z)) = x / (1 + exp(-2z)),  z = sqrt(2 / pi) * (x + 0.044715 * x^3)
// one exp and one division, with no cancellation (within a few ulp of torch's gelu; exp overflowing to
// inf gives the right limit, -0 for very negative x).

#include <torch/extension.h>
#include <ATen/cpu/vec/vec.h>

#include <cmath>

namespace {

using Vec = at::vec::Vectorized<float>;

constexpr float kMinusTwoBeta = -2.0 * M_SQRT2 * M_2_SQRTPI * 0.5;  // -2 * sqrt(2 / pi)
constexpr float kKappa = 0.044715f;

inline float gelu_tanh(float x) { return x / (1.f + std::exp(kMinusTwoBeta * (x + kKappa * x * x * x))); }

void gelu_tanh_and_mul(const at::Tensor& x, at::Tensor& out) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kFloat && x.is_contiguous() && x.size(1) % 2 == 0,
              "gelu_tanh_and_mul: x must be contiguous float32 [T, 2 * I], got ", x.sizes(), " ", x.scalar_type());
  const int64_t T = x.size(0), I = x.size(1) / 2;
  TORCH_CHECK(out.dim() == 2 && out.size(0) == T && out.size(1) == I && out.scalar_type() == at::kFloat &&
                  out.is_contiguous(),
              "gelu_tanh_and_mul: out must be contiguous float32 [", T, ", ", I, "], got ", out.sizes());
  const Vec minus_two_beta(kMinusTwoBeta), kappa(kKappa), one(1.f);
  for (int64_t t = 0; t < T; ++t) {
    const float* gate = x.data_ptr<float>() + t * 2 * I;
    const float* up = gate + I;
    float* o = out.data_ptr<float>() + t * I;
    int64_t i = 0;
    for (; i + Vec::size() <= I; i += Vec::size()) {
      const Vec g = Vec::loadu(gate + i);
      const Vec gelu = g / (one + (minus_two_beta * (g + kappa * (g * g * g))).exp());
      (gelu * Vec::loadu(up + i)).store(o + i);
    }
    for (; i < I; ++i) o[i] = gelu_tanh(gate[i]) * up[i];
  }
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(harness, m) { m.def("gelu_tanh_and_mul(Tensor x, *, Tensor(a!) out) -> ()"); }

TORCH_LIBRARY_IMPL(harness, CPU, m) { m.impl("gelu_tanh_and_mul", &gelu_tanh_and_mul); }
