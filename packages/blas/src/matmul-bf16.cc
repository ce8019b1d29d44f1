// Matrix products of float32 rows with a weight held as bfloat16 bits, widened in registers: the weight is
// read once, 2 bytes a value, and no float32 copy of it is ever written (the generic path widens the whole
// weight into a float32 tensor and then runs sgemm on it, reading 4 bytes a value after writing them).
//
// Two layouts of the weight W, both row-major:
// - [n, k] (transposeW): out[i][j] = x[i] . W[j], a dot product over k. Each dot product keeps 16 running
//   sums (lane l adds the terms p = l mod 16 in order), then the terms past the last multiple of 16 in one
//   scalar sum, then a fixed tree: the 16 lanes halved to 8, to 4, ((l0 + l1) + (l2 + l3)) + rest.
// - [k, n]: out[i][j] = sum over p of x[i][p] W[p][j], added in the order p = 0, 1, ..., k - 1 into one
//   float, whatever the blocking (a block resumes from the partial sum it stored).
// So the result does not depend on the CPU family the loops were built for: the addon is built with
// -ffp-contract=off (no fused multiply-adds), and the AVX-512, AVX2 and baseline builds below differ only
// in how many lanes one instruction covers. Accumulation is float32 and x stays float32.
#include <napi.h>

#include <cstdint>
#include <string>

#include "args.h"
#include "functions.h"
#include "lanes.h"

