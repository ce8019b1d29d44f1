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

// count float32 values rounded to bfloat16 bits, to nearest even (matmul-bf16.cc).
TORL_CPU_CLONES void RoundRun(const float* src, uint16_t* dst, int64_t count);

}  // namespace torl_blas
