// Matrix products of float32 rows with a weight held as bfloat16 bits. The weight is widened one tile at a
// time into a small float32 buffer that stays in cache, and OpenBLAS multiplies each tile where it lies:
// the weight is read once, 2 bytes a value, no float32 copy of the whole of it is ever written, and the
// arithmetic is sgemm's (sgemv's for one row), so the speed is close to a float32 product on the widened
// weight.
//
// Two layouts of the weight W, both row-major:
// - [n, k] (transposeW): out[i][j] = x[i] . W[j]; a tile is a run of W's rows (contiguous);
// - [k, n]: out[i][j] = sum over p of x[i][p] W[p][j]; a tile is a band of W's columns where W is wider
//   than deep, else a run of W's whole rows (contiguous, read at full speed; the down projection, and the
//   gradient through the LM head, where k is the vocabulary), each run's product added onto the sum of
//   the runs before it.
// The tiles, and so the calls, depend on the shapes alone: the bits depend on the shapes, the values and
// OpenBLAS's CPU kernel, never on what ran before. A forward pass and its recomputation under a tape make
// the same calls, hence the same bits.
#include <cblas.h>
#include <napi.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "args.h"
#include "cpu-clones.h"
#include "functions.h"

namespace torl_blas {

namespace {

// About 4 MB of float32 per tile: big enough that each sgemm call's packing of x is paid over many
// columns, small enough to stay in the last-level cache beside x.
constexpr int64_t kTileFloats = 1 << 20;

// Tile width in columns (or depth in rows) for lines of `length` floats: a multiple of 16, at least 16.
int64_t TileColumns(int64_t length) {
  int64_t nb = kTileFloats / (length > 0 ? length : 1);
  nb -= nb % 16;
  return nb < 16 ? 16 : nb;
}

}  // namespace

// count bfloat16 values at src, widened (exactly: a bf16 is the top half of a float32) into dst.
TORL_CPU_CLONES void WidenRun(const uint16_t* src, float* dst, int64_t count) {
  uint32_t* out = reinterpret_cast<uint32_t*>(dst);
  for (int64_t i = 0; i < count; i++) out[i] = static_cast<uint32_t>(src[i]) << 16;
}

// count float32 values at src rounded to bfloat16 bits, to nearest even (NaN becomes the quiet NaN
// 0x7fc0; overflow rounds to infinity), as torch's .to(torch.bfloat16) does.
TORL_CPU_CLONES void RoundRun(const float* src, uint16_t* dst, int64_t count) {
  const uint32_t* in = reinterpret_cast<const uint32_t*>(src);
  for (int64_t i = 0; i < count; i++) {
    const uint32_t b = in[i];
    const uint16_t rounded = static_cast<uint16_t>((b + 0x7fffu + ((b >> 16) & 1u)) >> 16);
    dst[i] = (b & 0x7fffffffu) > 0x7f800000u ? 0x7fc0 : rounded;
  }
}

namespace {

struct Product {
  const float* x;
  const uint16_t* w;
  float* out;
  int64_t m, n, k;
};

// out[:, j0:j0+cols] = x[:, p0:p0+depth] . T (beta 0), or += (beta 1), for the widened tile T: [depth, cols]
// (ld cols), or [cols, depth] read transposed (ld depth). sgemv for one row, as gemm (src/gemm.cc) does.
void MultiplyTile(const Product& a, const float* tile, bool transposed, int64_t p0, int64_t depth, int64_t j0,
                  int64_t cols, float beta) {
  const int d = static_cast<int>(depth), c = static_cast<int>(cols), ld = transposed ? d : c;
  if (a.m == 1)
    cblas_sgemv(CblasRowMajor, transposed ? CblasNoTrans : CblasTrans, transposed ? c : d, transposed ? d : c, 1.0f,
                tile, ld, a.x + p0, 1, beta, a.out + j0, 1);
  else
    cblas_sgemm(CblasRowMajor, CblasNoTrans, transposed ? CblasTrans : CblasNoTrans, static_cast<int>(a.m), c, d, 1.0f,
                a.x + p0, static_cast<int>(a.k), tile, ld, beta, a.out + j0, static_cast<int>(a.n));
}

// out[:, j0:j0+nb] = x . W[j0:j0+nb]^T, W [n, k]: the tile is nb whole rows of W.
void RowTile(const Product& a, float* tile, int64_t j0, int64_t nb) {
  WidenRun(a.w + j0 * a.k, tile, nb * a.k);
  MultiplyTile(a, tile, true, 0, a.k, j0, nb, 0.0f);
}

// out[:, j0:j0+nb] = x . W[:, j0:j0+nb], W [k, n]: the tile is a band of nb columns of W.
void ColumnTile(const Product& a, float* tile, int64_t j0, int64_t nb) {
  for (int64_t p = 0; p < a.k; p++) WidenRun(a.w + p * a.n + j0, tile + p * nb, nb);
  MultiplyTile(a, tile, false, 0, a.k, j0, nb, 0.0f);
}

// out += or = x[:, p0:p0+kb] . W[p0:p0+kb, :], W [k, n]: the tile is kb whole rows of W.
void DepthTile(const Product& a, float* tile, int64_t p0, int64_t kb) {
  WidenRun(a.w + p0 * a.n, tile, kb * a.n);
  MultiplyTile(a, tile, false, p0, kb, 0, a.n, p0 == 0 ? 0.0f : 1.0f);
}

// k past which a [k, n] weight is tiled by rows whatever its width: a band of columns would be a few
// columns wide, and each sgemm call would pack all of x (k floats a row) again for them.
constexpr int64_t kLongDepth = 1 << 16;

// One tile buffer per thread, kept between calls: the addon's callers run on the JS thread, one product at
// a time.
void Run(const Product& a, bool transposeW) {
  thread_local std::vector<float> tile;
  if (!transposeW && (a.k > kLongDepth || a.k > a.n)) {
    const int64_t depth = TileColumns(a.n);
    const int64_t need = depth * a.n;
    if (static_cast<int64_t>(tile.size()) < need) tile.resize(static_cast<size_t>(need));
    for (int64_t p0 = 0; p0 < a.k; p0 += depth) DepthTile(a, tile.data(), p0, p0 + depth < a.k ? depth : a.k - p0);
    return;
  }
  const int64_t width = TileColumns(a.k);
  const int64_t need = width * a.k;
  if (static_cast<int64_t>(tile.size()) < need) tile.resize(static_cast<size_t>(need));
  for (int64_t j0 = 0; j0 < a.n; j0 += width) {
    const int64_t nb = j0 + width < a.n ? width : a.n - j0;
    if (transposeW) RowTile(a, tile.data(), j0, nb);
    else ColumnTile(a, tile.data(), j0, nb);
  }
}

}  // namespace

// matmulBf16(x, w, out, m, n, k, transposeW): out (m x n) = x (m x k) . W, with W bfloat16 bits (a
// Uint16Array) of shape [n, k] read transposed when transposeW, else [k, n]; x and out float32.
Napi::Value MatmulBf16(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "matmulBf16", 7)) return env.Undefined();
  Operand x, out;
  uint16_t* w;
  size_t wLength;
  if (!ReadOperand(env, info[0], "x", &x) || !ReadBf16Bits(env, info[1], "w", &w, &wLength) ||
      !ReadOperand(env, info[2], "out", &out))
    return env.Undefined();
  int64_t m, n, k;
  if (!ReadCount(env, info[3], "m", &m) || !ReadCount(env, info[4], "n", &n) || !ReadCount(env, info[5], "k", &k))
    return env.Undefined();
  if (!info[6].IsBoolean()) {
    Napi::TypeError::New(env, "transposeW must be a boolean").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  const bool transposeW = info[6].As<Napi::Boolean>().Value();
  // Bounds, as gemm checks them: a wrong shape never reads or writes past the memory handed over.
  if (static_cast<uint64_t>(m * k) > x.length || static_cast<uint64_t>(n * k) > wLength ||
      static_cast<uint64_t>(m * n) > out.length) {
    Napi::RangeError::New(env, "matmulBf16: an operand is shorter than m, n and k say").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (m == 0 || n == 0) return env.Undefined();
  if (k == 0) {
    for (int64_t j = 0; j < m * n; j++) out.data[j] = 0.0f;
    return env.Undefined();
  }
  Run(Product{x.data, w, out.data, m, n, k}, transposeW);
  return env.Undefined();
}

// widenBf16(bits, out): out[i] = the float32 value of bfloat16 bits[i]; the lengths must be equal.
Napi::Value WidenBf16(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "widenBf16", 2)) return env.Undefined();
  uint16_t* bits;
  size_t n;
  Operand out;
  if (!ReadBf16Bits(env, info[0], "bits", &bits, &n) || !ReadOperand(env, info[1], "out", &out)) return env.Undefined();
  if (out.length != n) {
    Napi::RangeError::New(env, "widenBf16: " + std::to_string(n) + " values into an array of " +
                                   std::to_string(out.length))
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  WidenRun(bits, out.data, static_cast<int64_t>(n));
  return env.Undefined();
}

// roundBf16(values, bits): bits[i] = values[i] rounded to bfloat16 (RoundRun); the lengths must be equal.
Napi::Value RoundBf16(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "roundBf16", 2)) return env.Undefined();
  Operand values;
  uint16_t* bits;
  size_t n;
  if (!ReadOperand(env, info[0], "values", &values) || !ReadBf16Bits(env, info[1], "bits", &bits, &n))
    return env.Undefined();
  if (values.length != n) {
    Napi::RangeError::New(env, "roundBf16: " + std::to_string(values.length) + " values into " +
                                   std::to_string(n) + " bits")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  RoundRun(values.data, bits, static_cast<int64_t>(n));
  return env.Undefined();
}

}  // namespace torl_blas
