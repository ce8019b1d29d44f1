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

// A typed array of element type T (napi type `kind`): its data and length; else throws a TypeError saying
// `name` must be `what`.
template <typename T>
inline bool ReadTypedArray(const Napi::Env& env, const Napi::Value& value, const char* name, napi_typedarray_type kind,
                           const char* what, T** data, size_t* length) {
  if (!value.IsTypedArray() || value.As<Napi::TypedArray>().TypedArrayType() != kind) {
    Napi::TypeError::New(env, std::string(name) + " must be " + what).ThrowAsJavaScriptException();
    return false;
  }
  Napi::TypedArrayOf<T> array = value.As<Napi::TypedArrayOf<T>>();
  *data = array.Data();
  *length = array.ElementLength();
  return true;
}

// A Uint16Array of bfloat16 bits.
inline bool ReadBf16Bits(const Napi::Env& env, const Napi::Value& value, const char* name, uint16_t** data,
                         size_t* length) {
  return ReadTypedArray<uint16_t>(env, value, name, napi_uint16_array, "a Uint16Array of bfloat16 bits", data, length);
}

inline bool ReadInt32Array(const Napi::Env& env, const Napi::Value& value, const char* name, const int32_t** data,
                           size_t* length) {
  int32_t* mutableData;
  if (!ReadTypedArray<int32_t>(env, value, name, napi_int32_array, "an Int32Array", &mutableData, length)) return false;
  *data = mutableData;
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
