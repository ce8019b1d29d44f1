// The module's entry: one export per function in functions.h.
#include <napi.h>

#include "functions.h"

namespace {

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  exports.Set("gemm", Napi::Function::New(env, torl_blas::Gemm, "gemm"));
  exports.Set("info", Napi::Function::New(env, torl_blas::Info, "info"));
  exports.Set("setThreads", Napi::Function::New(env, torl_blas::SetThreads, "setThreads"));
  exports.Set("adamw", Napi::Function::New(env, torl_blas::AdamW, "adamw"));
  exports.Set("logSoftmaxPick", Napi::Function::New(env, torl_blas::LogSoftmaxPick, "logSoftmaxPick"));
  exports.Set("logSoftmaxPickGrad", Napi::Function::New(env, torl_blas::LogSoftmaxPickGrad, "logSoftmaxPickGrad"));
  return exports;
}

}  // namespace

NODE_API_MODULE(torl_blas, Init)
