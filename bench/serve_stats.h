// The pieces of serve_bench that are worth testing on their own: an incremental
// HTTP/1.1 response reader (head, then a chunked, Content-Length or close-delimited
// body), a server-sent-events splitter, percentiles, and the llama-server figures of
// ../shared/reference/perf/llamacpp-avx2.md ("Serving: llama-server vs herd") with the
// markdown table serve_bench prints next to them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace herd::bench {

/// Reads one HTTP/1.1 response from bytes fed as they arrive. Body bytes (de-chunked)
/// go to `on_body` as soon as they are decoded.
class HttpResponseReader {
 public:
  explicit HttpResponseReader(std::function<void(absl::string_view)> on_body) : on_body_(std::move(on_body)) {}

  /// Consumes `bytes`. INVALID_ARGUMENT on a malformed head, chunk size or chunk
  /// framing (the message says what); bytes after the end of the response are an error
  /// too. Once an error was returned, every later call returns it again.
  absl::Status Feed(absl::string_view bytes);
  /// The peer closed the connection: OK when the response is complete (or its body was
  /// close-delimited), else DATA_LOSS saying what was missing.
  absl::Status Finish();

  bool head_done() const { return state_ != State::kHead; }
  bool done() const { return state_ == State::kDone; }
  /// Valid once head_done().
  int status() const { return status_; }
  /// Value of the first header named `name` (case-insensitive); "" when absent.
  std::string Header(absl::string_view name) const;

 private:
  enum class State { kHead, kChunkSize, kChunkData, kChunkDataEnd, kTrailer, kLength, kUntilClose, kDone };
  absl::Status ParseHead(absl::string_view head);
  absl::Status Fail(std::string msg);

  std::function<void(absl::string_view)> on_body_;
  State state_ = State::kHead;
  std::string buf_;  // undecoded bytes (head, chunk-size lines, trailers)
  int status_ = 0;
  std::vector<std::pair<std::string, std::string>> headers_;
  uint64_t left_ = 0;  // bytes left of the current chunk or of the Content-Length body
  absl::Status error_;
};

/// Splits a text/event-stream body into events (RFC: events end at a blank line; "\n",
/// "\r\n" and "\r" line ends; "data:" lines joined with "\n", one leading space dropped;
/// comments and other fields ignored; an event without data lines is not reported).
class SseSplitter {
 public:
  explicit SseSplitter(std::function<void(const std::string& data)> on_event) : on_event_(std::move(on_event)) {}
  void Feed(absl::string_view bytes);
  /// Bytes of an unfinished event (should be empty at the end of a stream).
  size_t pending() const { return line_.size() + data_.size() + (has_data_ ? 1 : 0); }

 private:
  void Line(absl::string_view line);
  std::function<void(const std::string&)> on_event_;
  std::string line_;
  std::string data_;
  bool has_data_ = false;
  bool last_cr_ = false;
};

/// Nearest-rank percentile (p in [0, 100]) of `v`: the smallest value with at least p%
/// of the values at or below it (p 0 = the minimum). NaN for an empty `v`.
double Percentile(std::vector<double> v, double p);

/// One concurrency level of the reference: -1 = not given.
struct ServingRef {
  double tok_s = -1;
  double ttft_p50_ms = -1;
  double ttft_p99_ms = -1;
  double itl_p50_ms = -1;
  double itl_p99_ms = -1;
};

/// The llama-server columns of the first markdown table whose first header cell is
/// "concurrency", by concurrency: a column counts when its header names llama-server
/// and "tok/s", "TTFT p50", "TTFT p99", "ITL p50" or "ITL p99" (case-insensitive);
/// cells read "132.0", "52 ms", "1.2 s" (seconds become ms) or "-". Empty when the text
/// has no such table.
std::map<int, ServingRef> ParseServingReference(absl::string_view markdown);

/// What serve_bench measured at one concurrency level.
struct LevelResult {
  int concurrency = 0;
  int requests = 0;
  int64_t tokens = 0;  // generated, summed over requests
  double seconds = 0;  // wall time of the level
  double tok_s = 0;
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double itl_p50_ms = 0, itl_p99_ms = 0;
};

/// Summarizes one level: per-request TTFTs and all inter-token gaps (ms).
LevelResult Summarize(int concurrency, int requests, int64_t tokens, double seconds, const std::vector<double>& ttft_ms,
                      const std::vector<double>& itl_ms);

/// One level measured in several rounds: requests, tokens and seconds summed; tok/s,
/// TTFT p50/p99 and ITL p50/p99 each the median (nearest rank) of the rounds' values, so
/// a round caught in a slow minute of the machine does not decide the row. INVALID_ARGUMENT
/// when `rounds` is empty or mixes concurrency levels.
absl::StatusOr<LevelResult> MedianOfRounds(const std::vector<LevelResult>& rounds);

/// The markdown table: one row per level with herd's tok/s, TTFT p50/p99, ITL p50/p99,
/// the reference's llama-server figures and herd/llama-server ratios (tok/s: > 1 is
/// faster; TTFT: > 1 is slower); "-" where the reference lacks the level or column.
std::string FormatTable(const std::vector<LevelResult>& levels, const std::map<int, ServingRef>& ref);

}  // namespace herd::bench
