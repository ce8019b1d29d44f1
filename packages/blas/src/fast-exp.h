// A float exp that loops vectorize (libm's expf takes one value at a time).
#pragma once
#include <cstdint>

namespace torl_blas {

// exp(x) for x <= 88 (every call here subtracts the row's max or its logsumexp first, so x <= ~0), within
// 2 float ulps, written so that loops over it vectorize (libm's expf is one value at a time, and the pick
// spends most of its time in exp): x = n ln2 + r with |r| <= ln2 / 2, e^r by its degree-6 Taylor
// polynomial, 2^n put into the exponent bits. Below -87 (e^x under the smallest normal float) it is 0.
__attribute__((always_inline)) inline float ExpNonPositive(float x) {
  x = x < -87.0f ? -87.0f : x;
  // Round to nearest by adding and subtracting 1.5 * 2^23 (no floor: that would not vectorize on SSE2).
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // ln2 split in two so that n * ln2 is exact enough for the subtraction.
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  __builtin_memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// sigmoid(x) = 1 / (1 + e^-x) through e^-|x| (never above 1), so it vectorizes and never overflows.
__attribute__((always_inline)) inline float Sigmoid(float x) {
  const float e = ExpNonPositive(x < 0 ? x : -x);
  const float s = 1.0f / (1.0f + e);
  return x < 0 ? e * s : s;
}

}  // namespace torl_blas
