#include "libs/serving/metrics.h"

#include "gtest/gtest.h"

namespace herd::serving {
namespace {

TEST(Metrics, RendersPrometheusText) {
  Registry r;
  MetricFamily* c = r.Counter("herd_requests_total", "Requests.", {"model", "code"});
  c->Add(1, {"stories", "OK"});
  c->Add(2, {"stories", "OK"});
  MetricFamily* g = r.Gauge("herd_kv_cells_used", "KV cells in use.");
  g->Set(42);
  MetricFamily* h = r.Histogram("herd_latency_seconds", "Latency.", {}, {0.1, 1});
  h->Observe(0.05);
  h->Observe(0.5);
  h->Observe(5);
  const std::string text = r.Render();
  EXPECT_NE(text.find("# TYPE herd_requests_total counter"), std::string::npos);
  EXPECT_NE(text.find("herd_requests_total{model=\"stories\",code=\"OK\"} 3"), std::string::npos) << text;
  EXPECT_NE(text.find("herd_kv_cells_used 42"), std::string::npos);
  EXPECT_NE(text.find("herd_latency_seconds_bucket{le=\"0.1\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("herd_latency_seconds_bucket{le=\"+Inf\"} 3"), std::string::npos);
  EXPECT_NE(text.find("herd_latency_seconds_count 3"), std::string::npos);
  EXPECT_EQ(c->Value({"stories", "OK"}), 3);
  EXPECT_EQ(r.Counter("herd_requests_total", "again", {"model", "code"}), c);  // same family
}

}  // namespace
}  // namespace herd::serving
