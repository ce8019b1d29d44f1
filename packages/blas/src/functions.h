// The addon's exported functions, one source file each (registered in addon.cc).
#pragma once
#include <napi.h>

namespace torl_blas {

Napi::Value Gemm(const Napi::CallbackInfo& info);
Napi::Value Info(const Napi::CallbackInfo& info);
Napi::Value SetThreads(const Napi::CallbackInfo& info);
Napi::Value AdamW(const Napi::CallbackInfo& info);
Napi::Value LogSoftmaxPick(const Napi::CallbackInfo& info);
Napi::Value LogSoftmaxPickGrad(const Napi::CallbackInfo& info);
Napi::Value RmsNorm(const Napi::CallbackInfo& info);
Napi::Value RmsNormGrad(const Napi::CallbackInfo& info);
Napi::Value Swiglu(const Napi::CallbackInfo& info);
Napi::Value SwigluGrad(const Napi::CallbackInfo& info);
Napi::Value DecodeAttention(const Napi::CallbackInfo& info);
Napi::Value MatmulBf16(const Napi::CallbackInfo& info);
Napi::Value MatmulBf16Tiles(const Napi::CallbackInfo& info);
Napi::Value PackBf16Tiles(const Napi::CallbackInfo& info);
Napi::Value UnpackBf16Tiles(const Napi::CallbackInfo& info);
Napi::Value AmxInfo(const Napi::CallbackInfo& info);
Napi::Value SetAmx(const Napi::CallbackInfo& info);
Napi::Value SetActivationDtype(const Napi::CallbackInfo& info);
Napi::Value ActivationDtype(const Napi::CallbackInfo& info);
Napi::Value WidenBf16(const Napi::CallbackInfo& info);
Napi::Value RoundBf16(const Napi::CallbackInfo& info);
Napi::Value AddInto(const Napi::CallbackInfo& info);
Napi::Value SumSquares(const Napi::CallbackInfo& info);
Napi::Value MapFile(const Napi::CallbackInfo& info);
Napi::Value ReleaseMapped(const Napi::CallbackInfo& info);
Napi::Value ReserveMapping(const Napi::CallbackInfo& info);
Napi::Value MapFileInto(const Napi::CallbackInfo& info);
Napi::Value PageSizeOf(const Napi::CallbackInfo& info);
Napi::Value TrimHeap(const Napi::CallbackInfo& info);

}  // namespace torl_blas
