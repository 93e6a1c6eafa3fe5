#include "bench/serve_stats.h"

#include <cmath>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "gtest/gtest.h"

#include "tests/shared_data.h"

namespace herd::bench {
namespace {

struct Read {
  std::shared_ptr<std::string> body = std::make_shared<std::string>();
  absl::Status status;
  std::unique_ptr<HttpResponseReader> reader;
};

// Feeds `raw` to a reader in pieces of `step` bytes, then ends the connection.
Read ReadInPieces(const std::string& raw, size_t step) {
  Read r;
  r.reader =
      std::make_unique<HttpResponseReader>([body = r.body](absl::string_view b) { body->append(b.data(), b.size()); });
  for (size_t i = 0; i < raw.size() && r.status.ok(); i += step) r.status = r.reader->Feed(raw.substr(i, step));
  if (r.status.ok()) r.status = r.reader->Finish();
  return r;
}

TEST(HttpResponseReaderTest, ChunkedBodyInEveryPieceSize) {
  const std::string raw =
      "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\ntransfer-encoding: Chunked\r\n\r\n"
      "5\r\nhello\r\n"
      "1a;ext=1\r\nabcdefghijklmnopqrstuvwxyz\r\n"
      "0\r\nX-Trailer: 1\r\n\r\n";
  for (size_t step = 1; step <= raw.size(); ++step) {
    const Read r = ReadInPieces(raw, step);
    EXPECT_EQ(*r.body, "helloabcdefghijklmnopqrstuvwxyz") << step;
    EXPECT_TRUE(r.status.ok()) << step << ": " << r.status;
    EXPECT_EQ(r.reader->status(), 200);
    EXPECT_EQ(r.reader->Header("content-type"), "text/event-stream");
    EXPECT_TRUE(r.reader->done());
  }
}

TEST(HttpResponseReaderTest, ContentLengthAndCloseDelimited) {
  Read r = ReadInPieces("HTTP/1.1 400 Bad Request\r\nContent-Length: 7\r\n\r\n{\"e\":1}", 3);
  EXPECT_EQ(*r.body, "{\"e\":1}");
  EXPECT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.reader->status(), 400);
  r = ReadInPieces("HTTP/1.0 200 OK\r\n\r\nuntil close", 4);
  EXPECT_EQ(*r.body, "until close");
  EXPECT_TRUE(r.status.ok()) << r.status;
}

TEST(HttpResponseReaderTest, TruncatedOrMalformedResponsesAreErrors) {
  struct Case {
    const char* raw;
    absl::StatusCode code;
    const char* says;
  };
  const Case cases[] = {
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel", absl::StatusCode::kDataLoss, "last chunk"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", absl::StatusCode::kDataLoss, "5 body bytes missing"},
      {"HTTP/1.1 200 OK\r\nContent-", absl::StatusCode::kDataLoss, "in the response head"},
      {"", absl::StatusCode::kDataLoss, "before any response"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", absl::StatusCode::kInvalidArgument, "chunk size"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabX\r\n0\r\n\r\n", absl::StatusCode::kInvalidArgument,
       "not followed by CRLF"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n", absl::StatusCode::kInvalidArgument, "gzip"},
      {"SSH-2.0-OpenSSH\r\n\r\n", absl::StatusCode::kInvalidArgument, "status line"},
      {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabc", absl::StatusCode::kInvalidArgument, "after the end"},
  };
  for (const Case& c : cases) {
    for (size_t step : {1, 2, 100}) {
      const Read r = ReadInPieces(c.raw, step);
      EXPECT_EQ(r.status.code(), c.code) << c.raw << " / " << step << ": " << r.status;
      EXPECT_NE(r.status.message().find(c.says), std::string::npos) << c.raw << ": " << r.status;
    }
  }
}

TEST(SseSplitterTest, EventsAcrossPiecesAndLineEnds) {
  std::vector<std::string> events;
  SseSplitter sse([&events](const std::string& d) { events.push_back(d); });
  const std::string body =
      "data: {\"a\":1}\n\n"
      ": a comment\r\n"
      "event: x\r\ndata:two\r\ndata: lines\r\n\r\n"
      "id: 7\n\n"  // no data: no event
      "data: [DONE]\r\r";
  for (char c : body) sse.Feed(std::string(1, c));
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0], "{\"a\":1}");
  EXPECT_EQ(events[1], "two\nlines");
  EXPECT_EQ(events[2], "[DONE]");
  EXPECT_EQ(sse.pending(), 0u);
  sse.Feed("data: half");
  EXPECT_GT(sse.pending(), 0u);
}

TEST(PercentileTest, NearestRank) {
  EXPECT_TRUE(std::isnan(Percentile({}, 50)));
  EXPECT_EQ(Percentile({5}, 99), 5);
  EXPECT_EQ(Percentile({4, 1, 3, 2}, 50), 2);
  EXPECT_EQ(Percentile({4, 1, 3, 2}, 51), 3);
  EXPECT_EQ(Percentile({4, 1, 3, 2}, 0), 1);
  EXPECT_EQ(Percentile({4, 1, 3, 2}, 100), 4);
  std::vector<double> v;
  for (int i = 1; i <= 100; ++i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 99), 99);
  v.push_back(1000);
  EXPECT_EQ(Percentile(v, 99), 100);
}

