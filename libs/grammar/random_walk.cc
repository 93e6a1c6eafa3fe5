#include "libs/grammar/random_walk.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

namespace herd::grammar {
namespace {

void AppendUtf8(std::string* out, uint32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool Usable(uint32_t cp) { return cp != 0 && cp <= 0x10FFFF && !(cp >= 0xD800 && cp <= 0xDFFF); }

// A random usable code point of [lo, hi]; printable ASCII preferred. 0 if none.
uint32_t Pick(uint32_t lo, uint32_t hi, std::mt19937& rng) {
  const uint32_t alo = std::max<uint32_t>(lo, 0x20), ahi = std::min<uint32_t>(hi, 0x7E);
  if (alo <= ahi && rng() % 10 != 0) return alo + rng() % (ahi - alo + 1);
  for (int tries = 0; tries < 16; ++tries) {
    const uint32_t span = std::min<uint32_t>(hi - lo, 0x3000);
    const uint32_t cp = lo + static_cast<uint32_t>(rng() % (static_cast<uint64_t>(span) + 1));
    if (Usable(cp)) return cp;
  }
  for (uint32_t cp = lo; cp <= hi && cp - lo < 64; ++cp) {
    if (Usable(cp)) return cp;
  }
  return 0;
}

}  // namespace

absl::StatusOr<std::string> RandomWalk(Matcher m, std::mt19937& rng, int soft_steps, int hard_steps) {
  std::string out;
  for (int step = 0; step < hard_steps; ++step) {
    const bool closing = step >= soft_steps;
    if (m.CanEnd() && (closing || rng() % 8 == 0)) return out;
    const auto ranges = m.NextCodePoints();
    if (ranges.empty()) {  // nothing can follow: complete (every stack empty) or dead
      if (m.CanEnd()) return out;
      break;
    }
    uint32_t cp = 0;
    if (!closing) {
      const auto& r = ranges[rng() % ranges.size()];
      cp = Pick(r.first, r.second, rng);
    } else {
      size_t best = static_cast<size_t>(-1);
      for (const auto& r : ranges) {
        for (int k = 0; k < 3; ++k) {
          const uint32_t c = Pick(r.first, r.second, rng);
          if (c == 0) continue;
          Matcher t = m;
          if (!t.AcceptCodePoint(c).ok()) continue;
          const size_t d = t.CanEnd() ? 0 : t.MinStackDepth();
          if (d < best || (d == best && rng() % 2 == 0)) {
            best = d;
            cp = c;
          }
        }
      }
    }
    if (cp == 0 || !m.AcceptCodePoint(cp).ok()) continue;
    AppendUtf8(&out, cp);
  }
  return absl::NotFoundError("random walk did not complete");
}

std::vector<std::string> RandomWalks(const std::shared_ptr<const Grammar>& grammar, std::mt19937& rng, size_t n,
                                     int max_fails, int soft_steps, int hard_steps, int* fails) {
  std::vector<std::string> samples;
  while (samples.size() < n && *fails < max_fails) {
    auto m = Matcher::Create(grammar);
    if (!m.ok()) {
      ++*fails;
      continue;
    }
    auto s = RandomWalk(*m, rng, soft_steps, hard_steps);
    if (s.ok()) {
      samples.push_back(*std::move(s));
    } else {
      ++*fails;
    }
  }
  return samples;
}

std::string ValidateJsonSamples(const nlohmann::json& cases, const std::string& file_name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp ? tmp : "/tmp") + "/" + file_name;
  {
    std::ofstream f(path);
    f << cases.dump(1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  FILE* p = popen(("/usr/bin/python3 libs/grammar/validate_json.py " + path + " 2>&1").c_str(), "r");
  if (p == nullptr) return "cannot run python3";
  std::string out;
  char buf[4096];
  while (size_t got = fread(buf, 1, sizeof buf, p)) out.append(buf, got);
  if (pclose(p) != 0) return out.empty() ? "validate_json.py failed" : out;
  return out.find("ok ") != std::string::npos ? "" : "no 'ok' from validate_json.py: " + out;
}

}  // namespace herd::grammar