namespace torl_blas {

namespace {

typedef uint16_t Bits16 __attribute__((vector_size(32)));
typedef uint32_t Bits32 __attribute__((vector_size(64)));

// 16 bfloat16 values at p, widened (exactly: a bf16 is the top half of a float32).
__attribute__((always_inline)) inline Lanes Widen16(const uint16_t* p) {
  Bits16 h;
  __builtin_memcpy(&h, p, sizeof h);
  const Bits32 u = __builtin_convertvector(h, Bits32) << 16;
  Lanes f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

__attribute__((always_inline)) inline float Widen(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}

struct Product {
  const float* x;
  const uint16_t* w;
  float* out;
  int64_t m, n, k;
};

// W [n, k]: R rows of x (from row i) against J rows of W (from row j), each a dot product over k.
template <int R, int J>
__attribute__((always_inline)) inline void DotBlock(const Product& a, int64_t i, int64_t j) {
  const int64_t k = a.k;
  Lanes acc[R][J] = {};
  int64_t p = 0;
  for (; p + 16 <= k; p += 16) {
    Lanes wv[J];
    for (int c = 0; c < J; c++) wv[c] = Widen16(a.w + (j + c) * k + p);
    for (int r = 0; r < R; r++) {
      Lanes xv;
      __builtin_memcpy(&xv, a.x + (i + r) * k + p, sizeof xv);
      for (int c = 0; c < J; c++) acc[r][c] += xv * wv[c];
    }
  }
  for (int r = 0; r < R; r++)
    for (int c = 0; c < J; c++) {
      const float* xr = a.x + (i + r) * k;
      const uint16_t* wc = a.w + (j + c) * k;
      float rest = 0.0f;
      for (int64_t q = p; q < k; q++) rest += xr[q] * Widen(wc[q]);
      a.out[(i + r) * a.n + j + c] = SumLanes(acc[r][c], rest);
    }
}

template <int R>
__attribute__((always_inline)) inline void DotRows(const Product& a, int64_t i, int64_t j0, int64_t j1) {
  int64_t j = j0;
  for (; j + 2 <= j1; j += 2) DotBlock<R, 2>(a, i, j);
  for (; j < j1; j++) DotBlock<R, 1>(a, i, j);
}

// W rows in blocks that stay in cache while every group of 4 rows of x passes over them: for a few rows of
// x (decoding) W is streamed from memory once; for many (a prefill) each block is reused from cache.
__attribute__((always_inline)) inline void DotProduct(const Product& a) {
  const int64_t block = 32;
  for (int64_t j0 = 0; j0 < a.n; j0 += block) {
    const int64_t j1 = j0 + block < a.n ? j0 + block : a.n;
    int64_t i = 0;
    for (; i + 4 <= a.m; i += 4) DotRows<4>(a, i, j0, j1);
    switch (a.m - i) {
      case 3: DotRows<3>(a, i, j0, j1); break;
      case 2: DotRows<2>(a, i, j0, j1); break;
      case 1: DotRows<1>(a, i, j0, j1); break;
      default: break;
    }
  }
}

// W [k, n]: R rows of x times W's rows [p0, p1) into C groups of 16 columns from column j, adding onto
// the partial sums in out (p0 > 0) or starting from zero.
template <int R, int C>
__attribute__((always_inline)) inline void AxpyBlock(const Product& a, int64_t i, int64_t j, int64_t p0, int64_t p1) {
  Lanes acc[R][C];
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) {
      if (p0 == 0) acc[r][c] = Lanes{};
      else __builtin_memcpy(&acc[r][c], a.out + (i + r) * a.n + j + 16 * c, sizeof(Lanes));
    }
  for (int64_t p = p0; p < p1; p++) {
    Lanes wv[C];
    for (int c = 0; c < C; c++) wv[c] = Widen16(a.w + p * a.n + j + 16 * c);
    for (int r = 0; r < R; r++) {
      const float xv = a.x[(i + r) * a.k + p];
      for (int c = 0; c < C; c++) acc[r][c] += xv * wv[c];
    }
  }
  for (int r = 0; r < R; r++)
    for (int c = 0; c < C; c++) __builtin_memcpy(a.out + (i + r) * a.n + j + 16 * c, &acc[r][c], sizeof(Lanes));
}

template <int R>
__attribute__((always_inline)) inline void AxpyRows(const Product& a, int64_t i, int64_t j0, int64_t j1, int64_t p0,
                                                    int64_t p1) {
  int64_t j = j0;
  for (; j + 64 <= j1; j += 64) AxpyBlock<R, 4>(a, i, j, p0, p1);
  for (; j + 16 <= j1; j += 16) AxpyBlock<R, 1>(a, i, j, p0, p1);
  // The last columns one at a time, in the same order of p.
  for (; j < j1; j++)
    for (int r = 0; r < R; r++) {
      float s = p0 == 0 ? 0.0f : a.out[(i + r) * a.n + j];
      for (int64_t p = p0; p < p1; p++) s += a.x[(i + r) * a.k + p] * Widen(a.w[p * a.n + j]);
      a.out[(i + r) * a.n + j] = s;
    }
}

// Columns in stripes of 256 and W's rows in tiles of 128 (a 64 KB tile of W, reused from cache by every
// group of 4 rows of x; the strided reads of one tile touch few pages).
__attribute__((always_inline)) inline void AxpyProduct(const Product& a) {
  const int64_t stripe = 256, tile = 128;
  for (int64_t j0 = 0; j0 < a.n; j0 += stripe) {
    const int64_t j1 = j0 + stripe < a.n ? j0 + stripe : a.n;
    for (int64_t p0 = 0; p0 < a.k; p0 += tile) {
      const int64_t p1 = p0 + tile < a.k ? p0 + tile : a.k;
      int64_t i = 0;
      for (; i + 4 <= a.m; i += 4) AxpyRows<4>(a, i, j0, j1, p0, p1);
      switch (a.m - i) {
        case 3: AxpyRows<3>(a, i, j0, j1, p0, p1); break;
        case 2: AxpyRows<2>(a, i, j0, j1, p0, p1); break;
        case 1: AxpyRows<1>(a, i, j0, j1, p0, p1); break;
        default: break;
      }
    }
  }
}

__attribute__((always_inline)) inline void Run(const Product& a, bool transposeW) {
  if (transposeW) DotProduct(a);
  else AxpyProduct(a);
}

// One build per CPU family, as TORL_CPU_CLONES makes them (cpu-clones.h), but named, so that a caller can
// ask for a given one (the tests compare their bits).
#if defined(__x86_64__) && defined(__linux__) && defined(__GNUC__)
__attribute__((target("avx512f"), noinline)) void RunAvx512(const Product& a, bool t) { Run(a, t); }
__attribute__((target("avx2"), noinline)) void RunAvx2(const Product& a, bool t) { Run(a, t); }
#define TORL_X86_BUILDS 1
#endif
__attribute__((noinline)) void RunBaseline(const Product& a, bool t) { Run(a, t); }

using RunFn = void (*)(const Product&, bool);

// The build named `build`: "auto" (the widest this CPU runs), "avx512f", "avx2" or "baseline". Null, with
// the reason in `why`, for another name or a build this CPU (or a build off x86-64 Linux) cannot run.
RunFn Pick(const std::string& build, std::string* why) {
  if (build == "baseline") return RunBaseline;
#ifdef TORL_X86_BUILDS
  __builtin_cpu_init();
  const bool has512 = __builtin_cpu_supports("avx512f"), has2 = __builtin_cpu_supports("avx2");
  if (build == "auto") return has512 ? RunAvx512 : has2 ? RunAvx2 : RunBaseline;
  if (build == "avx512f" && has512) return RunAvx512;
  if (build == "avx2" && has2) return RunAvx2;
  if (build == "avx512f" || build == "avx2") {
    *why = "this CPU does not run the " + build + " build";
    return nullptr;
  }
#else
  if (build == "auto") return RunBaseline;
  if (build == "avx512f" || build == "avx2") {
    *why = "only the baseline build exists off x86-64 Linux";
    return nullptr;
  }
#endif
  *why = "build must be auto, avx512f, avx2 or baseline, got '" + build + "'";
  return nullptr;
}

}  // namespace

// matmulBf16(x, w, out, m, n, k, transposeW, build): out (m x n) = x (m x k) . W, with W bfloat16 bits
// (a Uint16Array) of shape [n, k] read transposed when transposeW, else [k, n]; x and out float32.
// `build`: "auto", "avx512f", "avx2" or "baseline" (every build gives the same bits).
Napi::Value MatmulBf16(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "matmulBf16", 8)) return env.Undefined();
  Operand x, out;
  if (!ReadOperand(env, info[0], "x", &x) || !ReadOperand(env, info[2], "out", &out)) return env.Undefined();
  if (!info[1].IsTypedArray() || info[1].As<Napi::TypedArray>().TypedArrayType() != napi_uint16_array) {
    Napi::TypeError::New(env, "w must be a Uint16Array of bfloat16 bits").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  Napi::Uint16Array w = info[1].As<Napi::Uint16Array>();
  int64_t m, n, k;
  if (!ReadCount(env, info[3], "m", &m) || !ReadCount(env, info[4], "n", &n) || !ReadCount(env, info[5], "k", &k))
    return env.Undefined();
  const bool transposeW = info[6].ToBoolean().Value();
  if (!info[7].IsString()) {
    Napi::TypeError::New(env, "build must be a string").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const std::string build = info[7].As<Napi::String>().Utf8Value();
  std::string why;
  const RunFn run = Pick(build, &why);
  if (!run) {
    Napi::RangeError::New(env, "matmulBf16: " + why).ThrowAsJavaScriptException();
    return env.Undefined();
  }
  // Bounds, as gemm checks them: a wrong shape never reads or writes past the memory handed over.
  if (static_cast<uint64_t>(m * k) > x.length || static_cast<uint64_t>(n * k) > w.ElementLength() ||
      static_cast<uint64_t>(m * n) > out.length) {
    Napi::RangeError::New(env, "matmulBf16: an operand is shorter than m, n and k say").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (m == 0 || n == 0) return env.Undefined();
  if (k == 0) {
    for (int64_t j = 0; j < m * n; j++) out.data[j] = 0.0f;
    return env.Undefined();
  }
  run(Product{x.data, w.Data(), out.data, m, n, k}, transposeW);
  return env.Undefined();
}

}  // namespace torl_blas
