// ParseRequest (the server's parsing steps over bytes in memory): the head rules hold for
// a chunked body's trailer fields too (found by tests/fuzz:http_request_fuzz).
#include "libs/serving/http_parse.h"

#include <string>

#include "gtest/gtest.h"

namespace herd::serving::http {
namespace {

std::string Chunked(const std::string& trailers) {
  return "POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
         "5\r\nhello\r\n0\r\n" +
         trailers + "\r\n";
}

TEST(HttpParseTest, ChunkedBodyWithinTheLimits) {
  ParseLimits limits;
  limits.max_header_count = 4;
  ParseResult r = ParseRequest(Chunked(""), limits);
  ASSERT_EQ(r.status, 0) << r.message;
  ASSERT_TRUE(r.complete);
  EXPECT_EQ(r.request.body, "hello");
}

TEST(HttpParseTest, TrailerFieldsCountTowardTheHeaderLimit) {
  ParseLimits limits;
  limits.max_header_count = 4;
  ParseResult r = ParseRequest(Chunked("A: 1\r\nB: 2\r\nC: 3\r\n"), limits);
  EXPECT_EQ(r.status, 431) << r.message;
  EXPECT_FALSE(r.complete);
  EXPECT_NE(r.message.find("trailer"), std::string::npos) << r.message;
}

TEST(HttpParseTest, TrailerCannotAddFramingFields) {
  ParseLimits limits;
  ParseResult r = ParseRequest(Chunked("Content-Length: 5\r\n"), limits);
  EXPECT_EQ(r.status, 400) << r.message;
  EXPECT_FALSE(r.complete);
}

}  // namespace
}  // namespace herd::serving::http
