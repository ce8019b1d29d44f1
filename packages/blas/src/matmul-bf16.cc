// Matrix products of float32 rows with a weight held as bfloat16 bits. Up to kFewRows rows our own loops
// read the bits (below). From there the weight is widened one tile at a time into a small float32 buffer
// that stays in cache, and OpenBLAS multiplies each tile where it lies:
// the weight is read once, 2 bytes a value, no float32 copy of the whole of it is ever written, and the
// arithmetic is sgemm's, so the speed is close to a float32 product on the widened weight.
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

#include "amx.h"
#include "args.h"
#include "cpu-clones.h"
#include "functions.h"
#include "lanes.h"

namespace torl_blas {

namespace {

// 512 KB of float32 per tile: big enough that each sgemm call's packing of x is paid over many columns,
// small enough to stay in a core's L2 cache beside OpenBLAS's packed copy of it (2 MB on Sapphire Rapids,
// 512 KB on Zen 3; 4 MB tiles were 10-40% slower on the first at 48 rows).
constexpr int64_t kTileFloats = 1 << 17;

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
// (ld cols), or [cols, depth] read transposed (ld depth). Only for more than kFewRows rows.
void MultiplyTile(const Product& a, const float* tile, bool transposed, int64_t p0, int64_t depth, int64_t j0,
                  int64_t cols, float beta) {
  const int d = static_cast<int>(depth), c = static_cast<int>(cols), ld = transposed ? d : c;
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

// Up to kFewRows rows of x (a decode step's batch, generation's rows) the product reads the bits where
// they lie, widening them in registers: no tile is written, no OpenBLAS call packs one, and the weight's
// 2 bytes a value are read once, which is all such a product's time. The arithmetic is fixed by the code
// alone (GCC's vector extension, no fused multiply-adds: every build gives the same bits), and each output
// is computed from its own row of x alone, whatever the number of rows:
// - [n, k] read transposed: out[i][j] = x[i] . W[j], 16 running sums (lane l takes the indices p = l mod 16
//   of the whole chunks of 16) added up by SumLanes, plus the rest in order;
// - [k, n]: out[i][j] = sum over p of x[i][p] W[p][j], added in order of p from 0 (a lane per column).
// Such a product waits on memory: each loop asks for the weight's lines a block ahead of where it reads
// (kAheadRows rows of W further on), so that the loads find them in cache; without that the reads and the
// arithmetic took turns, at about half the speed the core draws from memory.
constexpr int64_t kFewRows = 8;

typedef uint16_t Bits16 __attribute__((vector_size(32)));
typedef uint32_t Words16 __attribute__((vector_size(64)));

__attribute__((always_inline)) inline Lanes Widen16(const uint16_t* src) {
  Bits16 bits;
  __builtin_memcpy(&bits, src, sizeof bits);
  const Words16 words = __builtin_convertvector(bits, Words16) << 16;
  Lanes values;
  __builtin_memcpy(&values, &words, sizeof values);
  return values;
}

// 32 values at src, widened into two vectors in order: one 64-byte load, a shift and a mask (the even and
// the odd values) and two permutes back into order. GCC 12 splits Widen16's conversion into halves and
// inserts, twice the work per value.
__attribute__((always_inline)) inline void Widen32(const uint16_t* src, Lanes& first, Lanes& second) {
  Words16 words;
  __builtin_memcpy(&words, src, sizeof words);
  const Words16 even = words << 16;
  const Words16 odd = words & 0xffff0000u;
  const Words16 lo = __builtin_shufflevector(even, odd, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const Words16 hi =
      __builtin_shufflevector(even, odd, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  __builtin_memcpy(&first, &lo, sizeof first);
  __builtin_memcpy(&second, &hi, sizeof second);
}

__attribute__((always_inline)) inline float Widen1(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  __builtin_memcpy(&value, &word, sizeof value);
  return value;
}

// Into the cache for reading soon (prefetcht0); never faults, so the line may lie past W's end.
__attribute__((always_inline)) inline void ReadSoon(const uint16_t* base, int64_t offset) {
  __builtin_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(base) + 2 * offset), 0, 3);
}

// out[i][j..j+R) for the M rows of x and R rows of W [n, k] from row j: each W chunk is widened once
// for all M rows; the R rows after them are asked for meanwhile. Chunks of 32 take x in two halves
// (2M registers) where that fits beside the sums, else chunks of 16; the order of the sums is the same.
template <int M, int R>
__attribute__((always_inline)) inline void DotRows(const Product& a, int64_t j) {
  const int64_t k = a.k;
  Lanes acc[R][M] = {};
  int64_t p = 0;
  if constexpr ((R + 2) * M + 2 <= 32) {
    for (; p + 32 <= k; p += 32) {
      Lanes xs[M], xt[M];
      for (int i = 0; i < M; i++) {
        __builtin_memcpy(&xs[i], a.x + i * k + p, sizeof xs[i]);
        __builtin_memcpy(&xt[i], a.x + i * k + p + 16, sizeof xt[i]);
      }
      for (int r = 0; r < R; r++) {
        ReadSoon(a.w, (j + r + R) * k + p);
        Lanes w0, w1;
        Widen32(a.w + (j + r) * k + p, w0, w1);
        for (int i = 0; i < M; i++) {
          acc[r][i] += xs[i] * w0;
          acc[r][i] += xt[i] * w1;
        }
      }
    }
  }
  for (; p + 16 <= k; p += 16) {
    Lanes xs[M];
    for (int i = 0; i < M; i++) __builtin_memcpy(&xs[i], a.x + i * k + p, sizeof xs[i]);
    for (int r = 0; r < R; r++) {
      if (p % 32 == 0) ReadSoon(a.w, (j + r + R) * k + p);
      const Lanes w = Widen16(a.w + (j + r) * k + p);
      for (int i = 0; i < M; i++) acc[r][i] += xs[i] * w;
    }
  }
  for (int r = 0; r < R; r++) {
    const uint16_t* wr = a.w + (j + r) * k;
    for (int i = 0; i < M; i++) {
      float rest = 0.0f;
      for (int64_t q = p; q < k; q++) rest += a.x[i * k + q] * Widen1(wr[q]);
      a.out[i * a.n + j + r] = SumLanes(acc[r][i], rest);
    }
  }
}

template <int M>
__attribute__((always_inline)) inline void FewRowsTransposed(const Product& a) {
  // Accumulators for R rows of W at once, within AVX-512's 32 registers: R x M <= 24.
  constexpr int R = M <= 2 ? 8 : M <= 3 ? 6 : M <= 4 ? 4 : 3;
  int64_t j = 0;
  for (; j + R <= a.n; j += R) DotRows<M, R>(a, j);
  for (; j < a.n; j++) DotRows<M, 1>(a, j);
}

// Rows of W are taken kDepthChunk at a time across all columns, so W is read front to back (a band of
// columns down all k rows would stride through memory) while out's M rows stay in cache; the same columns
// of the next chunk's rows are asked for meanwhile.
constexpr int64_t kDepthChunk = 8;

// Rows p0..p1 of W [k, n] added onto out's columns j0..j0+16C for the M rows of x (out already holds the
// sum over rows before p0, or p0 is 0): the sum of each output stays in the order of p however the rows
// are split, since a float stored and loaded back is the same float. C is even: W is widened 32 at a time.
template <int M, int C>
__attribute__((always_inline)) inline void AxpyBlock(const Product& a, int64_t p0, int64_t p1, int64_t j0) {
  static_assert(C % 2 == 0, "columns are widened 32 at a time");
  Lanes acc[M][C];
  for (int i = 0; i < M; i++)
    for (int c = 0; c < C; c++) {
      if (p0 == 0) acc[i][c] = Lanes{};
      else __builtin_memcpy(&acc[i][c], a.out + i * a.n + j0 + 16 * c, sizeof(Lanes));
    }
  for (int64_t p = p0; p < p1; p++) {
    const uint16_t* row = a.w + p * a.n + j0;
    for (int c = 0; c < C; c += 2) ReadSoon(row, kDepthChunk * a.n + 16 * c);
    Lanes w[C];
    for (int c = 0; c < C; c += 2) Widen32(row + 16 * c, w[c], w[c + 1]);
    for (int i = 0; i < M; i++) {
      const float xp = a.x[i * a.k + p];
      for (int c = 0; c < C; c++) acc[i][c] += xp * w[c];
    }
  }
  for (int i = 0; i < M; i++)
    for (int c = 0; c < C; c++) __builtin_memcpy(a.out + i * a.n + j0 + 16 * c, &acc[i][c], sizeof(Lanes));
}

// One band of 16 columns (what is left of n after the blocks of 32), in the same order.
template <int M>
__attribute__((always_inline)) inline void AxpyBand(const Product& a, int64_t p0, int64_t p1, int64_t j0) {
  Lanes acc[M];
  for (int i = 0; i < M; i++) {
    if (p0 == 0) acc[i] = Lanes{};
    else __builtin_memcpy(&acc[i], a.out + i * a.n + j0, sizeof(Lanes));
  }
  for (int64_t p = p0; p < p1; p++) {
    const Lanes w = Widen16(a.w + p * a.n + j0);
    for (int i = 0; i < M; i++) acc[i] += a.x[i * a.k + p] * w;
  }
  for (int i = 0; i < M; i++) __builtin_memcpy(a.out + i * a.n + j0, &acc[i], sizeof(Lanes));
}

template <int M>
__attribute__((always_inline)) inline void FewRowsPlain(const Product& a) {
  // M x C sums and C widened values within AVX-512's 32 registers
  constexpr int C = M <= 2 ? 8 : M <= 6 ? 4 : 2;
  for (int64_t p0 = 0; p0 < a.k; p0 += kDepthChunk) {
    const int64_t p1 = p0 + kDepthChunk < a.k ? p0 + kDepthChunk : a.k;
    int64_t j0 = 0;
    for (; j0 + 16 * C <= a.n; j0 += 16 * C) AxpyBlock<M, C>(a, p0, p1, j0);
    for (; j0 + 32 <= a.n; j0 += 32) AxpyBlock<M, 2>(a, p0, p1, j0);
    for (; j0 + 16 <= a.n; j0 += 16) AxpyBand<M>(a, p0, p1, j0);
    for (; j0 < a.n; j0++)
      for (int i = 0; i < M; i++) {
        float acc = p0 == 0 ? 0.0f : a.out[i * a.n + j0];
        for (int64_t p = p0; p < p1; p++) acc += a.x[i * a.k + p] * Widen1(a.w[p * a.n + j0]);
        a.out[i * a.n + j0] = acc;
      }
  }
}

// Built per CPU family (cpu-clones.h); the templates are inlined into each build.
TORL_CPU_CLONES void FewRows(const Product& a, bool transposeW) {
  switch (a.m) {
#define TORL_FEW_ROWS(M)            \
  case M:                           \
    if (transposeW) FewRowsTransposed<M>(a); \
    else FewRowsPlain<M>(a);        \
    return;
    TORL_FEW_ROWS(1)
    TORL_FEW_ROWS(2)
    TORL_FEW_ROWS(3)
    TORL_FEW_ROWS(4)
    TORL_FEW_ROWS(5)
    TORL_FEW_ROWS(6)
    TORL_FEW_ROWS(7)
    TORL_FEW_ROWS(8)
#undef TORL_FEW_ROWS
  }
}

// k past which a [k, n] weight is tiled by rows whatever its width: a band of columns would be a few
// columns wide, and each sgemm call would pack all of x (k floats a row) again for them.
constexpr int64_t kLongDepth = 1 << 16;

// setActivationDtype("bfloat16"): every product first rounds x to bfloat16 (nearest even), as PyTorch's
// bfloat16 compute does, for the AMX tiles' full speed (one piece instead of three). Process-wide.
bool roundActivations = false;

// One tile buffer per thread, kept between calls: the addon's callers run on the JS thread, one product at
// a time.
void Run(const Product& given, bool transposeW) {
  // the tiles round x themselves (one piece) or split it (three)
  if (given.m > kFewRows &&
      AmxMatmulBf16(given.x, given.w, given.out, given.m, given.n, given.k, transposeW, roundActivations))
    return;
  Product a = given;
  if (roundActivations) {
    // the same values for the other paths: x rounded, then widened back (exactly)
    thread_local std::vector<uint16_t> bits;
    thread_local std::vector<float> rounded;
    const int64_t count = a.m * a.k;
    bits.resize(static_cast<size_t>(count));
    rounded.resize(static_cast<size_t>(count));
    RoundRun(a.x, bits.data(), count);
    WidenRun(bits.data(), rounded.data(), count);
    a.x = rounded.data();
  }
  if (a.m <= kFewRows) {
    FewRows(a, transposeW);
    return;
  }

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

namespace {

// Reads a product's x, w, out, m, n and k (arguments 0 to 5 of `fn`) into `p`, the weight's length into
// `wLength`; false, with a JS exception pending, where one is not what it must be or an operand is shorter
// than m, n and k say (as gemm checks them: a wrong shape never reads or writes past the memory handed
// over).
bool ReadProduct(const Napi::CallbackInfo& info, const char* fn, const char* wName, Product* p) {
  Napi::Env env = info.Env();
  Operand x, out;
  uint16_t* w;
  size_t wLength;
  int64_t m, n, k;
  if (!ReadOperand(env, info[0], "x", &x) || !ReadBf16Bits(env, info[1], wName, &w, &wLength) ||
      !ReadOperand(env, info[2], "out", &out) || !ReadCount(env, info[3], "m", &m) ||
      !ReadCount(env, info[4], "n", &n) || !ReadCount(env, info[5], "k", &k))
    return false;
  if (static_cast<uint64_t>(m * k) > x.length || static_cast<uint64_t>(n * k) > wLength ||
      static_cast<uint64_t>(m * n) > out.length) {
    Napi::RangeError::New(env, std::string(fn) + ": an operand is shorter than m, n and k say")
        .ThrowAsJavaScriptException();
    return false;
  }
  *p = Product{x.data, w, out.data, m, n, k};
  return true;
}

// Whether nothing is left to multiply: m or n is 0 (nothing to write), or k is 0 (out is zeros, written).
bool EmptyProduct(const Product& p) {
  if (p.m == 0 || p.n == 0) return true;
  if (p.k > 0) return false;
  for (int64_t j = 0; j < p.m * p.n; j++) p.out[j] = 0.0f;
  return true;
}

}  // namespace

// matmulBf16(x, w, out, m, n, k, transposeW): out (m x n) = x (m x k) . W, with W bfloat16 bits (a
// Uint16Array) of shape [n, k] read transposed when transposeW, else [k, n]; x and out float32.
Napi::Value MatmulBf16(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "matmulBf16", 7)) return env.Undefined();
  Product p;
  if (!ReadProduct(info, "matmulBf16", "w", &p)) return env.Undefined();
  if (!info[6].IsBoolean()) {
    Napi::TypeError::New(env, "transposeW must be a boolean").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (!EmptyProduct(p)) Run(p, info[6].As<Napi::Boolean>().Value());
  return env.Undefined();
}

namespace {

// Whether k and n allow the tile layout (multiples of 32); else throws a RangeError naming `fn`.
bool TileShape(const Napi::Env& env, const char* fn, int64_t k, int64_t n) {
  if (k % 32 == 0 && n % 32 == 0) return true;
  Napi::RangeError::New(env, std::string(fn) + ": the tile layout needs k and n multiples of 32, got k " +
                                 std::to_string(k) + ", n " + std::to_string(n))
      .ThrowAsJavaScriptException();
  return false;
}

// W [k, n] from its tile layout (amx.h TileIndex), a pair-row of 32 columns at a time.
void UnpackTiles(const uint16_t* tiles, uint16_t* w, int64_t k, int64_t n) {
  for (int64_t s = 0; s < n / 32; s++)
    for (int64_t r = 0; r < k / 2; r++) {
      const uint16_t* pair = tiles + s * 32 * k + r * 64;
      uint16_t* even = w + 2 * r * n + 32 * s;
      uint16_t* odd = even + n;
      for (int64_t c = 0; c < 32; c++) {
        even[c] = pair[2 * c];
        odd[c] = pair[2 * c + 1];
      }
    }
}

}  // namespace

// packBf16Tiles(w, k, n, from, out): out[i] = value from + i of W [k, n]'s tile layout (amx.h), for
// i < out.length: a whole weight's layout, or any run of it (a rank's piece of a sharded one).
Napi::Value PackBf16Tiles(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "packBf16Tiles", 5)) return env.Undefined();
  uint16_t *w, *out;
  size_t wLength, outLength;
  int64_t k, n, from;
  if (!ReadBf16Bits(env, info[0], "w", &w, &wLength) || !ReadCount(env, info[1], "k", &k) ||
      !ReadCount(env, info[2], "n", &n) || !ReadCount(env, info[3], "from", &from) ||
      !ReadBf16Bits(env, info[4], "out", &out, &outLength) || !TileShape(env, "packBf16Tiles", k, n))
    return env.Undefined();
  const int64_t size = k * n, to = from + static_cast<int64_t>(outLength);
  if (static_cast<int64_t>(wLength) != size || to > size) {
    Napi::RangeError::New(env, "packBf16Tiles: a [" + std::to_string(k) + ", " + std::to_string(n) +
                                   "] weight needs " + std::to_string(size) + " values (got " +
                                   std::to_string(wLength) + ") and its layout's values [" + std::to_string(from) +
                                   ", " + std::to_string(to) + ") must lie within them")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  // pair-row by pair-row (64 values: 32 columns of two rows) over the ones [from, to) touches
  for (int64_t base = from - from % 64; base < to; base += 64) {
    const int64_t s = base / (32 * k), r = base % (32 * k) / 64;
    const uint16_t* even = w + 2 * r * n + 32 * s;
    const int64_t lo = from > base ? from - base : 0, hi = to < base + 64 ? to - base : 64;
    for (int64_t t = lo; t < hi; t++) out[base + t - from] = even[(t % 2) * n + t / 2];
  }
  return env.Undefined();
}

// unpackBf16Tiles(tiles, k, n, w): W [k, n] from its tile layout (packBf16Tiles' inverse).
Napi::Value UnpackBf16Tiles(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "unpackBf16Tiles", 4)) return env.Undefined();
  uint16_t *tiles, *w;
  size_t tilesLength, wLength;
  int64_t k, n;
  if (!ReadBf16Bits(env, info[0], "tiles", &tiles, &tilesLength) || !ReadCount(env, info[1], "k", &k) ||
      !ReadCount(env, info[2], "n", &n) || !ReadBf16Bits(env, info[3], "w", &w, &wLength) ||
      !TileShape(env, "unpackBf16Tiles", k, n))
    return env.Undefined();
  if (static_cast<int64_t>(tilesLength) != k * n || static_cast<int64_t>(wLength) != k * n) {
    Napi::RangeError::New(env, "unpackBf16Tiles: a [" + std::to_string(k) + ", " + std::to_string(n) +
                                   "] weight has " + std::to_string(k * n) + " values; got " +
                                   std::to_string(tilesLength) + " in the layout and room for " +
                                   std::to_string(wLength))
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  UnpackTiles(tiles, w, k, n);
  return env.Undefined();
}

// matmulBf16Tiles(x, tiles, out, m, n, k): matmulBf16(x, W, out, m, n, k, false) for W [k, n] given in its
// tile layout: the same bits. On the tiles (past kFewRows rows, tiles on) the layout is read as it lies;
// elsewhere W is unpacked into a buffer first.
Napi::Value MatmulBf16Tiles(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "matmulBf16Tiles", 6)) return env.Undefined();
  Product p;
  if (!ReadProduct(info, "matmulBf16Tiles", "tiles", &p) || !TileShape(env, "matmulBf16Tiles", p.k, p.n) ||
      EmptyProduct(p))
    return env.Undefined();
  if (p.m > kFewRows && AmxMatmulBf16Tiles(p.x, p.w, p.out, p.m, p.n, p.k, roundActivations))
    return env.Undefined();
  thread_local std::vector<uint16_t> unpacked;
  unpacked.resize(static_cast<size_t>(p.k * p.n));
  UnpackTiles(p.w, unpacked.data(), p.k, p.n);
  p.w = unpacked.data();
  Run(p, false);
  return env.Undefined();
}

