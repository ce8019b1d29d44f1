// One AdamW update (decoupled weight decay, as torch.optim.AdamW; weight decay 0 is plain Adam) in a
// single pass over parameters, gradient and both moments, instead of a dozen whole-array passes.
#include <napi.h>

#include <cmath>
#include <cstdint>

#include "args.h"
#include "cpu-clones.h"
#include "functions.h"

namespace torl_blas {

namespace {

// The loop itself. param and out may be one array (index for index, so vectorizing is safe); the others
// do not overlap. Built per CPU family (cpu-clones.h): its double-precision square root and division
// take 4x fewer instructions in AVX-512's 8 lanes than in SSE2's 2; without FMA contraction (binding.gyp)
// each lane computes the same bits as the scalar loop.
TORL_CPU_CLONES __attribute__((noinline)) void Update(const float* param, const float* __restrict grad, float* __restrict m, float* __restrict v, float* out,
            size_t n, double lr, double b1, double b2, double eps, double wd, double step, double gradScale) {
  const double c1 = 1 - std::pow(b1, step);
  const double c2 = std::sqrt(1 - std::pow(b2, step));
  const double decay = 1 - lr * wd;
  const double stepSize = lr / c1;
  const double keep1 = 1 - b1;
  const double keep2 = 1 - b2;
  const auto element = [&](size_t i, double gi) __attribute__((always_inline)) {
    const float mi = static_cast<float>(b1 * m[i] + keep1 * gi);
    const float vi = static_cast<float>(b2 * v[i] + keep2 * gi * gi);
    m[i] = mi;
    v[i] = vi;
    out[i] = static_cast<float>(param[i] * decay - (stepSize * mi) / (std::sqrt(static_cast<double>(vi)) / c2 + eps));
  };
  if (gradScale == 1.0) {
#pragma GCC ivdep
    for (size_t i = 0; i < n; i++) element(i, grad[i]);
  } else {
    // the gradient scaled and stored as float first, as a pass of `grad[i] *= scale` over the array would
#pragma GCC ivdep
    for (size_t i = 0; i < n; i++) element(i, static_cast<float>(static_cast<double>(grad[i]) * gradScale));
  }
}

}  // namespace

// adamw(param, grad, expAvg, expAvgSq, out, lr, beta1, beta2, eps, weightDecay, step[, gradScale]):
//   g <- float(grad * gradScale) (gradScale default 1: clipping folded into the pass; grad is not written)
//   m <- b1 m + (1 - b1) g;  v <- b2 v + (1 - b2) g^2   (in place)
//   out <- param (1 - lr wd) - lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps)
// `out` may be `param` (an update in place). Each value is computed in double and stored as float, as
// the same loop in JavaScript does, so both give the same bits.
Napi::Value AdamW(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() != 11 && info.Length() != 12) {
    Napi::TypeError::New(env, "adamw takes 11 or 12 arguments").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Operand p, g, m, v, out;
  if (!ReadOperand(env, info[0], "param", &p) || !ReadOperand(env, info[1], "grad", &g) ||
      !ReadOperand(env, info[2], "expAvg", &m) || !ReadOperand(env, info[3], "expAvgSq", &v) ||
      !ReadOperand(env, info[4], "out", &out))
    return env.Undefined();
  if (g.length != p.length || m.length != p.length || v.length != p.length || out.length != p.length) {
    Napi::RangeError::New(env, "adamw: param, grad, expAvg, expAvgSq and out must have the same length")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  double lr, b1, b2, eps, wd, step;
  if (!ReadNumber(env, info[5], "lr", &lr) || !ReadNumber(env, info[6], "beta1", &b1) ||
      !ReadNumber(env, info[7], "beta2", &b2) || !ReadNumber(env, info[8], "eps", &eps) ||
      !ReadNumber(env, info[9], "weightDecay", &wd) || !ReadNumber(env, info[10], "step", &step))
    return env.Undefined();
  double gradScale = 1.0;
  if (info.Length() == 12 && !ReadNumber(env, info[11], "gradScale", &gradScale)) return env.Undefined();
  if (!(step >= 1)) {
    Napi::RangeError::New(env, "adamw: step counts updates from 1").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Update(p.data, g.data, m.data, v.data, out.data, p.length, lr, b1, b2, eps, wd, step, gradScale);
  return env.Undefined();
}

}  // namespace torl_blas
