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
  exports.Set("rmsNorm", Napi::Function::New(env, torl_blas::RmsNorm, "rmsNorm"));
  exports.Set("rmsNormGrad", Napi::Function::New(env, torl_blas::RmsNormGrad, "rmsNormGrad"));
  exports.Set("swiglu", Napi::Function::New(env, torl_blas::Swiglu, "swiglu"));
  exports.Set("swigluGrad", Napi::Function::New(env, torl_blas::SwigluGrad, "swigluGrad"));
  exports.Set("decodeAttention", Napi::Function::New(env, torl_blas::DecodeAttention, "decodeAttention"));
  exports.Set("matmulBf16", Napi::Function::New(env, torl_blas::MatmulBf16, "matmulBf16"));
  exports.Set("matmulBf16Tiles", Napi::Function::New(env, torl_blas::MatmulBf16Tiles, "matmulBf16Tiles"));
  exports.Set("packBf16Tiles", Napi::Function::New(env, torl_blas::PackBf16Tiles, "packBf16Tiles"));
  exports.Set("unpackBf16Tiles", Napi::Function::New(env, torl_blas::UnpackBf16Tiles, "unpackBf16Tiles"));
  exports.Set("amx", Napi::Function::New(env, torl_blas::AmxInfo, "amx"));
  exports.Set("setAmx", Napi::Function::New(env, torl_blas::SetAmx, "setAmx"));
  exports.Set("setActivationDtype", Napi::Function::New(env, torl_blas::SetActivationDtype, "setActivationDtype"));
  exports.Set("activationDtype", Napi::Function::New(env, torl_blas::ActivationDtype, "activationDtype"));
  exports.Set("widenBf16", Napi::Function::New(env, torl_blas::WidenBf16, "widenBf16"));
  exports.Set("roundBf16", Napi::Function::New(env, torl_blas::RoundBf16, "roundBf16"));
  exports.Set("addInto", Napi::Function::New(env, torl_blas::AddInto, "addInto"));
  exports.Set("sumSquares", Napi::Function::New(env, torl_blas::SumSquares, "sumSquares"));
  exports.Set("mapFile", Napi::Function::New(env, torl_blas::MapFile, "mapFile"));
  exports.Set("releaseMapped", Napi::Function::New(env, torl_blas::ReleaseMapped, "releaseMapped"));
  exports.Set("reserveMapping", Napi::Function::New(env, torl_blas::ReserveMapping, "reserveMapping"));
  exports.Set("mapFileInto", Napi::Function::New(env, torl_blas::MapFileInto, "mapFileInto"));
  exports.Set("pageSize", Napi::Function::New(env, torl_blas::PageSizeOf, "pageSize"));
  exports.Set("trimHeap", Napi::Function::New(env, torl_blas::TrimHeap, "trimHeap"));
  return exports;
}

}  // namespace

NODE_API_MODULE(torl_blas, Init)