// amx(): { supported, enabled, reason } of the AMX tiles that products past kFewRows rows run on.
Napi::Value AmxInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "amx", 0)) return env.Undefined();
  const AmxStatus& status = Amx();
  Napi::Object result = Napi::Object::New(env);
  result.Set("supported", status.supported);
  result.Set("enabled", status.enabled);
  result.Set("reason", status.reason);
  return result;
}

// setAmx(enabled): tiles on or off for this process; asking for tiles the machine lacks throws, naming why.
Napi::Value SetAmx(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "setAmx", 1)) return env.Undefined();
  if (!info[0].IsBoolean()) {
    Napi::TypeError::New(env, "setAmx: enabled must be a boolean").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  if (!SetAmxEnabled(info[0].As<Napi::Boolean>().Value()))
    Napi::Error::New(env, "setAmx: no AMX tiles here: " + Amx().reason).ThrowAsJavaScriptException();
  return env.Undefined();
}

// setActivationDtype(dtype): "bfloat16" rounds x to bfloat16 before every matmulBf16, "float32" (the default)
// keeps it whole; anything else throws.
Napi::Value SetActivationDtype(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "setActivationDtype", 1)) return env.Undefined();
  const std::string dtype = info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
  if (dtype != "float32" && dtype != "bfloat16") {
    Napi::TypeError::New(env, "setActivationDtype: the dtype must be \"float32\" or \"bfloat16\"")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  roundActivations = dtype == "bfloat16";
  return env.Undefined();
}

// activationDtype(): what setActivationDtype set.
Napi::Value ActivationDtype(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "activationDtype", 0)) return env.Undefined();
  return Napi::String::New(env, roundActivations ? "bfloat16" : "float32");
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
