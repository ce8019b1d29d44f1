// The SwiGLU gate, y = silu(g) * u = g sigmoid(g) u, and its gradient, one pass each (the op-by-op path
// runs three kernels forward and about six backward).
#include <napi.h>

#include <cmath>
#include <cstdint>

#include "args.h"
#include "cpu-clones.h"
#include "fast-exp.h"
#include "functions.h"

namespace torl_blas {

// The forward loop, apart from the argument checks, so that GCC vectorizes it (see SwigluGradLoop).
TORL_CPU_CLONES __attribute__((noinline)) static void SwigluLoop(const float* __restrict g, const float* __restrict u,
                                                                 float* __restrict y, size_t n) {
  for (size_t i = 0; i < n; i++) {
    const float s = Sigmoid(g[i]);
    y[i] = g[i] * s * u[i];
  }
}

// swiglu(g, u, y): y = g sigmoid(g) u, elementwise.
Napi::Value Swiglu(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Operand g, u, y;
  if (!HasArity(info, "swiglu", 3) || !ReadOperand(env, info[0], "g", &g) || !ReadOperand(env, info[1], "u", &u) ||
      !ReadOperand(env, info[2], "y", &y))
    return env.Undefined();
  if (u.length != g.length || y.length != g.length) {
    Napi::RangeError::New(env, "g, u and y must have the same length").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  SwigluLoop(g.data, u.data, y.data, g.length);
  return env.Undefined();
}

// The gradient's loop, apart from the argument checks (whose exception paths kept GCC from vectorizing
// it); the outputs are fresh arrays, apart from the inputs (the kernels allocate them). Built per CPU
// family (cpu-clones.h).
TORL_CPU_CLONES __attribute__((noinline)) static void SwigluGradLoop(const float* __restrict g,
                                                                     const float* __restrict u,
                                                                     const float* __restrict dy,
                                                                     float* __restrict dg, float* __restrict du,
                                                                     size_t n) {
  for (size_t i = 0; i < n; i++) {
    const float gi = g[i];
    const float s = Sigmoid(gi);
    dg[i] = dy[i] * u[i] * s * (1.0f + gi * (1.0f - s));
    du[i] = dy[i] * gi * s;
  }
}

// swigluGrad(g, u, dy, dg, du): dg = dy u s (1 + g (1 - s)), du = dy g s, with s = sigmoid(g).
Napi::Value SwigluGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Operand g, u, dy, dg, du;
  if (!HasArity(info, "swigluGrad", 5) || !ReadOperand(env, info[0], "g", &g) || !ReadOperand(env, info[1], "u", &u) ||
      !ReadOperand(env, info[2], "dy", &dy) || !ReadOperand(env, info[3], "dg", &dg) ||
      !ReadOperand(env, info[4], "du", &du))
    return env.Undefined();
  if (u.length != g.length || dy.length != g.length || dg.length != g.length || du.length != g.length) {
    Napi::RangeError::New(env, "g, u, dy, dg and du must have the same length").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  SwigluGradLoop(g.data, u.data, dy.data, dg.data, du.data, g.length);
  return env.Undefined();
}

}  // namespace torl_blas
