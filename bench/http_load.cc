#include "bench/http_load.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

#include "bench/bench_models.h"
#include "bench/serve_stats.h"
#include "libs/base/status_macros.h"
#include "libs/gguf/ggml_type.h"

namespace herd::bench {

using json = nlohmann::json;

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a.empty() ? "?" : absl::StrCat(a, " ", b, " ", c);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

const char* const kWords[] = {
    "the",   "a",      "small",  "river",   "runs",   "through", "green",    "valley",  "where",   "old",
    "trees", "grow",   "near",   "stone",   "bridge", "and",     "children", "play",    "every",   "summer",
    "day",   "while",  "their",  "parents", "work",   "in",      "fields",   "of",      "wheat",   "corn",
    "under", "bright", "blue",   "sky",     "birds",  "sing",    "songs",    "about",   "distant", "mountains",
    "snow",  "falls",  "winter", "people",  "gather", "around",  "warm",     "fires",   "tell",    "stories",
    "long",  "ago",    "brave",  "knight",  "rode",   "across",  "land",     "to",      "find",    "lost",
    "city",  "gold",   "silver", "light",   "dark",   "forest",  "quiet",    "morning", "evening", "rain",
};
constexpr size_t kNumWords = sizeof(kWords) / sizeof(kWords[0]);

// Connects to host:port (numeric or resolvable). Returns the socket or -1 with *err set.
int ConnectTo(const Target& t, std::string* err) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = ::getaddrinfo(t.host.c_str(), std::to_string(t.port).c_str(), &hints, &res);
  if (rc != 0) {
    *err = absl::StrCat("resolve ", t.host, ": ", ::gai_strerror(rc));
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      *err = absl::StrCat("connect ", t.host, ":", t.port, ": ", std::strerror(errno));
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(res);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  }
  return fd;
}

// POSTs `body` to /v1/completions and reads the event stream. Times are taken when the
// bytes carrying an event arrive; TTFT = request start -> first event with text; ITL =
// the gaps between consecutive events with text (one token each, except when the

}  // namespace

std::string Words(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out;
  int sentence_left = 0;
  for (int i = 0; i < n; ++i) {
    std::string w = kWords[rng() % kNumWords];
    if (sentence_left == 0) {
      sentence_left = 5 + static_cast<int>(rng() % 4);
      w[0] = absl::ascii_toupper(w[0]);
    }
    absl::StrAppend(&out, i ? " " : "", w, --sentence_left == 0 || i == n - 1 ? "." : "");
  }
  return out;
}

RequestResult StreamCompletion(const Target& t, const std::string& body, int max_tokens, int timeout_s) {
  RequestResult r;
  const Clock::time_point t0 = Clock::now();
  const Clock::time_point deadline = t0 + std::chrono::seconds(timeout_s);
  int fd = ConnectTo(t, &r.error);
  if (fd < 0) return r;
  const std::string req = absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: ", t.host, ":", t.port,
                                       "\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\n"
                                       "Content-Length: ",
                                       body.size(), "\r\nConnection: close\r\n\r\n", body);
  for (size_t sent = 0; sent < req.size();) {
    const ssize_t n = ::send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      r.error = absl::StrCat("send: ", std::strerror(errno));
      ::close(fd);
      return r;
    }
    sent += static_cast<size_t>(n);
  }

  Clock::time_point now = t0, last_text{};
  bool first = true, done_event = false;
  std::string raw_body;  // kept for error messages (non-200 answers)
  std::string finish_reason;
  bool have_usage = false;
  int text_events = 0;
  SseSplitter sse([&](const std::string& data) {
    if (!r.error.empty()) return;
    if (data == "[DONE]") {
      done_event = true;
      return;
    }
    json j = json::parse(data, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) {
      r.error = absl::StrCat("event is not a JSON object: ", data.substr(0, 200));
      return;
    }
    if (j.contains("error")) {
      r.error = absl::StrCat("error event: ", j["error"].dump());
      return;
    }
    if (j.contains("usage") && j["usage"].is_object()) {
      r.completion_tokens = j["usage"].value("completion_tokens", int64_t{0});
      r.prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
      if (j["usage"].contains("prompt_tokens_details") && j["usage"]["prompt_tokens_details"].is_object()) {
        r.cached_tokens = j["usage"]["prompt_tokens_details"].value("cached_tokens", int64_t{0});
      }
      have_usage = true;
    }
    if (!j.contains("choices") || !j["choices"].is_array() || j["choices"].empty()) return;
    const json& c = j["choices"][0];
    if (c.contains("finish_reason") && c["finish_reason"].is_string()) finish_reason = c["finish_reason"];
    const bool has_text = c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty();
    if (!has_text) return;
    ++text_events;
    r.text += c["text"].get<std::string>();
    if (first) {
      r.ttft_ms = Ms(now - t0);
      first = false;
    } else {
      r.itl_ms.push_back(Ms(now - last_text));
    }
    last_text = now;
  });
  HttpResponseReader* rp = nullptr;
  HttpResponseReader reader([&](absl::string_view b) {
    if (rp->status() == 200) {
      sse.Feed(b);
    } else if (raw_body.size() < 4096) {
      raw_body.append(b.data(), std::min<size_t>(b.size(), 4096 - raw_body.size()));
    }
  });
  rp = &reader;
  std::vector<char> buf(64 << 10);
  absl::Status st;
  while (r.error.empty() && !reader.done()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, POLLIN, 0};
    const int pr = left <= 0 ? 0 : ::poll(&p, 1, static_cast<int>(left));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) {
      r.error = absl::StrCat("no complete answer within --timeout_s=", timeout_s);
      break;
    }
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    now = Clock::now();
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      r.error = absl::StrCat("recv: ", std::strerror(errno));
      break;
    }
    st = n == 0 ? reader.Finish() : reader.Feed(absl::string_view(buf.data(), static_cast<size_t>(n)));
    if (!st.ok()) {
      r.error = absl::StrCat("bad HTTP response: ", st.message());
      break;
    }
    if (n == 0) break;
  }
  ::close(fd);
  if (!r.error.empty()) return r;
  if (reader.status() != 200) {
    r.error = absl::StrCat("HTTP ", reader.status(), ": ", raw_body);
    return r;
  }
  if (!done_event) {
    r.error = "the stream ended without data: [DONE]";
  } else if (text_events == 0) {
    r.error = "no text in the stream";
  } else if (!have_usage) {
    r.error = "no usage in the last chunk";
  } else if (r.completion_tokens != max_tokens) {
    r.error = absl::StrCat(r.completion_tokens, " tokens generated, not max_tokens ", max_tokens, " (finish_reason ",
                           finish_reason.empty() ? "none" : finish_reason, ")");
  }
  return r;
}

