// RMSNorm over the last axis, y = x / sqrt(mean(x^2) + eps) * w, and its gradient, one pass per row each,
// where the op-by-op path runs six kernels forward and about twice as many backward.
#include <napi.h>

#include <cmath>
#include <cstdint>

#include "args.h"
#include "functions.h"

namespace torl_blas {

namespace {

bool ReadRows(const Napi::CallbackInfo& info, Operand* x, Operand* w, size_t* rows, size_t* width) {
  Napi::Env env = info.Env();
  if (!ReadOperand(env, info[0], "x", x) || !ReadOperand(env, info[1], "w", w)) return false;
  if (w->length == 0 || x->length % w->length != 0) {
    Napi::RangeError::New(env, "x must hold whole rows of w's width").ThrowAsJavaScriptException();
    return false;
  }
  *width = w->length;
  *rows = x->length / w->length;
  return true;
}

// 1 / sqrt(mean(x^2) + eps) of one row, summed in double.
float InverseRms(const float* x, size_t width, double eps) {
  double sq = 0;
  for (size_t j = 0; j < width; j++) sq += static_cast<double>(x[j]) * x[j];
  return static_cast<float>(1.0 / std::sqrt(sq / width + eps));
}

}  // namespace

// rmsNorm(x, w, eps, y): y[r] = x[r] * inverseRms(x[r]) * w for each row r of x ([rows, width]).
Napi::Value RmsNorm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "rmsNorm", 4)) return env.Undefined();
  Operand x, w, y;
  size_t rows, width;
  double eps;
  if (!ReadRows(info, &x, &w, &rows, &width) || !ReadNumber(env, info[2], "eps", &eps) ||
      !ReadOperand(env, info[3], "y", &y))
    return env.Undefined();
  if (y.length != x.length) {
    Napi::RangeError::New(env, "y must be as long as x").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  for (size_t r = 0; r < rows; r++) {
    const float* xr = x.data + r * width;
    float* yr = y.data + r * width;
    const float inv = InverseRms(xr, width, eps);
    for (size_t j = 0; j < width; j++) yr[j] = xr[j] * inv * w.data[j];
  }
  return env.Undefined();
}

// rmsNormGrad(x, w, eps, dy, dx, dw): with g = dy * w and s = inverseRms(x[r]) per row,
//   dx = s g - x s^3 sum_j(g_j x_j) / width;   dw = sum over rows of dy x s.
Napi::Value RmsNormGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "rmsNormGrad", 6)) return env.Undefined();
  Operand x, w, dy, dx, dw;
  size_t rows, width;
  double eps;
  if (!ReadRows(info, &x, &w, &rows, &width) || !ReadNumber(env, info[2], "eps", &eps) ||
      !ReadOperand(env, info[3], "dy", &dy) || !ReadOperand(env, info[4], "dx", &dx) ||
      !ReadOperand(env, info[5], "dw", &dw))
    return env.Undefined();
  if (dy.length != x.length || dx.length != x.length || dw.length != width) {
    Napi::RangeError::New(env, "dy and dx must be as long as x, dw as w").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  for (size_t j = 0; j < width; j++) dw.data[j] = 0.0f;
  for (size_t r = 0; r < rows; r++) {
    const float* xr = x.data + r * width;
    const float* dyr = dy.data + r * width;
    float* dxr = dx.data + r * width;
    const float s = InverseRms(xr, width, eps);
    double dot = 0;
    for (size_t j = 0; j < width; j++) dot += static_cast<double>(dyr[j]) * w.data[j] * xr[j];
    const float coef = static_cast<float>(dot * s * s * s / width);
    for (size_t j = 0; j < width; j++) {
      dxr[j] = s * dyr[j] * w.data[j] - xr[j] * coef;
      dw.data[j] += dyr[j] * xr[j] * s;
    }
  }
  return env.Undefined();
}

}  // namespace torl_blas
