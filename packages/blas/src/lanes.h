// 16 float lanes as GCC's vector extension (one AVX-512 register, two AVX2 or four SSE ones: the same
// arithmetic in each build), and the fixed order in which a dot product's 16 running sums are added up.
#pragma once

namespace torl_blas {

typedef float Lanes __attribute__((vector_size(64)));
typedef float HalfLanes __attribute__((vector_size(32)));
typedef float QuarterLanes __attribute__((vector_size(16)));

// The 16 lanes halved twice into 4, then ((l0 + l1) + (l2 + l3)) + rest: a few adds, not 16 in a row,
// and the same bits whichever build runs it.
__attribute__((always_inline)) inline float SumLanes(Lanes acc, float rest) {
  HalfLanes lo, hi;
  __builtin_memcpy(&lo, &acc, sizeof lo);
  __builtin_memcpy(&hi, reinterpret_cast<const char*>(&acc) + sizeof lo, sizeof hi);
  lo += hi;
  QuarterLanes q0, q1;
  __builtin_memcpy(&q0, &lo, sizeof q0);
  __builtin_memcpy(&q1, reinterpret_cast<const char*>(&lo) + sizeof q0, sizeof q1);
  q0 += q1;
  return ((q0[0] + q0[1]) + (q0[2] + q0[3])) + rest;
}

}  // namespace torl_blas
