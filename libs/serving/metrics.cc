#include "libs/serving/metrics.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace herd::serving {
namespace {

std::string Escape(const std::string& v) {
  std::string o;
  for (char c : v) {
    if (c == '\\' || c == '"') o += '\\';
    if (c == '\n') {
      o += "\\n";
      continue;
    }
    o += c;
  }
  return o;
}

std::string LabelString(const std::vector<std::string>& names, const Labels& values, const std::string& extra = "") {
  std::string s;
  for (size_t i = 0; i < names.size() && i < values.size(); ++i) {
    absl::StrAppend(&s, s.empty() ? "" : ",", names[i], "=\"", Escape(values[i]), "\"");
  }
  if (!extra.empty()) absl::StrAppend(&s, s.empty() ? "" : ",", extra);
  return s.empty() ? "" : absl::StrCat("{", s, "}");
}

std::string Num(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // Shortest form that round-trips: integers print as integers, 0.1 as 0.1.
  for (int prec = 6; prec <= 17; ++prec) {
    std::string s = absl::StrFormat("%.*g", prec, v);
    if (std::strtod(s.c_str(), nullptr) == v) return s;
  }
  return absl::StrFormat("%.17g", v);
}

}  // namespace

MetricFamily::MetricFamily(std::string name, std::string help, Kind kind, std::vector<std::string> label_names,
                           std::vector<double> buckets)
    : name_(std::move(name)),
      help_(std::move(help)),
      kind_(kind),
      label_names_(std::move(label_names)),
      buckets_(std::move(buckets)) {}

MetricFamily::Series& MetricFamily::Get(const Labels& labels) {
  Series& s = series_[labels];
  if (kind_ == Kind::kHistogram && s.bucket_counts.empty()) s.bucket_counts.assign(buckets_.size(), 0);
  return s;
}

void MetricFamily::Add(double v, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  Get(labels).value += v;
}

void MetricFamily::Set(double v, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  Get(labels).value = v;
}

void MetricFamily::Observe(double v, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  Series& s = Get(labels);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    if (v <= buckets_[i]) s.bucket_counts[i]++;
  }
  s.sum += v;
  s.count++;
}

double MetricFamily::Value(const Labels& labels) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = series_.find(labels);
  if (it == series_.end()) return 0;
  return kind_ == Kind::kHistogram ? static_cast<double>(it->second.count) : it->second.value;
}

void MetricFamily::Render(std::string* out) const {
  std::lock_guard<std::mutex> l(mu_);
  const char* type = kind_ == Kind::kCounter ? "counter" : kind_ == Kind::kGauge ? "gauge" : "histogram";
  absl::StrAppend(out, "# HELP ", name_, " ", help_, "\n# TYPE ", name_, " ", type, "\n");
  for (const auto& [labels, s] : series_) {
    if (kind_ != Kind::kHistogram) {
      absl::StrAppend(out, name_, LabelString(label_names_, labels), " ", Num(s.value), "\n");
      continue;
    }
    for (size_t i = 0; i < buckets_.size(); ++i) {
      absl::StrAppend(out, name_, "_bucket",
                      LabelString(label_names_, labels, absl::StrCat("le=\"", Num(buckets_[i]), "\"")), " ",
                      s.bucket_counts[i], "\n");
    }
    absl::StrAppend(out, name_, "_bucket", LabelString(label_names_, labels, "le=\"+Inf\""), " ", s.count, "\n");
    absl::StrAppend(out, name_, "_sum", LabelString(label_names_, labels), " ", Num(s.sum), "\n");
    absl::StrAppend(out, name_, "_count", LabelString(label_names_, labels), " ", s.count, "\n");
  }
}

MetricFamily* Registry::Add(const std::string& name, std::unique_ptr<MetricFamily> f) {
  std::lock_guard<std::mutex> l(mu_);
  for (auto& [n, fam] : families_) {
    if (n == name) return fam.get();
  }
  families_.emplace_back(name, std::move(f));
  return families_.back().second.get();
}

MetricFamily* Registry::Counter(const std::string& name, const std::string& help, std::vector<std::string> labels) {
  return Add(name, std::make_unique<MetricFamily>(name, help, MetricFamily::Kind::kCounter, std::move(labels),
                                                  std::vector<double>{}));
}

MetricFamily* Registry::Gauge(const std::string& name, const std::string& help, std::vector<std::string> labels) {
  return Add(name, std::make_unique<MetricFamily>(name, help, MetricFamily::Kind::kGauge, std::move(labels),
                                                  std::vector<double>{}));
}

MetricFamily* Registry::Histogram(const std::string& name, const std::string& help, std::vector<std::string> labels,
                                  std::vector<double> buckets) {
  if (buckets.empty()) buckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
  return Add(name, std::make_unique<MetricFamily>(name, help, MetricFamily::Kind::kHistogram, std::move(labels),
                                                  std::move(buckets)));
}

std::string Registry::Render() const {
  std::lock_guard<std::mutex> l(mu_);
  std::string out;
  for (const auto& [n, f] : families_) f->Render(&out);
  return out;
}

}  // namespace herd::serving
