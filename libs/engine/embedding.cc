#include "libs/engine/embedding.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

#include "libs/gguf/gguf.h"

namespace herd::engine {

const char* PoolingName(Pooling p) {
  switch (p) {
    case Pooling::kMean:
      return "mean";
    case Pooling::kCls:
      return "cls";
    case Pooling::kLast:
      return "last";
  }
  return "?";
}

absl::StatusOr<Pooling> ParsePooling(absl::string_view name) {
  if (name == "mean") return Pooling::kMean;
  if (name == "cls") return Pooling::kCls;
  if (name == "last") return Pooling::kLast;
  return absl::InvalidArgumentError(absl::StrCat("pooling: '", name, "' is not supported (use mean, cls or last)"));
}

Pooling DefaultPooling(const gguf::GgufFile& file, const std::string& arch) {
  const gguf::Value* v = file.Find(arch + ".pooling_type");
  if (v != nullptr && v->is_integer()) {
    switch (v->AsInt()) {
      case 1:
        return Pooling::kMean;
      case 2:
        return Pooling::kCls;
      case 3:
        return Pooling::kLast;
      default:
        break;  // 0 none, 4 rank, unknown: not a sentence pooling
    }
  }
  return Pooling::kMean;
}

absl::Status NormalizeEmbedding(std::vector<float>* v, int embd_norm) {
  if (embd_norm < -1) {
    return absl::InvalidArgumentError(absl::StrCat("embd_normalize: ", embd_norm, " must be >= -1"));
  }
  double sum = 0.0;
  switch (embd_norm) {
    case -1:
      return absl::OkStatus();
    case 0:
      for (float x : *v) sum = std::max(sum, std::fabs(static_cast<double>(x)));
      sum /= 32760.0;
      break;
    case 2:
      for (float x : *v) sum += static_cast<double>(x) * x;
      sum = std::sqrt(sum);
      break;
    default:
      for (float x : *v) sum += std::pow(std::fabs(static_cast<double>(x)), embd_norm);
      sum = std::pow(sum, 1.0 / embd_norm);
      break;
  }
  const double scale = sum > 0.0 ? 1.0 / sum : 0.0;
  for (float& x : *v) x = static_cast<float>(x * scale);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> PoolHiddenStates(const float* hidden, int64_t n_embd, int64_t n_tokens,
                                                    Pooling pooling) {
  if (n_tokens < 1) return absl::InvalidArgumentError("pooling: no tokens");
  const size_t ne = static_cast<size_t>(n_embd);
  if (pooling == Pooling::kCls) return std::vector<float>(hidden, hidden + ne);
  if (pooling == Pooling::kLast) {
    const float* row = hidden + static_cast<size_t>(n_tokens - 1) * ne;
    return std::vector<float>(row, row + ne);
  }
  std::vector<double> acc(ne, 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* row = hidden + static_cast<size_t>(t) * ne;
    for (size_t i = 0; i < ne; ++i) acc[i] += row[i];
  }
  std::vector<float> out(ne);
  for (size_t i = 0; i < ne; ++i) out[i] = static_cast<float>(acc[i] / static_cast<double>(n_tokens));
  return out;
}

}  // namespace herd::engine