const char kReference[] = R"(## Serving: llama-server vs herd

| concurrency | llama-server tok/s | herd tok/s | llama-server TTFT p50 | herd TTFT p50 |
|---|---|---|---|---|
| 1 | 132.0 | 119.3 | 52 ms | 75 ms |
| 8 | 222.1 | 136.9 | 1.5 s | 895 ms |
| 16 | - | 96.0 | 93 ms | 2588 ms |

| concurrency | llama-server tok/s |
|---|---|
| 1 | 999 |
)";

TEST(ServingReferenceTest, ParsesTheLlamaServerColumns) {
  const auto ref = ParseServingReference(kReference);
  ASSERT_EQ(ref.size(), 3u);
  EXPECT_EQ(ref.at(1).tok_s, 132.0);
  EXPECT_EQ(ref.at(1).ttft_p50_ms, 52);
  EXPECT_EQ(ref.at(1).ttft_p99_ms, -1);
  EXPECT_EQ(ref.at(8).tok_s, 222.1);
  EXPECT_EQ(ref.at(8).ttft_p50_ms, 1500);
  EXPECT_EQ(ref.at(16).tok_s, -1);
  EXPECT_EQ(ref.at(16).ttft_p50_ms, 93);
  EXPECT_TRUE(ParseServingReference("# nothing\n| a | b |\n|---|---|\n| 1 | 2 |\n").empty());
}

TEST(ServingReferenceTest, TheSharedReferenceHasTheLevels) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  std::ifstream in(shared + "/reference/perf/llamacpp-avx2.md");
  std::stringstream ss;
  ss << in.rdbuf();
  const auto ref = ParseServingReference(ss.str());
  for (int c : {1, 8, 16}) {
    ASSERT_EQ(ref.count(c), 1u) << c;
    EXPECT_GT(ref.at(c).tok_s, 0) << c;
    EXPECT_GT(ref.at(c).ttft_p50_ms, 0) << c;
  }
}

TEST(FormatTableTest, RatiosAndDashesForMissingLevels) {
  const auto ref = ParseServingReference(kReference);
  std::vector<LevelResult> levels = {
      Summarize(1, 3, 192, 1.6, {60, 70, 80}, {8, 9, 10, 11}),
      Summarize(32, 96, 6144, 40, {100, 200}, {20}),
  };
  EXPECT_DOUBLE_EQ(levels[0].tok_s, 120);
  EXPECT_EQ(levels[0].ttft_p50_ms, 70);
  EXPECT_EQ(levels[0].ttft_p99_ms, 80);
  EXPECT_EQ(levels[0].itl_p50_ms, 9);
  const std::string t = FormatTable(levels, ref);
  const std::vector<std::string> lines = absl::StrSplit(t, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 4u) << t;
  EXPECT_EQ(lines[0],
            "| concurrency | requests | herd tok/s | llama-server tok/s | tok/s ratio | herd TTFT p50 | "
            "llama-server TTFT p50 | TTFT ratio | herd TTFT p99 | herd ITL p50 | herd ITL p99 |");
  EXPECT_EQ(lines[2], "| 1 | 3 | 120.0 | 132.0 | 0.91 | 70 ms | 52 ms | 1.35 | 80 ms | 9.0 ms | 11.0 ms |");
  EXPECT_EQ(lines[3], "| 32 | 96 | 153.6 | - | - | 100 ms | - | - | 200 ms | 20.0 ms | 20.0 ms |");
}

TEST(MedianOfRoundsTest, MediansPerMetricAndSums) {
  const std::vector<LevelResult> rounds = {
      Summarize(8, 24, 1536, 3.0, {100}, {10}),  // 512 tok/s
      Summarize(8, 24, 1536, 6.0, {300}, {30}),  // 256 tok/s: a slow round
      Summarize(8, 24, 1536, 4.0, {200}, {20}),  // 384 tok/s
  };
  auto m = MedianOfRounds(rounds);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->concurrency, 8);
  EXPECT_EQ(m->requests, 72);
  EXPECT_EQ(m->tokens, 3 * 1536);
  EXPECT_DOUBLE_EQ(m->seconds, 13.0);
  EXPECT_DOUBLE_EQ(m->tok_s, 384);
  EXPECT_EQ(m->ttft_p50_ms, 200);
  EXPECT_EQ(m->itl_p99_ms, 20);
  EXPECT_FALSE(MedianOfRounds({}).ok());
  EXPECT_FALSE(MedianOfRounds({rounds[0], Summarize(16, 48, 3072, 6.0, {1}, {1})}).ok());
}

}  // namespace
}  // namespace herd::bench
