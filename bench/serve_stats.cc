#include "bench/serve_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

#include "libs/base/status_macros.h"

namespace herd::bench {

// ---- HttpResponseReader ----

absl::Status HttpResponseReader::Fail(std::string msg) {
  error_ = absl::InvalidArgumentError(std::move(msg));
  return error_;
}

std::string HttpResponseReader::Header(absl::string_view name) const {
  for (const auto& [k, v] : headers_) {
    if (absl::EqualsIgnoreCase(k, name)) return v;
  }
  return "";
}

absl::Status HttpResponseReader::ParseHead(absl::string_view head) {
  std::vector<absl::string_view> lines = absl::StrSplit(head, "\r\n");
  // Status line: HTTP/1.x SP 3DIGIT [SP reason]
  absl::string_view sl = lines[0];
  if (!absl::StartsWith(sl, "HTTP/1.") || sl.size() < 12 || sl[8] != ' ' ||
      !absl::SimpleAtoi(sl.substr(9, 3), &status_) || (sl.size() > 12 && sl[12] != ' ') || status_ < 100) {
    return Fail(absl::StrCat("bad status line '", absl::CHexEscape(sl.substr(0, 80)), "'"));
  }
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t colon = lines[i].find(':');
    if (colon == absl::string_view::npos || colon == 0) {
      return Fail(absl::StrCat("bad header line '", absl::CHexEscape(lines[i].substr(0, 80)), "'"));
    }
    headers_.emplace_back(std::string(absl::StripAsciiWhitespace(lines[i].substr(0, colon))),
                          std::string(absl::StripAsciiWhitespace(lines[i].substr(colon + 1))));
  }
  const std::string te = absl::AsciiStrToLower(Header("Transfer-Encoding"));
  const std::string cl = Header("Content-Length");
  if (!te.empty()) {
    if (te != "chunked") return Fail(absl::StrCat("unsupported Transfer-Encoding '", te, "'"));
    state_ = State::kChunkSize;
  } else if (!cl.empty()) {
    if (!absl::SimpleAtoi(cl, &left_)) return Fail(absl::StrCat("bad Content-Length '", cl, "'"));
    state_ = left_ == 0 ? State::kDone : State::kLength;
  } else {
    state_ = (status_ == 204 || status_ == 304) ? State::kDone : State::kUntilClose;
  }
  return absl::OkStatus();
}

absl::Status HttpResponseReader::Feed(absl::string_view bytes) {
  if (!error_.ok()) return error_;
  while (!bytes.empty() || !buf_.empty()) {
    switch (state_) {
      case State::kHead: {
        buf_.append(bytes.data(), bytes.size());
        bytes = {};
        const size_t end = buf_.find("\r\n\r\n");
        if (end == std::string::npos) {
          if (buf_.size() > (64 << 10)) return Fail("response head over 64 KiB");
          return absl::OkStatus();
        }
        const std::string rest = buf_.substr(end + 4);
        HERD_RETURN_IF_ERROR(ParseHead(absl::string_view(buf_).substr(0, end)));
        buf_.clear();
        if (rest.empty()) return absl::OkStatus();
        return Feed(rest);
      }
      case State::kChunkSize:
      case State::kTrailer:
      case State::kChunkDataEnd: {
        buf_.append(bytes.data(), bytes.size());
        bytes = {};
        const size_t eol = buf_.find("\r\n");
        if (eol == std::string::npos) {
          if (buf_.size() > 4096) return Fail("chunk-size or trailer line over 4 KiB");
          return absl::OkStatus();
        }
        const std::string line = buf_.substr(0, eol);
        buf_.erase(0, eol + 2);
        if (state_ == State::kChunkDataEnd) {
          if (!line.empty()) return Fail("chunk data not followed by CRLF");
          state_ = State::kChunkSize;
        } else if (state_ == State::kTrailer) {
          if (line.empty()) state_ = State::kDone;
        } else {
          absl::string_view hex = absl::StripAsciiWhitespace(absl::string_view(line).substr(0, line.find(';')));
          uint64_t n = 0;
          if (hex.empty() || hex.size() > 15 || !absl::SimpleHexAtoi(hex, &n)) {
            return Fail(absl::StrCat("bad chunk size line '", absl::CHexEscape(line.substr(0, 80)), "'"));
          }
          left_ = n;
          state_ = n == 0 ? State::kTrailer : State::kChunkData;
        }
        break;
      }
      case State::kChunkData:
      case State::kLength: {
        // Bytes left over in buf_ (after a chunk-size line) come first.
        absl::string_view src = buf_.empty() ? bytes : absl::string_view(buf_);
        const size_t take = static_cast<size_t>(std::min<uint64_t>(left_, src.size()));
        if (take > 0) on_body_(src.substr(0, take));
        left_ -= take;
        if (buf_.empty()) {
          bytes.remove_prefix(take);
        } else {
          buf_.erase(0, take);
        }
        if (left_ == 0) state_ = state_ == State::kLength ? State::kDone : State::kChunkDataEnd;
        if (take == 0 && left_ > 0) return absl::OkStatus();
        break;
      }
      case State::kUntilClose:
        if (!buf_.empty()) {
          on_body_(buf_);
          buf_.clear();
        }
        if (!bytes.empty()) on_body_(bytes);
        return absl::OkStatus();
      case State::kDone:
        return Fail(absl::StrCat(bytes.size() + buf_.size(), " bytes after the end of the response"));
    }
  }
  return absl::OkStatus();
}

