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

// A float32 product is exact in double. Eight running sums (sum l takes the indices i = l mod 8 of the
// whole chunks of 8, in index order) added ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)), then the rest
// in order: eight independent chains run at memory speed where one chain waits on each add, and the
// vector extension gives the same bits in every build; the JavaScript loop (vector-ops.ts) is written
// the same way.
typedef double Doubles8 __attribute__((vector_size(64)));

TORL_CPU_CLONES double SumSquaresRun(const float* x, int64_t n) {
  Doubles8 acc = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Doubles8 v;
    for (int l = 0; l < 8; l++) v[l] = static_cast<double>(x[i + l]);
    acc += v * v;
  }
  double s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; i++) s += static_cast<double>(x[i]) * static_cast<double>(x[i]);
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

// sumSquares(x): the sum of x[i]^2 in double precision, in SumSquaresRun's order.
Napi::Value SumSquares(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "sumSquares", 1)) return env.Undefined();
  Operand x;
  if (!ReadOperand(env, info[0], "x", &x)) return env.Undefined();
  return Napi::Number::New(env, SumSquaresRun(x.data, static_cast<int64_t>(x.length)));
}

}  // namespace torl_blas
