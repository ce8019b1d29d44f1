// Products of float32 rows with bfloat16 weights on AMX tiles (Sapphire Rapids and later Xeons).
//
// A tile product multiplies bfloat16 by bfloat16 into float32 sums, and x is float32. Each x is split
// exactly into three bfloat16 pieces, x = hi + mid + lo (hi its top 8 significant bits, mid the next 8, lo
// the last 8), and out = hi.W + mid.W + lo.W: every product of a piece and a weight is exact in float32, so
// the result has a float32 product's accuracy (only the order of the float32 sums differs) at a third of
// the tiles' bfloat16 speed, still several times sgemm's on widened weights. Pieces below float32's normal
// range (|x| under ~2^-110) are flushed to zero by the tiles.
//
// Layout. out = A . B with A = x's pieces, [m, k] row-major, and B = W packed, in strips of 32 of its
// columns, into the tiles' pair-interleaved ("VNNI") rows: packed row r holds (B[2r][j], B[2r+1][j]) for
// the strip's j. k is taken a block at a time so x's pieces for the block stay in L2 while the strips
// stream past them; out holds the running sums between blocks (a float32 stored and loaded back is the
// same float). W^T is packed a strip at a time; W [k, n] a panel of whole rows at a time, read front to
// back (see Run). Each output's sum runs over k in order, a tile's 32 values at a time, hi, mid then lo
// within each: it depends on its own row of x and column of W alone, never on m, the other rows or the
// block sizes.
//
// Few rows read transposed (m <= 32, W [n, k] in whole tiles: an LM head over a micro-batch's scored
// positions) take another route, RunWeightLeft: W's rows are the tiles' left operand as they lie in memory
// and x's pieces, packed once, the right one, so W is read once and never packed (the pack above ran at
// about half the speed memory streams at); each block of sums comes out as out^T and is transposed as it is
// stored. Products commute, so every pair product and its place in each sum are Run's: the same bits.
#include "amx.h"

#include <algorithm>
#include <cstring>
#include <vector>

// AMX intrinsics arrived in GCC 11 and Clang 12: an older compiler builds the addon without them.
#if defined(__x86_64__) && defined(__linux__) && \
    (defined(__clang__) ? __clang_major__ >= 12 : (defined(__GNUC__) && __GNUC__ >= 11))
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define TORL_HAS_AMX_BUILD 1
#endif

namespace torl_blas {

namespace {

AmxStatus Probe() {
#ifdef TORL_HAS_AMX_BUILD
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return {false, false, "the CPU reports no leaf 7"};
  const bool amxBf16 = (edx >> 22) & 1, amxTile = (edx >> 24) & 1;
  if (!amxTile || !amxBf16) return {false, false, "the CPU has no AMX-BF16"};
  // Linux hands out the 8 KB tile state only on request, per process (arch/x86/include/uapi/asm/prctl.h).
  constexpr long kReqXcompPerm = 0x1023, kXfeatureTileData = 18;
  if (syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureTileData) != 0)
    return {false, false, "the kernel refused this process the AMX tile state"};
  return {true, true, ""};
#else
  return {false, false, "this build of the addon has no AMX kernels (x86-64 Linux with GCC 11 or Clang 12 and later)"};
#endif
}

AmxStatus& State() {
  static AmxStatus state = Probe();
  return state;
}

}  // namespace

const AmxStatus& Amx() { return State(); }

bool SetAmxEnabled(bool enabled) {
  AmxStatus& state = State();
  if (enabled && !state.supported) return false;
  state.enabled = enabled;
  return true;
}

#ifdef TORL_HAS_AMX_BUILD