absl::Status HttpResponseReader::Finish() {
  if (!error_.ok()) return error_;
  switch (state_) {
    case State::kDone:
    case State::kUntilClose:
      state_ = State::kDone;
      return absl::OkStatus();
    case State::kHead:
      return absl::DataLossError(buf_.empty() ? "connection closed before any response"
                                              : "connection closed in the response head");
    case State::kLength:
      return absl::DataLossError(absl::StrCat("connection closed with ", left_, " body bytes missing"));
    default:
      return absl::DataLossError("connection closed before the last chunk");
  }
}

// ---- SseSplitter ----

void SseSplitter::Line(absl::string_view line) {
  if (line.empty()) {
    if (has_data_) on_event_(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (line[0] == ':') return;  // comment
  const size_t colon = line.find(':');
  const absl::string_view field = line.substr(0, colon);
  absl::string_view value = colon == absl::string_view::npos ? absl::string_view() : line.substr(colon + 1);
  if (!value.empty() && value[0] == ' ') value.remove_prefix(1);
  if (field != "data") return;
  if (has_data_) data_.push_back('\n');
  data_.append(value.data(), value.size());
  has_data_ = true;
}

void SseSplitter::Feed(absl::string_view bytes) {
  for (char c : bytes) {
    if (c == '\n' && last_cr_) {  // the LF of a CRLF: the line ended at the CR
      last_cr_ = false;
      continue;
    }
    last_cr_ = c == '\r';
    if (c == '\r' || c == '\n') {
      const std::string line = std::move(line_);
      line_.clear();
      Line(line);
    } else {
      line_.push_back(c);
    }
  }
}

// ---- statistics ----

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(v.begin(), v.end());
  const double rank = std::ceil(std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size()));
  const size_t i = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return v[std::min(i, v.size() - 1)];
}

LevelResult Summarize(int concurrency, int requests, int64_t tokens, double seconds, const std::vector<double>& ttft_ms,
                      const std::vector<double>& itl_ms) {
  LevelResult r;
  r.concurrency = concurrency;
  r.requests = requests;
  r.tokens = tokens;
  r.seconds = seconds;
  r.tok_s = seconds > 0 ? static_cast<double>(tokens) / seconds : 0;
  r.ttft_p50_ms = Percentile(ttft_ms, 50);
  r.ttft_p99_ms = Percentile(ttft_ms, 99);
  r.itl_p50_ms = Percentile(itl_ms, 50);
  r.itl_p99_ms = Percentile(itl_ms, 99);
  return r;
}

absl::StatusOr<LevelResult> MedianOfRounds(const std::vector<LevelResult>& rounds) {
  if (rounds.empty()) return absl::InvalidArgumentError("MedianOfRounds: no rounds");
  LevelResult r;
  r.concurrency = rounds.front().concurrency;
  std::vector<double> tok_s, ttft50, ttft99, itl50, itl99;
  for (const LevelResult& l : rounds) {
    if (l.concurrency != r.concurrency) {
      return absl::InvalidArgumentError(
          absl::StrCat("MedianOfRounds: rounds of concurrency ", r.concurrency, " and ", l.concurrency));
    }
    r.requests += l.requests;
    r.tokens += l.tokens;
    r.seconds += l.seconds;
    tok_s.push_back(l.tok_s);
    ttft50.push_back(l.ttft_p50_ms);
    ttft99.push_back(l.ttft_p99_ms);
    itl50.push_back(l.itl_p50_ms);
    itl99.push_back(l.itl_p99_ms);
  }
  r.tok_s = Percentile(tok_s, 50);
  r.ttft_p50_ms = Percentile(ttft50, 50);
  r.ttft_p99_ms = Percentile(ttft99, 50);
  r.itl_p50_ms = Percentile(itl50, 50);
  r.itl_p99_ms = Percentile(itl99, 50);
  return r;
}

// ---- the reference ----

namespace {

std::vector<std::string> Cells(absl::string_view line) {
  absl::string_view s = absl::StripAsciiWhitespace(line);
  if (absl::StartsWith(s, "|")) s.remove_prefix(1);
  if (absl::EndsWith(s, "|")) s.remove_suffix(1);
  std::vector<std::string> out;
  for (absl::string_view c : absl::StrSplit(s, '|')) out.emplace_back(absl::StripAsciiWhitespace(c));
  return out;
}

// "132.0" -> 132; "52 ms" -> 52; "1.5 s" -> 1500; "-" or junk -> -1.
double Figure(absl::string_view cell, bool ms) {
  absl::string_view s = absl::StripAsciiWhitespace(cell);
  double scale = 1;
  if (ms && absl::EndsWith(s, "ms")) {
    s.remove_suffix(2);
  } else if (ms && absl::EndsWith(s, "s")) {
    s.remove_suffix(1);
    scale = 1000;
  }
  double v;
  if (!absl::SimpleAtod(absl::StripAsciiWhitespace(s), &v) || v < 0) return -1;
  return v * scale;
}

}  // namespace

