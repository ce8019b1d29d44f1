// Argument readers shared by the addon's functions: each throws a JS TypeError/RangeError naming the
// argument and returns false, so a caller returns at once.
#pragma once
#include <napi.h>

#include <cstdint>
#include <string>

namespace torl_blas {

// Row-major view of one operand: where its first float is and how many floats it holds.
struct Operand {
  float* data;
  size_t length;
};

inline bool ReadOperand(const Napi::Env& env, const Napi::Value& value, const char* name, Operand* out) {
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_float32_array) {
    Napi::TypeError::New(env, std::string(name) + " must be a Float32Array").ThrowAsJavaScriptException();
    return false;
  }
  Napi::Float32Array array = value.As<Napi::Float32Array>();
  out->data = array.Data();
  out->length = array.ElementLength();
  return true;
}

inline bool ReadCount(const Napi::Env& env, const Napi::Value& value, const char* name, int64_t* out) {
  if (!value.IsNumber()) {
    Napi::TypeError::New(env, std::string(name) + " must be a number").ThrowAsJavaScriptException();
    return false;
  }
  int64_t v = value.As<Napi::Number>().Int64Value();
  if (v < 0 || v > INT32_MAX) {
    Napi::RangeError::New(env, std::string(name) + " must be in [0, 2^31)").ThrowAsJavaScriptException();
    return false;
  }
  *out = v;
  return true;
}

// A finite number (a rate, a coefficient).
inline bool ReadNumber(const Napi::Env& env, const Napi::Value& value, const char* name, double* out) {
  if (!value.IsNumber()) {
    Napi::TypeError::New(env, std::string(name) + " must be a number").ThrowAsJavaScriptException();
    return false;
  }
  *out = value.As<Napi::Number>().DoubleValue();
  return true;
}

// A Uint16Array of bfloat16 bits: its data and length; else throws a TypeError naming it.
inline bool ReadBf16Bits(const Napi::Env& env, const Napi::Value& value, const char* name, uint16_t** data,
                         size_t* length) {
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_uint16_array) {
    Napi::TypeError::New(env, std::string(name) + " must be a Uint16Array of bfloat16 bits").ThrowAsJavaScriptException();
    return false;
  }
  Napi::Uint16Array array = value.As<Napi::Uint16Array>();
  *data = array.Data();
  *length = array.ElementLength();
  return true;
}

inline bool ReadInt32Array(const Napi::Env& env, const Napi::Value& value, const char* name, const int32_t** data,
                           size_t* length) {
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != napi_int32_array) {
    Napi::TypeError::New(env, std::string(name) + " must be an Int32Array").ThrowAsJavaScriptException();
    return false;
  }
  Napi::Int32Array array = value.As<Napi::Int32Array>();
  *data = array.Data();
  *length = array.ElementLength();
  return true;
}

// Whether a function named `fn` was called with exactly `count` arguments; else throws a TypeError saying so.
inline bool HasArity(const Napi::CallbackInfo& info, const char* fn, size_t count) {
  if (info.Length() == count) return true;
  Napi::TypeError::New(info.Env(), std::string(fn) + " takes " + std::to_string(count) + " arguments")
      .ThrowAsJavaScriptException();
  return false;
}

}  // namespace torl_blas