namespace {

#define TORL_AMX_TARGET __attribute__((target("avx512f,avx512bw,avx512bf16,amx-tile,amx-bf16")))

constexpr int64_t kStrip = 32;          // W's columns per packed strip: two tiles of 16
constexpr int64_t kDepthBlock = 1024;   // k values per block for W^T: x's three pieces then take m x 6 KB
constexpr int64_t kPanelDepth = 512;    // most k values per block for W [k, n], whose rows are packed whole
constexpr int64_t kPanelBytes = 1536 << 10;  // largest packed panel of W [k, n] (L2 holds it)
constexpr int64_t kTilesPieceBytes = 1 << 20;  // most bytes of x's pieces for a product reading the tile layout
constexpr int64_t kRowSlack = 32;       // pieces' row stride is the block plus this: a 2 KB stride would
                                        // map a tile's 16 rows onto two L1 sets

int64_t RoundUp(int64_t v, int64_t to) { return (v + to - 1) / to * to; }

struct alignas(64) TileConfig {
  uint8_t palette;
  uint8_t startRow;
  uint8_t reserved[14];
  uint16_t bytesPerRow[16];
  uint8_t rows[16];
};

// Tiles 0-3 the sums (2 x 2 tiles of 16 x 16 float32), 4-5 x's pieces (16 rows x 32 bfloat16), 6-7 the
// packed weight (16 pair-rows x 16 columns): all 16 rows of 64 bytes.
TORL_AMX_TARGET void ConfigureTiles() {
  TileConfig config;
  std::memset(&config, 0, sizeof config);
  config.palette = 1;
  for (int t = 0; t < 8; t++) {
    config.bytesPerRow[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

inline float FromBits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

inline uint32_t ToBits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// Rows 0..mPad of x[:, p0:p0+kb] split into the three pieces' planes (row stride ld; rows past m and
// columns past kb are zero). Infinities and NaNs ride whole in hi (their remainders would be NaN). With
// one piece, x rounded to bfloat16 (nearest even, as RoundRun) into the first plane alone.
TORL_AMX_TARGET void SplitPieces(const float* x, int64_t k, int64_t m, int64_t p0, int64_t kb, int64_t mPad,
                                 int64_t ld, int pieceCount, uint16_t* pieces) {
  const int64_t plane = mPad * ld;
  for (int64_t i = 0; i < mPad; i++) {
    uint16_t* hi = pieces + i * ld;
    uint16_t* mid = hi + plane;
    uint16_t* lo = mid + plane;
    int64_t q = 0;
    if (i < m && pieceCount == 1) {
      // vcvtne2ps2bf16 rounds to nearest even as RoundRun does; it reads float32 subnormals as zero, which
      // the tiles do with the subnormal bfloat16 RoundRun would make, so the products are the same
      const float* src = x + i * k + p0;
      for (; q + 32 <= kb; q += 32) {
        const __m512bh pair = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + q + 16), _mm512_loadu_ps(src + q));
        _mm512_storeu_si512(hi + q, reinterpret_cast<__m512i>(pair));
      }
      RoundRun(src + q, hi + q, kb - q);
      for (q = kb; q < ld; q++) hi[q] = 0;
      continue;
    }
    if (i >= m && pieceCount == 1) {
      for (; q < ld; q++) hi[q] = 0;
      continue;
    }
    if (i < m) {
      const float* src = x + i * k + p0;
      for (; q < kb; q++) {
        const uint32_t b = ToBits(src[q]);
        const bool finite = (b & 0x7f800000u) != 0x7f800000u;
        const uint32_t top = b & 0xffff0000u;
        const float rest = src[q] - FromBits(top);
        const uint32_t next = ToBits(rest) & 0xffff0000u;
        const float last = rest - FromBits(next);
        const bool nan = (b & 0x7fffffffu) > 0x7f800000u;
        hi[q] = nan ? 0x7fc0 : static_cast<uint16_t>(b >> 16);
        mid[q] = finite ? static_cast<uint16_t>(next >> 16) : 0;
        lo[q] = finite ? static_cast<uint16_t>(ToBits(last) >> 16) : 0;
      }
    }
    for (; q < ld; q++) hi[q] = mid[q] = lo[q] = 0;
  }
}

// The strip of W's columns j0..j0+cols (cols <= 32) over rows p0..p0+kb of B, packed: word [r][c] holds
// (B[p0+2r][j0+c], B[p0+2r+1][j0+c]) for r < kbPad/2, c < 32, zero outside B. B = W [k, n], or W^T for
// W [n, k] read transposed.
TORL_AMX_TARGET void PackStrip(const uint16_t* w, int64_t n, int64_t k, bool transposeW, int64_t p0, int64_t kb,
                               int64_t kbPad, int64_t j0, int64_t cols, uint16_t* strip) {
  const int64_t pairs = kbPad / 2;
  const bool full = cols == kStrip && kb == kbPad;
  if (full && !transposeW) {
    // two rows of W, 32 values each, interleaved
    const __m512i low = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                         37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
    const __m512i high = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23,
                                          54, 22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
    for (int64_t r = 0; r < pairs; r++) {
      const __m512i even = _mm512_loadu_si512(w + (p0 + 2 * r) * n + j0);
      const __m512i odd = _mm512_loadu_si512(w + (p0 + 2 * r + 1) * n + j0);
      _mm512_storeu_si512(strip + r * 64, _mm512_permutex2var_epi16(even, low, odd));
      _mm512_storeu_si512(strip + r * 64 + 32, _mm512_permutex2var_epi16(even, high, odd));
    }
    return;
  }
  if (full) {
    // W [n, k]: word r of W's row j0+c goes to packed [r][c], a 32-bit transpose, 16 x 16 at a time
    for (int64_t c0 = 0; c0 < kStrip; c0 += 16)
      for (int64_t r0 = 0; r0 < pairs; r0 += 16) {
        __m512i v[16], t[16];
        for (int c = 0; c < 16; c++) v[c] = _mm512_loadu_si512(w + (j0 + c0 + c) * k + p0 + 2 * r0);
        for (int c = 0; c < 16; c += 2) {
          t[c] = _mm512_unpacklo_epi32(v[c], v[c + 1]);
          t[c + 1] = _mm512_unpackhi_epi32(v[c], v[c + 1]);
        }
        // v[4g + d]: words 4L + d of rows 4g..4g+3, 128-bit lane L
        for (int g = 0; g < 4; g++) {
          v[4 * g] = _mm512_unpacklo_epi64(t[4 * g], t[4 * g + 2]);
          v[4 * g + 1] = _mm512_unpackhi_epi64(t[4 * g], t[4 * g + 2]);
          v[4 * g + 2] = _mm512_unpacklo_epi64(t[4 * g + 1], t[4 * g + 3]);
          v[4 * g + 3] = _mm512_unpackhi_epi64(t[4 * g + 1], t[4 * g + 3]);
        }
        // t[d] (t[d + 4]): words d and d + 8 (d + 4 and d + 12) of rows 0-7; t[d + 8], t[d + 12]: rows 8-15
        for (int d = 0; d < 4; d++) {
          t[d] = _mm512_shuffle_i32x4(v[d], v[4 + d], 0x88);
          t[d + 4] = _mm512_shuffle_i32x4(v[d], v[4 + d], 0xdd);
          t[d + 8] = _mm512_shuffle_i32x4(v[8 + d], v[12 + d], 0x88);
          t[d + 12] = _mm512_shuffle_i32x4(v[8 + d], v[12 + d], 0xdd);
        }
        uint32_t* out = reinterpret_cast<uint32_t*>(strip);
        for (int d = 0; d < 8; d++) {
          const __m512i a = _mm512_shuffle_i32x4(t[d], t[d + 8], 0x88);  // word d
          const __m512i b = _mm512_shuffle_i32x4(t[d], t[d + 8], 0xdd);  // word d + 8
          _mm512_storeu_si512(out + (r0 + d) * kStrip + c0, a);
          _mm512_storeu_si512(out + (r0 + d + 8) * kStrip + c0, b);
        }
      }
    return;
  }
  for (int64_t r = 0; r < pairs; r++)
    for (int64_t c = 0; c < kStrip; c++)
      for (int64_t h = 0; h < 2; h++) {
        const int64_t p = p0 + 2 * r + h, j = j0 + c;
        uint16_t value = 0;
        if (p < p0 + kb && c < cols) value = transposeW ? w[j * k + p] : w[p * n + j];
        strip[(r * kStrip + c) * 2 + h] = value;
      }
}

// Strips j0, j0 + 32, ... of W's columns j0..j0+cols (a whole number of strips or the last of W), packed; returns the stride
// in values between a strip's pair-rows. W [k, n] in whole strips: pair-row r of every strip in turn, so the
// panel is written as W is read, front to back (strip s's pair-row r at (r strips + s) 64); otherwise each
// strip as PackStrip packs it, strip s at s stripLength (stride 64).
TORL_AMX_TARGET int64_t PackPanel(const uint16_t* w, int64_t n, int64_t k, bool transposeW, int64_t p0, int64_t kb,
                                  int64_t kbPad, int64_t j0, int64_t cols, int64_t stripLength, uint16_t* panel) {
  const int64_t strips = (cols + kStrip - 1) / kStrip;
  if (transposeW || kb != kbPad || cols % kStrip != 0) {
    for (int64_t s = 0; s < strips; s++) {
      const int64_t c = cols - s * kStrip < kStrip ? cols - s * kStrip : kStrip;
      PackStrip(w, n, k, transposeW, p0, kb, kbPad, j0 + s * kStrip, c, panel + s * stripLength);
    }
    return 2 * kStrip;
  }
  const __m512i low = _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6,
                                       37, 5, 36, 4, 35, 3, 34, 2, 33, 1, 32, 0);
  const __m512i high = _mm512_set_epi16(63, 31, 62, 30, 61, 29, 60, 28, 59, 27, 58, 26, 57, 25, 56, 24, 55, 23,
                                        54, 22, 53, 21, 52, 20, 51, 19, 50, 18, 49, 17, 48, 16);
  uint16_t* to = panel;
  for (int64_t r = 0; r < kbPad / 2; r++) {
    const uint16_t* even = w + (p0 + 2 * r) * n + j0;
    const uint16_t* odd = even + n;
    for (int64_t s = 0; s < strips; s++, to += 2 * kStrip) {
      const __m512i e = _mm512_loadu_si512(even + s * kStrip);
      const __m512i o = _mm512_loadu_si512(odd + s * kStrip);
      _mm512_storeu_si512(to, _mm512_permutex2var_epi16(e, low, o));
      _mm512_storeu_si512(to + kStrip, _mm512_permutex2var_epi16(e, high, o));
    }
  }
  return 2 * kStrip * strips;
}

// Steps of 32 depth values that a product reading the tile layout from memory prefetches ahead (8 KB): tile
// loads straight from memory keep few lines in flight (a weight read that way streamed at half the speed of
// vector loads). The layout is one run of memory, so ahead is what is read next, across strips too.
constexpr int64_t kPrefetchSteps = 4;

// The sums for rows row0..row0+16MT and the strip's first 16NT columns: c (row stride ldc floats) is
// loaded (accumulate) or zeroed, the block's depth added, and the sums stored into d (row stride ldd).
template <int MT, int NT, int S>
TORL_AMX_TARGET void MultiplyBlock(const uint16_t* pieces, int64_t plane, int64_t ld, int64_t kbPad,
                                   const uint16_t* strip, int64_t pairRow, const float* c, int64_t ldc,
                                   bool accumulate, float* d, int64_t ldd, const uint16_t* next) {
  const long cStride = static_cast<long>(ldc * 4), aStride = static_cast<long>(ld * 2),
             bStride = static_cast<long>(pairRow * 2), dStride = static_cast<long>(ldd * 4);
  const float* c1 = c + 16 * ldc;
  float* d1 = d + 16 * ldd;
  if (accumulate) {
    _tile_loadd(0, c, cStride);
    if (NT == 2) _tile_loadd(1, c + 16, cStride);
    if (MT == 2) _tile_loadd(2, c1, cStride);
    if (MT == 2 && NT == 2) _tile_loadd(3, c1 + 16, cStride);
  } else {
    _tile_zero(0);
    if (NT == 2) _tile_zero(1);
    if (MT == 2) _tile_zero(2);
    if (MT == 2 && NT == 2) _tile_zero(3);
  }
  for (int64_t p = 0; p < kbPad; p += 32) {
    const uint16_t* b = strip + p / 2 * pairRow;  // pair-rows p/2 .. p/2 + 16
    if (next != nullptr) {
      // kPrefetchSteps ahead in the order the layout is read: this block of the strip, then `next`
      const int64_t q = p + kPrefetchSteps * 32;
      const char* ahead = reinterpret_cast<const char*>(q < kbPad ? strip + q / 2 * pairRow
                                                                  : next + (q - kbPad) / 2 * pairRow);
      for (int line = 0; line < 16; line++) {
        _mm_prefetch(ahead + line * bStride, _MM_HINT_T0);
        if (NT == 2) _mm_prefetch(ahead + line * bStride + 64, _MM_HINT_T0);
      }
    }
    _tile_loadd(6, b, bStride);
    if (NT == 2) _tile_loadd(7, b + 32, bStride);
    for (int s = 0; s < S; s++) {
      const uint16_t* a = pieces + s * plane + p;
      _tile_loadd(4, a, aStride);
      if (MT == 2) _tile_loadd(5, a + 16 * ld, aStride);
      _tile_dpbf16ps(0, 4, 6);
      if (NT == 2) _tile_dpbf16ps(1, 4, 7);
      if (MT == 2) _tile_dpbf16ps(2, 5, 6);
      if (MT == 2 && NT == 2) _tile_dpbf16ps(3, 5, 7);
    }
  }
  _tile_stored(0, d, dStride);
  if (NT == 2) _tile_stored(1, d + 16, dStride);
  if (MT == 2) _tile_stored(2, d1, dStride);
  if (MT == 2 && NT == 2) _tile_stored(3, d1 + 16, dStride);
}

// count values of a buffer kept between calls, at a 64-byte boundary: a tile row that straddles two cache
// lines loads several times slower.
template <typename T>
T* Aligned(std::vector<T>& buffer, int64_t count) {
  buffer.resize(static_cast<size_t>(count) + 64 / sizeof(T));
  const uintptr_t at = reinterpret_cast<uintptr_t>(buffer.data());
  return reinterpret_cast<T*>((at + 63) & ~uintptr_t{63});
}

template <int S>
TORL_AMX_TARGET void Block(bool twoRows, bool twoCols, const uint16_t* a, int64_t plane, int64_t ld, int64_t kbPad,
                           const uint16_t* strip, int64_t pairRow, const float* c, int64_t ldc, bool more, float* d,
                           int64_t ldd, const uint16_t* next) {
  if (twoRows && twoCols) MultiplyBlock<2, 2, S>(a, plane, ld, kbPad, strip, pairRow, c, ldc, more, d, ldd, next);
  else if (twoRows) MultiplyBlock<2, 1, S>(a, plane, ld, kbPad, strip, pairRow, c, ldc, more, d, ldd, next);
  else if (twoCols) MultiplyBlock<1, 2, S>(a, plane, ld, kbPad, strip, pairRow, c, ldc, more, d, ldd, next);
  else MultiplyBlock<1, 1, S>(a, plane, ld, kbPad, strip, pairRow, c, ldc, more, d, ldd, next);
}

// out = x . W^T for W [n, k] (read transposed) with few rows of x (m <= 32), W whole rows of whole tiles
// (k a multiple of 32, at most kDepthBlock) and n a multiple of 32: W is the tiles' left operand as it
// lies (a tile is 16 of its rows, 64 bytes each: nothing is packed), x's pieces the right one, packed once,
// and each 16 x 16 block of sums (out^T) is transposed into out when stored. The pair products and their
// order along k are those of Run (a tile's 32 values at a time, hi, mid then lo): the same bits.
TORL_AMX_TARGET void RunWeightLeft(const float* x, const uint16_t* w, float* out, int64_t m, int64_t n, int64_t k,
                                   int pieceCount) {
  const int64_t mPad = 32, ld = k + kRowSlack, plane = mPad * ld;
  thread_local std::vector<uint16_t> pieceBuffer, packedBuffer;
  thread_local std::vector<float> blockBuffer;
  uint16_t* pieces = Aligned(pieceBuffer, pieceCount * plane);
  SplitPieces(x, k, m, 0, k, mPad, ld, pieceCount, pieces);
  // each piece's rows as the right operand: pair-row r of a 32-column strip holds (x[i][2r], x[i][2r + 1])
  const int64_t stripLength = k * kStrip;
  uint16_t* packed = Aligned(packedBuffer, pieceCount * stripLength);
  for (int s = 0; s < pieceCount; s++)
    PackStrip(pieces + s * plane, mPad, ld, true, 0, k, k, 0, kStrip, packed + s * stripLength);
  float* sums = Aligned(blockBuffer, 4 * 256);
  const long wStride = static_cast<long>(k * 2), bStride = 2 * kStrip * 2;
  __asm__ volatile("" ::: "memory");
  ConfigureTiles();
  for (int64_t n0 = 0; n0 < n; n0 += 32) {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    const uint16_t* w0 = w + n0 * k;
    const uint16_t* w1 = w0 + 16 * k;
    for (int64_t p = 0; p < k; p += 32) {
      _tile_loadd(4, w0 + p, wStride);
      _tile_loadd(5, w1 + p, wStride);
      for (int s = 0; s < pieceCount; s++) {
        const uint16_t* b = packed + s * stripLength + p / 2 * (2 * kStrip);
        _tile_loadd(6, b, bStride);
        _tile_loadd(7, b + 32, bStride);
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
      }
    }
    // tile t: out^T rows n0 + 16 (t / 2) .., columns 16 (t % 2) .. (x's rows)
    _tile_stored(0, sums, 64);
    _tile_stored(1, sums + 256, 64);
    _tile_stored(2, sums + 512, 64);
    _tile_stored(3, sums + 768, 64);
    __asm__ volatile("" ::: "memory");
    for (int t = 0; t < 4; t++) {
      const float* block = sums + 256 * t;
      const int64_t rowBase = 16 * (t % 2), colBase = n0 + 16 * (t / 2);
      for (int64_t c = 0; c < 16 && rowBase + c < m; c++) {
        // column c of the block (x's row rowBase + c) is out's row, 16 consecutive values
        const __m512i index = _mm512_set_epi32(240, 224, 208, 192, 176, 160, 144, 128, 112, 96, 80, 64, 48, 32, 16, 0);
        _mm512_storeu_ps(out + (rowBase + c) * n + colBase, _mm512_i32gather_ps(index, block + c, 4));
      }
    }
  }
  _tile_release();
}

// tiles: W [k, n] already in the tile layout (amx.h, AmxMatmulBf16Tiles; k and n multiples of 32) in
// place of w: each strip's pair-rows are read where they lie instead of being packed, the same products in
// the same order.
TORL_AMX_TARGET void Run(const float* x, const uint16_t* w, float* out, int64_t m, int64_t n, int64_t k,
                         bool transposeW, int pieceCount, const uint16_t* tiles = nullptr) {
  const int64_t mPad = RoundUp(m, 16), nPad = RoundUp(n, 16);
  // Sums straight into out where its rows and columns fill whole tiles and it lies on a cache line, else
  // into a padded copy. Where out's rows and columns fill whole tiles off a cache line, the last block
  // still stores its sums into out (once: a tile row across two cache lines loads and stores several
  // times slower, which the blocks before would pay on every load and store), so nothing is copied after.
  const bool direct = m == mPad && n == nPad && reinterpret_cast<uintptr_t>(out) % 64 == 0;
  const bool lastIntoOut = m == mPad && n == nPad;
  thread_local std::vector<float> padded;
  thread_local std::vector<uint16_t> pieceBuffer, stripBuffer;
  float* sums = direct ? out : Aligned(padded, mPad * nPad);
  const int64_t ldc = direct ? n : nPad;
  // W^T is packed a strip at a time, each of its rows read kDepthBlock values at a time. W [k, n] is packed
  // a panel of whole rows at a time (as many as kPanelBytes holds, or as many strips of fewer rows), so
  // that its memory is read front to back: one strip's 64 bytes a row, a row's width apart, stream from
  // memory at a third of the speed (measured at Qwen2.5-0.5B's MLP shapes: 9.7 KB rows).
  const int64_t wholeRows = kPanelBytes / (2 * RoundUp(n, kStrip)) / 32 * 32;
  // the tile layout over the whole depth at once where x's pieces for it stay in L2: each strip is then
  // read in one run, and the whole weight front to back
  const int64_t wholeDepthBytes = tiles ? pieceCount * mPad * (k + kRowSlack) * 2 : 0;
  const int64_t depth = tiles && wholeDepthBytes <= kTilesPieceBytes ? k
                        : transposeW                         ? kDepthBlock
                                                             : std::clamp<int64_t>(wholeRows, 32, kPanelDepth);
  const int64_t blockPad = RoundUp(k < depth ? k : depth, 32), ld = blockPad + kRowSlack;
  const int64_t panelStrips = tiles        ? RoundUp(n, kStrip) / kStrip
                              : transposeW ? 1
                                           : std::max<int64_t>(1, kPanelBytes / (blockPad * kStrip * 2));
  const int64_t plane = mPad * ld;
  uint16_t* pieces = Aligned(pieceBuffer, pieceCount * plane);
  const int64_t stripLength = blockPad * kStrip;
  uint16_t* panel = tiles ? nullptr : Aligned(stripBuffer, panelStrips * stripLength);

  ConfigureTiles();
  for (int64_t p0 = 0; p0 < k; p0 += depth) {
    const int64_t kb = p0 + depth < k ? depth : k - p0, kbPad = RoundUp(kb, 32);
    const bool last = p0 + depth >= k;
    SplitPieces(x, k, m, p0, kb, mPad, ld, pieceCount, pieces);
    for (int64_t jp = 0; jp < n; jp += kStrip * panelStrips) {
      const int64_t panelCols = jp + kStrip * panelStrips < n ? kStrip * panelStrips : n - jp;
      // the tile layout: strip s's pair-rows end to end over the whole depth, this block's from p0 / 2
      const int64_t pairRow =
          tiles ? 2 * kStrip : PackPanel(w, n, k, transposeW, p0, kb, kbPad, jp, panelCols, stripLength, panel);
      const int64_t stripStride = tiles ? k * kStrip : pairRow == 2 * kStrip ? stripLength : 2 * kStrip;
      const uint16_t* first = tiles ? tiles + jp / kStrip * stripStride + p0 / 2 * (2 * kStrip) : panel;
      // the tile loads are asm the compiler cannot see reading memory: the stores above must land first
      __asm__ volatile("" ::: "memory");
      for (int64_t j0 = jp; j0 < jp + panelCols; j0 += kStrip) {
        const int64_t cols = j0 + kStrip < n ? kStrip : n - j0;
        const uint16_t* strip = first + (j0 - jp) / kStrip * stripStride;
        for (int64_t i0 = 0; i0 < mPad; i0 += 32) {
          const uint16_t* a = pieces + i0 * ld;
          float* c = sums + i0 * ldc + j0;
          float* d = last && lastIntoOut ? out + i0 * n + j0 : c;
          const int64_t ldd = last && lastIntoOut ? n : ldc;
          const bool twoRows = mPad - i0 > 16, twoCols = cols > 16, more = p0 > 0;
          // the layout comes from memory for the first rows (prefetched: what is read after this block is
          // the next strip's, or the next depth block's first strip), from cache after
          const uint16_t* next = nullptr;
          if (tiles != nullptr && i0 == 0)
            next = j0 + kStrip < n ? strip + stripStride : last ? strip : tiles + (p0 + depth) / 2 * (2 * kStrip);
          if (pieceCount == 1)
            Block<1>(twoRows, twoCols, a, plane, ld, kbPad, strip, pairRow, c, ldc, more, d, ldd, next);
          else Block<3>(twoRows, twoCols, a, plane, ld, kbPad, strip, pairRow, c, ldc, more, d, ldd, next);
        }
      }
    }
  }
  _tile_release();
  if (!lastIntoOut)
    for (int64_t i = 0; i < m; i++) std::memcpy(out + i * n, sums + i * nPad, static_cast<size_t>(n) * 4);
}

}  // namespace

bool AmxMatmulBf16(const float* x, const uint16_t* w, float* out, int64_t m, int64_t n, int64_t k,
                   bool transposeW, bool roundX) {
  if (!State().enabled) return false;
  if (transposeW && m <= 32 && n % 32 == 0 && k % 32 == 0 && k <= kDepthBlock)
    RunWeightLeft(x, w, out, m, n, k, roundX ? 1 : 3);
  else
    Run(x, w, out, m, n, k, transposeW, roundX ? 1 : 3);
  return true;
}

bool AmxMatmulBf16Tiles(const float* x, const uint16_t* tiles, float* out, int64_t m, int64_t n, int64_t k,
                        bool roundX) {
  if (!State().enabled || n % kStrip != 0 || k % kStrip != 0) return false;
  Run(x, nullptr, out, m, n, k, false, roundX ? 1 : 3, tiles);
  return true;
}

#else

bool AmxMatmulBf16(const float*, const uint16_t*, float*, int64_t, int64_t, int64_t, bool, bool) { return false; }
bool AmxMatmulBf16Tiles(const float*, const uint16_t*, float*, int64_t, int64_t, int64_t, bool) { return false; }

#endif

}  // namespace torl_blas
