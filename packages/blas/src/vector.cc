// Elementwise passes over long Float32Arrays that the sharded optimizer makes once per micro-batch or step
// (a shard of a 0.5B-parameter model is 247M values): the same arithmetic as the JavaScript loops they
// replace, in the same order, so the same bits.
#include <napi.h>

#include <cstdint>
#include <string>

#include "args.h"
#include "cpu-clones.h"
#include "functions.h"

namespace torl_blas {

namespace {

TORL_CPU_CLONES void AddRun(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] += x[i];
}

// A float32 product is exact in double, and the sums run in index order: the bits of the JavaScript loop
// `s += x[i] * x[i]` over a Float64 accumulator.
double SumSquaresRun(const float* x, int64_t n) {
  double s = 0.0;
  for (int64_t i = 0; i < n; i++) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return s;
}

}  // namespace

// addInto(x, y): y[i] += x[i] (float32); the lengths must be equal.
Napi::Value AddInto(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "addInto", 2)) return env.Undefined();
  Operand x, y;
  if (!ReadOperand(env, info[0], "x", &x) || !ReadOperand(env, info[1], "y", &y)) return env.Undefined();
  if (x.length != y.length) {
    Napi::RangeError::New(env, "addInto: " + std::to_string(x.length) + " values into an array of " +
                                   std::to_string(y.length))
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  AddRun(x.data, y.data, static_cast<int64_t>(x.length));
  return env.Undefined();
}

// sumSquares(x): the sum of x[i]^2 in double precision, in index order.
Napi::Value SumSquares(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "sumSquares", 1)) return env.Undefined();
  Operand x;
  if (!ReadOperand(env, info[0], "x", &x)) return env.Undefined();
  return Napi::Number::New(env, SumSquaresRun(x.data, static_cast<int64_t>(x.length)));
}

}  // namespace torl_blas
