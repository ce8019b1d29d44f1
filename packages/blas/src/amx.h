// Products of float32 rows with bfloat16 weights on Intel's AMX tiles (amx-bf16.cc), where the CPU and the
// kernel have them.
#pragma once

#include <cstdint>
#include <string>

#include "cpu-clones.h"

namespace torl_blas {

struct AmxStatus {
  bool supported;      // the CPU has AMX-TILE and AMX-BF16, and the kernel granted this process the tiles
  bool enabled;        // products past kFewRows rows run on them (default: supported)
  std::string reason;  // why not, when unsupported
};

const AmxStatus& Amx();

// Turns the tiles on or off for this process; false when asked for tiles the machine lacks.
bool SetAmxEnabled(bool enabled);

// out (m x n) = x (m x k) . W with W's bfloat16 bits [n, k] read transposed when transposeW, else [k, n],
// to float32 accuracy: each x is split exactly into three bfloat16 pieces; with roundX, x rounded to
// bfloat16 (nearest even) instead, one piece. Returns false, touching nothing, when the tiles are off.
bool AmxMatmulBf16(const float* x, const uint16_t* w, float* out, int64_t m, int64_t n, int64_t k,
                   bool transposeW, bool roundX);

// The tile layout of a weight W [k, n] (k and n multiples of 32): W's columns in strips of 32, strip after
// strip, each strip's rows in pairs, pair after pair, and each pair's 32 columns in turn, the two rows' values
// side by side: W[p][j] at (j / 32) 32k + (p / 2) 64 + (j % 32) 2 + p % 2. The tiles read it as it lies.
inline int64_t TileIndex(int64_t p, int64_t j, int64_t k) {
  return (j / 32) * 32 * k + (p / 2) * 64 + (j % 32) * 2 + (p % 2);
}

// AmxMatmulBf16 (transposeW false) for W in the tile layout: the same products in the same order, so the
// same bits as AmxMatmulBf16 on W itself, with nothing packed. False, touching nothing, when the tiles are
// off or n or k is not a multiple of 32.
bool AmxMatmulBf16Tiles(const float* x, const uint16_t* tiles, float* out, int64_t m, int64_t n, int64_t k,
                        bool roundX);

// count float32 values rounded to bfloat16 bits, to nearest even (matmul-bf16.cc).
TORL_CPU_CLONES void RoundRun(const float* src, uint16_t* dst, int64_t count);

}  // namespace torl_blas