absl::StatusOr<std::string> HttpCall(const Target& t, const std::string& method, const std::string& path,
                                     const std::string& body) {
  std::string err;
  const int fd = ConnectTo(t, &err);
  if (fd < 0) return absl::UnavailableError(err);
  const std::string req = absl::StrCat(method, " ", path, " HTTP/1.1\r\nHost: ", t.host, ":", t.port,
                                       "\r\nContent-Type: application/json\r\nContent-Length: ", body.size(),
                                       "\r\nConnection: close\r\n\r\n", body);
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return absl::UnavailableError(absl::StrCat("send ", path, ": ", std::strerror(errno)));
  }
  std::string got;
  HttpResponseReader reader([&](absl::string_view b) { got.append(b.data(), b.size()); });
  std::vector<char> buf(64 << 10);
  absl::Status st;
  for (;;) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 30000) <= 0) {
      st = absl::DeadlineExceededError(absl::StrCat(path, ": no answer within 30 s"));
      break;
    }
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      st = reader.Finish();
      break;
    }
    st = reader.Feed(absl::string_view(buf.data(), static_cast<size_t>(n)));
    if (!st.ok() || reader.done()) break;
  }
  ::close(fd);
  if (!st.ok()) return st;
  if (reader.status() != 200) return absl::InternalError(absl::StrCat(path, ": HTTP ", reader.status(), ": ", got));
  return got;
}

Target TargetOf(const std::string& addr, const std::string& model) {
  Target t;
  const size_t colon = addr.rfind(':');
  t.host = addr.substr(0, colon);
  if (colon != std::string::npos) (void)absl::SimpleAtoi(addr.substr(colon + 1), &t.port);
  t.model = model;
  return t;
}

double MetricSum(absl::string_view metrics, absl::string_view name) {
  double sum = 0;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, name) || line.size() <= name.size()) continue;
    const char next = line[name.size()];
    if (next != ' ' && next != '{') continue;
    const size_t sp = line.rfind(' ');
    double v = 0;
    if (sp != absl::string_view::npos && absl::SimpleAtod(line.substr(sp + 1), &v)) sum += v;
  }
  return sum;
}

LoadResult RunClients(const Target& t, const std::vector<std::string>& bodies, int concurrency, int max_tokens,
                      int timeout_s, std::atomic<bool>* abort) {
  LoadResult out;
  const int n = static_cast<int>(bodies.size());
  out.results.resize(bodies.size());
  std::atomic<int> next{0};
  std::mutex mu;
  const Clock::time_point t0 = Clock::now();
  std::vector<std::thread> clients;
  for (int c = 0; c < concurrency; ++c) {
    clients.emplace_back([&] {
      for (int i = next++; i < n && !abort->load(); i = next++) {
        RequestResult r = StreamCompletion(t, bodies[static_cast<size_t>(i)], max_tokens, timeout_s);
        if (!r.error.empty()) {
          std::lock_guard<std::mutex> l(mu);
          if (out.error.empty()) out.error = absl::StrCat("request ", i + 1, " of ", n, ": ", r.error);
          abort->store(true);
        }
        out.results[static_cast<size_t>(i)] = std::move(r);
      }
    });
  }
  for (std::thread& th : clients) th.join();
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

absl::StatusOr<PreparedModel> PrepareModel(const std::string& shape_name, const std::string& type,
                                           const std::string& cache_dir, const std::string& vocab_path,
                                           const std::string& shared) {
  const Shape* shape = FindShape(shape_name);
  if (shape == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("model ", shape_name, ": not one of ", ShapeNames()));
  }
  GgmlType wt;
  const std::string lower = absl::AsciiStrToLower(type);
  if (!ParseGgmlType(lower, &wt)) return absl::InvalidArgumentError(absl::StrCat("type ", lower, ": unknown"));
  std::string vocab = vocab_path;
  if (vocab.empty()) {
    if (shared.empty()) return absl::NotFoundError("../shared not found: set HERD_SHARED or pass --vocab");
    vocab = shared + "/models/vocab/ggml-vocab-llama-spm.gguf";
  }
  const std::string dir = cache_dir.empty() ? DefaultCacheDir() : cache_dir;
  bool reused = false;
  std::fprintf(stderr, "model %s %s in %s/models (random weights, vocab %s; written once)\n", shape->name.c_str(),
               lower.c_str(), dir.c_str(), vocab.c_str());
  PreparedModel m;
  HERD_ASSIGN_OR_RETURN(m.path, CachedModel(*shape, wt, dir, vocab, &reused));
  m.dir = m.path.substr(0, m.path.rfind('/'));
  m.name = absl::StrCat(shape->name, "-", absl::AsciiStrToLower(GgmlTypeName(wt)));
  return m;
}

}  // namespace herd::bench
