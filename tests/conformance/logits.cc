#include "tests/conformance/logits.h"

#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace herd::conformance {

absl::StatusOr<std::vector<std::vector<float>>> TeacherForcedLogits(engine::Engine& eng,
                                                                    const std::vector<int32_t>& prompt,
                                                                    const std::vector<int32_t>& output,
                                                                    const std::vector<int>& positions) {
  const int n_total = static_cast<int>(prompt.size() + output.size());
  for (int p : positions) {
    if (p < 0 || p >= n_total) {
      return absl::InvalidArgumentError(absl::StrCat("position ", p, " outside the ", n_total, " tokens"));
    }
  }
  eng.kv().Clear();
  engine::Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.Add(prompt[i], static_cast<int32_t>(i), 0, true);
  absl::Status s = eng.Decode(b);
  if (!s.ok()) return s;
  std::vector<std::vector<float>> by_pos;
  for (int64_t j = 0; j < eng.n_outputs(); ++j) by_pos.emplace_back(eng.Logits(j), eng.Logits(j) + eng.n_vocab());
  const int max_pos = positions.empty() ? -1 : *std::max_element(positions.begin(), positions.end());
  for (int p = static_cast<int>(prompt.size()); p <= max_pos; ++p) {
    b.Clear();
    b.Add(output[static_cast<size_t>(p) - prompt.size()], p, 0, true);
    s = eng.Decode(b);
    if (!s.ok()) return s;
    by_pos.emplace_back(eng.Logits(0), eng.Logits(0) + eng.n_vocab());
  }
  std::vector<std::vector<float>> out;
  for (int p : positions) out.push_back(by_pos.at(static_cast<size_t>(p)));
  return out;
}

std::vector<std::vector<float>> TeacherForcedLogitsOrFail(engine::Engine& eng, const std::vector<int32_t>& prompt,
                                                          const std::vector<int32_t>& output,
                                                          const std::vector<int>& positions) {
  auto logits = TeacherForcedLogits(eng, prompt, output, positions);
  if (!logits.ok()) {
    ADD_FAILURE() << "teacher-forced logits: " << logits.status();
    return {};
  }
  return *std::move(logits);
}

double MaxAbsDiff(const std::vector<std::vector<float>>& ours, const nlohmann::json& ref_values) {
  if (!ref_values.is_array() || ref_values.size() != ours.size()) return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t k = 0; k < ours.size(); ++k) {
    const nlohmann::json& row = ref_values[k];
    if (!row.is_array() || row.size() != ours[k].size()) return std::numeric_limits<double>::infinity();
    for (size_t i = 0; i < ours[k].size(); ++i) {
      m = std::max(m, std::fabs(static_cast<double>(ours[k][i]) - row[i].get<double>()));
    }
  }
  return m;
}

std::vector<std::string> ReferenceCases(const std::string& dir, const std::vector<std::string>& prefixes) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() <= 5 || n.substr(n.size() - 5) != ".json") continue;
    for (const std::string& p : prefixes) {
      if (n.rfind(p, 0) == 0) {
        out.push_back(dir + "/" + n);
        break;
      }
    }
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

bool UsesGelu(const std::string& arch) {
  static const std::set<std::string> kGelu = {"mpt",   "gpt2", "gptneox", "starcoder",
                                              "bloom", "phi2", "gemma",   "falcon"};
  return kGelu.count(arch) > 0;
}

size_t Comparable(const nlohmann::json& block, double logit_err) {
  const auto margins = block["greedy_margins"].get<std::vector<double>>();
  for (size_t j = 0; j < margins.size(); ++j) {
    if (margins[j] < 2 * logit_err) return j;
  }
  return margins.size();
}

}  // namespace herd::conformance
