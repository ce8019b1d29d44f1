// Log-probabilities of chosen tokens (and the entropy of each distribution) straight from logits, in one
// pass per row, and their gradient in one more: no [rows, vocab] log-softmax, one-hot or product is
// ever written, which is most of the memory traffic of the pick when done op by op.
#include <napi.h>

#include <cmath>
#include <cstdint>

#include "args.h"
#include "fast-exp.h"
#include "functions.h"

namespace torl_blas {

namespace {

// Values per row in `stats`: log p(target), entropy, log-sum-exp.
constexpr size_t kStats = 3;


bool ReadShape(const Napi::CallbackInfo& info, size_t first, Operand* logits, const int32_t** targets,
               size_t* rows, size_t* vocab) {
  Napi::Env env = info.Env();
  size_t targetCount;
  int64_t v;
  if (!ReadOperand(env, info[first], "logits", logits) ||
      !ReadInt32Array(env, info[first + 1], "targets", targets, &targetCount) ||
      !ReadCount(env, info[first + 2], "vocab", &v))
    return false;
  if (v < 1 || logits->length != targetCount * static_cast<size_t>(v)) {
    Napi::RangeError::New(env, "logits must hold one row of `vocab` values per target").ThrowAsJavaScriptException();
    return false;
  }
  for (size_t r = 0; r < targetCount; r++)
    if ((*targets)[r] < -1 || (*targets)[r] >= v) {
      Napi::RangeError::New(env, "target " + std::to_string((*targets)[r]) + " at row " + std::to_string(r) +
                                     " is outside [0, vocab) and is not -1")
          .ThrowAsJavaScriptException();
      return false;
    }
  *rows = targetCount;
  *vocab = static_cast<size_t>(v);
  return true;
}

}  // namespace

// logSoftmaxPick(logits, targets, vocab, stats): for each row r of logits ([rows, vocab]), with t = targets[r]:
// stats[3r] = log softmax(row)[t], stats[3r+1] = entropy of softmax(row), stats[3r+2] = logsumexp(row).
// t = -1 marks a row nobody scores: its stats are 0.
Napi::Value LogSoftmaxPick(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "logSoftmaxPick", 4)) return env.Undefined();
  Operand logits, stats;
  const int32_t* targets;
  size_t rows, vocab;
  if (!ReadShape(info, 0, &logits, &targets, &rows, &vocab) || !ReadOperand(env, info[3], "stats", &stats))
    return env.Undefined();
  if (stats.length != rows * kStats) {
    Napi::RangeError::New(env, "stats must hold 3 values per row").ThrowAsJavaScriptException();
    return env.Undefined();
  }
  for (size_t r = 0; r < rows; r++) {
    float* out = stats.data + r * kStats;
    const int32_t t = targets[r];
    if (t < 0) {
      out[0] = out[1] = out[2] = 0.0f;
      continue;
    }
    const float* x = logits.data + r * vocab;
    float maxLanes[8];
    for (size_t l = 0; l < 8; l++) maxLanes[l] = x[0];
    size_t i = 0;
    for (; i + 8 <= vocab; i += 8)
      for (size_t l = 0; l < 8; l++) maxLanes[l] = x[i + l] > maxLanes[l] ? x[i + l] : maxLanes[l];
    float max = x[0];
    for (size_t l = 0; l < 8; l++) max = maxLanes[l] > max ? maxLanes[l] : max;
    for (; i < vocab; i++) max = x[i] > max ? x[i] : max;
    // Float sums in 8 lanes (vectorizable), added up in double at the end.
    float sumLanes[8] = {}, weightedLanes[8] = {};
    size_t j = 0;
    for (; j + 8 <= vocab; j += 8)
      for (size_t l = 0; l < 8; l++) {
        const float e = ExpNonPositive(x[j + l] - max);
        sumLanes[l] += e;
        weightedLanes[l] += e * x[j + l];
      }
    double sum = 0, weighted = 0;
    for (size_t l = 0; l < 8; l++) {
      sum += sumLanes[l];
      weighted += weightedLanes[l];
    }
    for (; j < vocab; j++) {
      const float e = ExpNonPositive(x[j] - max);
      sum += e;
      weighted += static_cast<double>(e) * x[j];
    }
    const double lse = max + std::log(sum);
    out[0] = static_cast<float>(x[t] - lse);
    out[1] = static_cast<float>(lse - weighted / sum);  // H = lse - sum_j p_j x_j
    out[2] = static_cast<float>(lse);
  }
  return env.Undefined();
}

// logSoftmaxPickGrad(logits, targets, vocab, stats, dStats, dLogits): the gradient of logSoftmaxPick's log-probs
// and entropies (dStats: 3 per row, the third ignored) with respect to the logits, written to dLogits.
//   d logp / d x_j = [j = t] - p_j;   d H / d x_j = p_j (S - x_j), S = sum_k p_k x_k = lse - H.
Napi::Value LogSoftmaxPickGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!HasArity(info, "logSoftmaxPickGrad", 6)) return env.Undefined();
  Operand logits, stats, dStats, dLogits;
  const int32_t* targets;
  size_t rows, vocab;
  if (!ReadShape(info, 0, &logits, &targets, &rows, &vocab) || !ReadOperand(env, info[3], "stats", &stats) ||
      !ReadOperand(env, info[4], "dStats", &dStats) || !ReadOperand(env, info[5], "dLogits", &dLogits))
    return env.Undefined();
  if (stats.length != rows * kStats || dStats.length != rows * kStats || dLogits.length != logits.length) {
    Napi::RangeError::New(env, "stats and dStats must hold 3 values per row, dLogits as many as logits")
        .ThrowAsJavaScriptException();
    return env.Undefined();
  }
  for (size_t r = 0; r < rows; r++) {
    float* dx = dLogits.data + r * vocab;
    const int32_t t = targets[r];
    if (t < 0) {
      for (size_t j = 0; j < vocab; j++) dx[j] = 0.0f;
      continue;
    }
    const float* x = logits.data + r * vocab;
    const float* s = stats.data + r * kStats;
    const float dLogp = dStats.data[r * kStats];
    const float dEntropy = dStats.data[r * kStats + 1];
    const float lse = s[2];
    const float expected = s[2] - s[1];  // S
    if (dEntropy == 0.0f) {
      for (size_t j = 0; j < vocab; j++) dx[j] = -dLogp * ExpNonPositive(x[j] - lse);
    } else {
      for (size_t j = 0; j < vocab; j++) {
        const float p = ExpNonPositive(x[j] - lse);
        dx[j] = p * (dEntropy * (expected - x[j]) - dLogp);
      }
    }
    dx[t] += dLogp;
  }
  return env.Undefined();
}

}  // namespace torl_blas
