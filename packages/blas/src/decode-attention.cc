// One decode step's attention for a layer, in one call: the new position's q, k and v (biases added,
// rotary embedding applied, q scaled by 1/sqrt(D)), k and v written into the cache in place, then
// softmax(q K^T + mask) V over the cache's slots. The op-by-op path reads q, k and v back to the host for
// the rotation and the cache write, and runs two batched products of 4-row matrices, which OpenBLAS packs
// per (row, head) at a cost comparable to the arithmetic.
#include <napi.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "args.h"
#include "cpu-clones.h"
#include "fast-exp.h"
#include "functions.h"
#include "lanes.h"

namespace torl_blas {

namespace {

struct Dims {
  int64_t batch, heads, kvHeads, headDim, capacity, span;
};

// The dot product of two D-vectors: 16 running sums in one vector, halved twice into 4 and then added
// up, so the loop vectorizes and the final sum is a few adds, not 16 in a row.
__attribute__((always_inline)) inline float Dot(const float* __restrict a, const float* __restrict b, int64_t D) {
  Lanes acc = {};
  int64_t d = 0;
  for (; d + 16 <= D; d += 16) {
    Lanes x, y;
    __builtin_memcpy(&x, a + d, sizeof x);
    __builtin_memcpy(&y, b + d, sizeof y);
    acc += x * y;
  }
  float rest = 0.0f;
  for (; d < D; d++) rest += a[d] * b[d];
  return SumLanes(acc, rest);
}

// Attention of the G rotated, scaled queries q (G x D) of one (row, kv head) against its cache block:
// keys and values (span x D, slots apart by D), an additive mask over the slots, context into out (G x D).
// Built per CPU family (cpu-clones.h).
TORL_CPU_CLONES void AttendGroup(const float* __restrict q, int64_t G, int64_t D, const float* __restrict keys,
                                 const float* __restrict values, const float* __restrict mask, int64_t span,
                                 float* __restrict scores, float* __restrict out) {
  for (int64_t g = 0; g < G; g++) {
    const float* qg = q + g * D;
    float* sg = scores + g * span;
    float max = -INFINITY;
    for (int64_t j = 0; j < span; j++) {
      const float s = Dot(qg, keys + j * D, D) + mask[j];
      sg[j] = s;
      max = s > max ? s : max;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < span; j++) {
      const float e = ExpNonPositive(sg[j] - max);
      sg[j] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < span; j++) sg[j] *= inv;
    // The context 16 columns at a time, summed over the slots in one vector of 16 lanes (GCC's vector
    // extension: one AVX-512 register, or four SSE ones in the baseline build).
    float* og = out + g * D;
    int64_t d0 = 0;
    // 64 columns at a time: four independent sums per slot, so the adds do not wait on each other.
    for (; d0 + 64 <= D; d0 += 64) {
      Lanes acc[4] = {};
      for (int64_t j = 0; j < span; j++) {
        const float* vj = values + j * D + d0;
        for (int c = 0; c < 4; c++) {
          Lanes part;
          __builtin_memcpy(&part, vj + 16 * c, sizeof part);
          acc[c] += sg[j] * part;
        }
      }
      __builtin_memcpy(og + d0, acc, sizeof acc);
    }
    for (; d0 + 16 <= D; d0 += 16) {
      Lanes acc = {};
      for (int64_t j = 0; j < span; j++) {
        Lanes vj;
        __builtin_memcpy(&vj, values + j * D + d0, sizeof vj);
        acc += sg[j] * vj;
      }
      __builtin_memcpy(og + d0, &acc, sizeof acc);
    }
    for (; d0 < D; d0++) {
      float acc = 0.0f;
      for (int64_t j = 0; j < span; j++) acc += sg[j] * values[j * D + d0];
      og[d0] = acc;
    }
  }
}

// x (+ bias), rotated by (cos, sin) in the rotate_half form and scaled, into dst (D floats).
void Rotate(const float* x, const float* bias, const float* cos, const float* sin, int64_t D, float scale,
            float* dst) {
  const int64_t half = D / 2;
  for (int64_t j = 0; j < half; j++) {
    const float x1 = bias ? x[j] + bias[j] : x[j];
    const float x2 = bias ? x[j + half] + bias[j + half] : x[j + half];
    dst[j] = (x1 * cos[j] - x2 * sin[j]) * scale;
    dst[j + half] = (x2 * cos[j] + x1 * sin[j]) * scale;
  }
}

// An optional bias: an empty Float32Array means none; otherwise it must hold `need` floats.
bool ReadBias(const Napi::Env& env, const Napi::Value& value, const char* name, int64_t need, const float** out) {
  Operand o;
  if (!ReadOperand(env, value, name, &o)) return false;
  if (o.length == 0) {
    *out = nullptr;
    return true;
  }
  if (static_cast<int64_t>(o.length) != need) {
    Napi::RangeError::New(env, std::string(name) + " must be empty or hold one value per output")
        .ThrowAsJavaScriptException();
    return false;
  }
  *out = o.data;
  return true;
}

}  // namespace

// decodeAttention(q, k, v, qBias, kBias, vBias, cos, sin, keys, values, mask, out,
//                 batch, heads, kvHeads, headDim, capacity, slots, span):
// q [B, H*D], k and v [B, KV*D] (the projections, biases not yet added; an empty bias array: none);
// cos and sin [B, D/2] (each row's position); keys and values [B, KV, capacity, D], where row b's rotated k
// and v are written at slots[b] (Int32Array [B]); mask [B, capacity] additive; out [B, H*D] the context.
// Slots [0, span) are attended (every slot < span).
Napi::Value DecodeAttention(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "decodeAttention", 19)) return env.Undefined();
  Operand q, k, v, cos, sin, keys, values, mask, out;
  if (!ReadOperand(env, info[0], "q", &q) || !ReadOperand(env, info[1], "k", &k) ||
      !ReadOperand(env, info[2], "v", &v) || !ReadOperand(env, info[6], "cos", &cos) ||
      !ReadOperand(env, info[7], "sin", &sin) || !ReadOperand(env, info[8], "keys", &keys) ||
      !ReadOperand(env, info[9], "values", &values) || !ReadOperand(env, info[10], "mask", &mask) ||
      !ReadOperand(env, info[11], "out", &out))
    return env.Undefined();
  Dims d;
  if (!ReadCount(env, info[12], "batch", &d.batch) || !ReadCount(env, info[13], "heads", &d.heads) ||
      !ReadCount(env, info[14], "kvHeads", &d.kvHeads) || !ReadCount(env, info[15], "headDim", &d.headDim) ||
      !ReadCount(env, info[16], "capacity", &d.capacity) || !ReadCount(env, info[18], "span", &d.span))
    return env.Undefined();
  const int32_t* slots;
  size_t slotCount;
  if (!ReadInt32Array(env, info[17], "slots", &slots, &slotCount)) return env.Undefined();
  const int64_t B = d.batch, H = d.heads, KV = d.kvHeads, D = d.headDim, cap = d.capacity;
  bool slotsFit = static_cast<int64_t>(slotCount) == B;
  for (int64_t b = 0; slotsFit && b < B; b++) slotsFit = slots[b] >= 0 && slots[b] < d.span;
  if (KV == 0 || H % KV != 0 || D % 2 != 0 || d.span > cap || !slotsFit) {
    Napi::RangeError::New(env,
                          "decodeAttention: heads must be a multiple of kvHeads, headDim even, one slot per "
                          "row, and every slot < span <= capacity")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const uint64_t rowsQ = B * H * D, rowsKV = B * KV * D, cacheLen = B * KV * cap * D;
  if (q.length != rowsQ || k.length != rowsKV || v.length != rowsKV || out.length != rowsQ ||
      cos.length != static_cast<uint64_t>(B * D / 2) || sin.length != cos.length || keys.length != cacheLen ||
      values.length != cacheLen || mask.length != static_cast<uint64_t>(B * cap)) {
    Napi::RangeError::New(env, "decodeAttention: an operand's length does not match batch, heads, kvHeads, "
                               "headDim and capacity")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const float *qBias, *kBias, *vBias;
  if (!ReadBias(env, info[3], "qBias", H * D, &qBias) || !ReadBias(env, info[4], "kBias", KV * D, &kBias) ||
      !ReadBias(env, info[5], "vBias", KV * D, &vBias))
    return env.Undefined();
  const int64_t G = H / KV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> rotated(G * D), scores(G * d.span);
  for (int64_t b = 0; b < B; b++) {
    const float* cb = cos.data + b * D / 2;
    const float* sb = sin.data + b * D / 2;
    for (int64_t h = 0; h < KV; h++) {
      const int64_t block = (b * KV + h) * cap * D;
      const int64_t at = block + static_cast<int64_t>(slots[b]) * D;
      const int64_t src = (b * KV + h) * D;
      Rotate(k.data + src, kBias ? kBias + h * D : nullptr, cb, sb, D, 1.0f, keys.data + at);
      for (int64_t e = 0; e < D; e++) values.data[at + e] = vBias ? v.data[src + e] + vBias[h * D + e] : v.data[src + e];
      for (int64_t g = 0; g < G; g++) {
        const int64_t head = (b * H + h * G + g) * D;
        Rotate(q.data + head, qBias ? qBias + (h * G + g) * D : nullptr, cb, sb, D, scale, rotated.data() + g * D);
      }
      AttendGroup(rotated.data(), G, D, keys.data + block, values.data + block, mask.data + b * cap, d.span,
                  scores.data(), out.data + (b * H + h * G) * D);
    }
  }
  return env.Undefined();
}

}  // namespace torl_blas
