// Prometheus metrics: counters, gauges and histograms with labels, rendered in the
// text exposition format (https://prometheus.io/docs/instrumenting/exposition_formats/).
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace herd::serving {

/// Label values in the order of the family's label names.
using Labels = std::vector<std::string>;

class MetricFamily {
 public:
  enum class Kind { kCounter, kGauge, kHistogram };
  MetricFamily(std::string name, std::string help, Kind kind, std::vector<std::string> label_names,
               std::vector<double> buckets);

  /// Counters: adds v (>= 0). Gauges: adds v (any sign).
  void Add(double v, const Labels& labels = {});
  /// Gauges: sets the value.
  void Set(double v, const Labels& labels = {});
  /// Histograms: records one observation.
  void Observe(double v, const Labels& labels = {});
  /// Current value of a counter/gauge series (0 if absent); histogram: the count.
  double Value(const Labels& labels = {}) const;

  void Render(std::string* out) const;

 private:
  struct Series {
    double value = 0;
    std::vector<uint64_t> bucket_counts;
    double sum = 0;
    uint64_t count = 0;
  };
  Series& Get(const Labels& labels);
  std::string name_, help_;
  Kind kind_;
  std::vector<std::string> label_names_;
  std::vector<double> buckets_;
  mutable std::mutex mu_;
  std::map<Labels, Series> series_;
};

/// A set of metric families. Thread-safe.
class Registry {
 public:
  MetricFamily* Counter(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  MetricFamily* Gauge(const std::string& name, const std::string& help, std::vector<std::string> labels = {});
  /// Default buckets: latency in seconds from 1 ms to 60 s.
  MetricFamily* Histogram(const std::string& name, const std::string& help, std::vector<std::string> labels = {},
                          std::vector<double> buckets = {});
  /// The whole registry in Prometheus text format.
  std::string Render() const;

 private:
  MetricFamily* Add(const std::string& name, std::unique_ptr<MetricFamily> f);
  mutable std::mutex mu_;
  std::vector<std::pair<std::string, std::unique_ptr<MetricFamily>>> families_;
};

}  // namespace herd::serving