std::map<int, ServingRef> ParseServingReference(absl::string_view markdown) {
  std::map<int, ServingRef> out;
  std::vector<absl::string_view> lines = absl::StrSplit(markdown, '\n');
  for (size_t i = 0; i < lines.size(); ++i) {
    if (!absl::StartsWith(absl::StripLeadingAsciiWhitespace(lines[i]), "|")) continue;
    const std::vector<std::string> head = Cells(lines[i]);
    if (head.empty() || !absl::EqualsIgnoreCase(head[0], "concurrency")) continue;
    // Column index -> which figure (tok_s, ttft50, ttft99, itl50, itl99).
    std::map<size_t, int> cols;
    for (size_t c = 1; c < head.size(); ++c) {
      const std::string h = absl::AsciiStrToLower(head[c]);
      if (h.find("llama-server") == std::string::npos) continue;
      if (h.find("tok/s") != std::string::npos) cols[c] = 0;
      if (h.find("ttft p50") != std::string::npos) cols[c] = 1;
      if (h.find("ttft p99") != std::string::npos) cols[c] = 2;
      if (h.find("itl p50") != std::string::npos) cols[c] = 3;
      if (h.find("itl p99") != std::string::npos) cols[c] = 4;
    }
    for (size_t j = i + 1; j < lines.size(); ++j) {
      if (!absl::StartsWith(absl::StripLeadingAsciiWhitespace(lines[j]), "|")) break;
      const std::vector<std::string> row = Cells(lines[j]);
      int conc;
      if (row.empty() || !absl::SimpleAtoi(row[0], &conc)) continue;  // the |---| line
      ServingRef r;
      double* fields[] = {&r.tok_s, &r.ttft_p50_ms, &r.ttft_p99_ms, &r.itl_p50_ms, &r.itl_p99_ms};
      for (const auto& [c, which] : cols) {
        if (c < row.size()) *fields[which] = Figure(row[c], /*ms=*/which > 0);
      }
      out[conc] = r;
    }
    break;
  }
  return out;
}

namespace {

// "132.4"; "-" for a missing figure.
std::string Num(double v) { return v < 0 || std::isnan(v) ? std::string("-") : absl::StrFormat("%.1f", v); }

// "52 ms" (TTFT) or "7.5 ms" (ITL: precision 0.1 ms); "-" for a missing figure.
std::string Ms(double v, bool tenths) {
  if (v < 0 || std::isnan(v)) return "-";
  return tenths ? absl::StrFormat("%.1f ms", v) : absl::StrFormat("%.0f ms", v);
}

std::string Ratio(double ours, double theirs) {
  if (ours < 0 || theirs <= 0 || std::isnan(ours)) return "-";
  return absl::StrFormat("%.2f", ours / theirs);
}

}  // namespace

std::string FormatTable(const std::vector<LevelResult>& levels, const std::map<int, ServingRef>& ref) {
  bool ref_p99 = false, ref_itl = false;
  for (const auto& [c, r] : ref) {
    ref_p99 |= r.ttft_p99_ms >= 0;
    ref_itl |= r.itl_p50_ms >= 0 || r.itl_p99_ms >= 0;
  }
  std::string out =
      "| concurrency | requests | herd tok/s | llama-server tok/s | tok/s ratio | herd TTFT p50 | "
      "llama-server TTFT p50 | TTFT ratio | herd TTFT p99 |";
  if (ref_p99) out += " llama-server TTFT p99 |";
  out += " herd ITL p50 | herd ITL p99 |";
  if (ref_itl) out += " llama-server ITL p50 | llama-server ITL p99 |";
  out += "\n|";
  for (size_t i = 0, n = 11 + (ref_p99 ? 1 : 0) + (ref_itl ? 2 : 0); i < n; ++i) out += "---|";
  out += "\n";
  for (const LevelResult& l : levels) {
    const auto it = ref.find(l.concurrency);
    const ServingRef r = it == ref.end() ? ServingRef() : it->second;
    absl::StrAppend(&out, "| ", l.concurrency, " | ", l.requests, " | ", Num(l.tok_s), " | ", Num(r.tok_s), " | ",
                    Ratio(l.tok_s, r.tok_s), " | ", Ms(l.ttft_p50_ms, false), " | ", Ms(r.ttft_p50_ms, false), " | ",
                    Ratio(l.ttft_p50_ms, r.ttft_p50_ms), " | ", Ms(l.ttft_p99_ms, false), " |");
    if (ref_p99) absl::StrAppend(&out, " ", Ms(r.ttft_p99_ms, false), " |");
    absl::StrAppend(&out, " ", Ms(l.itl_p50_ms, true), " | ", Ms(l.itl_p99_ms, true), " |");
    if (ref_itl) absl::StrAppend(&out, " ", Ms(r.itl_p50_ms, true), " | ", Ms(r.itl_p99_ms, true), " |");
    out += "\n";
  }
  return out;
}

}  // namespace herd::bench
