// Float32 matrix products for the tensor backend, computed by OpenBLAS's sgemm on memory the caller owns
// (Float32Array views, e.g. into the wasm heap), so nothing is copied in or out.
#include <cblas.h>
#include <napi.h>

#include <cstdint>

#include "args.h"
#include "functions.h"

namespace torl_blas {

// gemm(a, b, c, batch, m, n, k, transposeA, transposeB, strideA, strideB[, accumulate]):
// for each i < batch, c[i] (m x n) = op(a[i]) (m x k) * op(b[i]) (k x n), row-major, where a[i] starts at
// i * strideA floats (0 broadcasts one matrix to every batch entry), likewise b[i]; c is dense. With
// `accumulate` the product is added to what c holds (sgemm's beta = 1) instead of replacing it.
Napi::Value Gemm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  // accumulate is optional: a caller of the 11-argument form keeps c = product
  if (info.Length() != 11 && info.Length() != 12) {
    Napi::TypeError::New(env, "gemm takes 11 or 12 arguments").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Operand a, b, c;
  if (!ReadOperand(env, info[0], "a", &a) || !ReadOperand(env, info[1], "b", &b) ||
      !ReadOperand(env, info[2], "c", &c))
    return env.Undefined();
  int64_t batch, m, n, k, strideA, strideB;
  if (!ReadCount(env, info[3], "batch", &batch) || !ReadCount(env, info[4], "m", &m) ||
      !ReadCount(env, info[5], "n", &n) || !ReadCount(env, info[6], "k", &k) ||
      !ReadCount(env, info[9], "strideA", &strideA) || !ReadCount(env, info[10], "strideB", &strideB))
    return env.Undefined();
  const bool transposeA = info[7].ToBoolean().Value();
  const bool transposeB = info[8].ToBoolean().Value();
  // it changes what c ends up holding: anything but a boolean (or undefined: false) is refused
  if (info.Length() == 12 && !info[11].IsBoolean() && !info[11].IsUndefined()) {
    Napi::TypeError::New(env, "gemm: accumulate must be a boolean").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const bool accumulate = info.Length() == 12 && info[11].IsBoolean() && info[11].ToBoolean().Value();
  const float beta = accumulate ? 1.0f : 0.0f;
  // Bounds: the last batch entry of each operand must lie inside its array, so a wrong shape can never
  // read or write past the memory the caller handed over.
  const int64_t last = batch > 0 ? batch - 1 : 0;
  if (batch > 0 && (static_cast<uint64_t>(last * strideA + m * k) > a.length ||
                    static_cast<uint64_t>(last * strideB + k * n) > b.length ||
                    static_cast<uint64_t>(batch * m * n) > c.length)) {
    Napi::RangeError::New(env, "gemm: an operand is shorter than batch, m, n, k and the strides say")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (m == 0 || n == 0) return env.Undefined();
  const int lda = static_cast<int>(transposeA ? m : k);
  const int ldb = static_cast<int>(transposeB ? k : n);
  for (int64_t i = 0; i < batch; i++) {
    float* ci = c.data + i * m * n;
    if (k == 0) {
      if (!accumulate)
        for (int64_t j = 0; j < m * n; j++) ci[j] = 0.0f;
      continue;
    }
    if (m == 1) {
      // One row (batch-1 decoding): a is a contiguous k-vector whatever transposeA says, and sgemv reads
      // b where it lies, whereas sgemm would first pack all of b, which costs as much as the product.
      if (transposeB)
        cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(n), static_cast<int>(k), 1.0f, b.data + i * strideB,
                    ldb, a.data + i * strideA, 1, beta, ci, 1);
      else
        cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(k), static_cast<int>(n), 1.0f, b.data + i * strideB,
                    ldb, a.data + i * strideA, 1, beta, ci, 1);
      continue;
    }
    cblas_sgemm(CblasRowMajor, transposeA ? CblasTrans : CblasNoTrans, transposeB ? CblasTrans : CblasNoTrans,
                static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), 1.0f, a.data + i * strideA, lda,
                b.data + i * strideB, ldb, beta, ci, static_cast<int>(n));
  }
  return env.Undefined();
}

// info(): which OpenBLAS build and CPU kernel this process runs, and its thread count.
Napi::Value Info(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  out.Set("config", Napi::String::New(env, openblas_get_config()));
  out.Set("coreName", Napi::String::New(env, openblas_get_corename()));
  out.Set("threads", Napi::Number::New(env, openblas_get_num_threads()));
  return out;
}

// setThreads(n): OpenBLAS's own thread pool size for this process.
Napi::Value SetThreads(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t n;
  if (!HasArity(info, "setThreads", 1) || !ReadCount(env, info[0], "threads", &n)) return env.Undefined();
  if (n < 1) {
    Napi::RangeError::New(env, "threads must be at least 1").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  openblas_set_num_threads(static_cast<int>(n));
  return env.Undefined();
}

}  // namespace torl_blas
