#include "tools/herd/cluster.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/grpcpp.h"

#include "libs/base/status_macros.h"
#include "proto/herd/v1/gateway.grpc.pb.h"

namespace herd::cli {
namespace {

std::atomic<bool> g_signalled{false};
void OnSignal(int) { g_signalled = true; }

bool IsExecutable(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & S_IXUSR);
}

std::string SelfExe() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  buf[n] = 0;
  return buf;
}

// A free TCP port on the host (bind to 0, read it, close). Racy in theory, fine on loopback.
int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    socklen_t len = sizeof(a);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) port = ntohs(a.sin_port);
  }
  ::close(fd);
  return port;
}

std::string AfterToken(const std::string& line, const std::string& token) {
  size_t p = line.find(token);
  if (p == std::string::npos) return "";
  p += token.size();
  size_t e = p;
  while (e < line.size() && !isspace(static_cast<unsigned char>(line[e]))) ++e;
  return line.substr(p, e - p);
}

// "exited with status 1", "killed by signal 9 (Killed)".
std::string DescribeExit(int status) {
  if (WIFEXITED(status)) return absl::StrCat("exited with status ", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    return absl::StrCat("killed by signal ", WTERMSIG(status), " (", strsignal(WTERMSIG(status)), ")");
  }
  return absl::StrCat("ended with wait status ", status);
}

// The port after the last ':' of "host:port", or "" when there is none.
std::string PortOf(const std::string& addr) {
  const size_t colon = addr.rfind(':');
  return colon == std::string::npos ? "" : addr.substr(colon + 1);
}

}  // namespace

LocalCluster::~LocalCluster() { Stop(); }

void LocalCluster::PinPorts(Process* p) {
  for (std::string& a : p->argv) {
    std::string port;
    if (a == "--port=0") {
      port = PortOf(p->grpc_addr);
    } else if (a == "--http_port=0") {
      port = PortOf(p->http_addr);
    } else if (a == "--metrics_port=0") {
      port = PortOf(p->metrics_addr);
    } else {
      continue;
    }
    if (!port.empty() && port != "0") a = a.substr(0, a.find('=') + 1) + port;
  }
}

absl::StatusOr<std::string> LocalCluster::FindBinary(const std::string& rel) const {
  std::vector<std::string> candidates;
  if (!opts_.bin_dir.empty()) candidates.push_back(opts_.bin_dir + "/" + rel);
  if (const char* d = std::getenv("HERD_BIN_DIR")) candidates.push_back(std::string(d) + "/" + rel);
  const std::string self = SelfExe();
  if (!self.empty()) {
    // bazel-bin layout: bazel-bin/tools/herd/herd -> bazel-bin/<rel>
    const std::string dir = self.substr(0, self.rfind('/'));
    candidates.push_back(dir + "/../../" + rel);
    candidates.push_back(self + ".runfiles/herd/" + rel);
  }
  if (const char* r = std::getenv("TEST_SRCDIR")) candidates.push_back(std::string(r) + "/herd/" + rel);
  if (const char* r = std::getenv("RUNFILES_DIR")) candidates.push_back(std::string(r) + "/herd/" + rel);
  for (const std::string& c : candidates) {
    if (IsExecutable(c)) return c;
  }
  return absl::NotFoundError(absl::StrCat("cannot find the ", rel,
                                          " binary (looked in: ", absl::StrJoin(candidates, ", "),
                                          "); `bazel build //tools/herd` builds them with herd, or pass --bin-dir"));
}

absl::Status LocalCluster::Spawn(Process* p, std::shared_ptr<Announcement>* announced) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  p->expected_exit = false;
  std::vector<char*> argv;  // built before fork: the child only execs
  for (std::string& a : p->argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(err)));
  }
  if (pid == 0) {
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    ::execv(argv[0], argv.data());
    std::fprintf(stderr, "exec %s: %s\n", argv[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(fds[1]);
  p->pid = pid;
  p->started = std::chrono::steady_clock::now();
  auto ann = std::make_shared<Announcement>();
  *announced = ann;
  const bool quiet = opts_.quiet;
  // Reader: parse the address lines, forward the logs. It may outlive `p` (the cluster
  // is destroyed while a child's output drains), so it touches only copies and `ann`.
  std::thread([name = p->name, fd = fds[0], ann, quiet] {
    FILE* f = ::fdopen(fd, "r");
    char* line = nullptr;
    size_t cap = 0;
    ssize_t n;
    while ((n = ::getline(&line, &cap, f)) > 0) {
      std::string l(line, static_cast<size_t>(n));
      {
        std::lock_guard<std::mutex> lk(ann->mu);
        if (ann->grpc_addr.empty()) ann->grpc_addr = AfterToken(l, "listening on ");
        if (ann->http_addr.empty()) ann->http_addr = AfterToken(l, "http on ");
        if (ann->metrics_addr.empty()) ann->metrics_addr = AfterToken(l, "metrics on ");
      }
      ann->cv.notify_all();
      if (!quiet) std::fprintf(stderr, "[%s] %s", name.c_str(), l.c_str());
    }
    std::free(line);
    std::fclose(f);
    {
      std::lock_guard<std::mutex> lk(ann->mu);
      ann->closed = true;
    }
    ann->cv.notify_all();
  }).detach();
  return absl::OkStatus();
}

absl::Status LocalCluster::Launch(Process* p, std::chrono::milliseconds timeout) {
  // Every address the process will print: gRPC always, HTTP and metrics unless off.
  auto wants = [p](const std::string& flag) {
    for (const std::string& a : p->argv) {
      if (a.rfind(flag + "=", 0) == 0) return a != flag + "=-1";
    }
    return false;
  };
  const bool want_http = wants("--http_port"), want_metrics = wants("--metrics_port");
  std::shared_ptr<Announcement> ann;
  HERD_RETURN_IF_ERROR(Spawn(p, &ann));
  const pid_t pid = p->pid;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::unique_lock<std::mutex> lk(ann->mu);
  while (ann->grpc_addr.empty() || (want_http && ann->http_addr.empty()) ||
         (want_metrics && ann->metrics_addr.empty())) {
    int status;
    if (::waitpid(pid, &status, WNOHANG) == pid) {
      p->pid = -1;
      return absl::UnavailableError(
          absl::StrCat(p->name, " ", DescribeExit(status), " before it was ready: ", absl::StrJoin(p->argv, " ")));
    }
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::UnavailableError(
          absl::StrCat(p->name, " did not print its addresses within ", timeout.count(), " ms"));
    }
    ann->cv.wait_for(lk, std::chrono::milliseconds(50));
  }
  p->grpc_addr = ann->grpc_addr;
  if (want_http) p->http_addr = ann->http_addr;
  if (want_metrics) p->metrics_addr = ann->metrics_addr;
  return absl::OkStatus();
}

absl::Status LocalCluster::Start(const ClusterOptions& opts, std::chrono::milliseconds timeout) {
  opts_ = opts;
  std::vector<std::string> models = opts.models;
  if (models.empty()) {
    HERD_ASSIGN_OR_RETURN(models, ModelsIn(opts.models_dir));
  }
  HERD_ASSIGN_OR_RETURN(auto loader_bin, FindBinary("services/loader/loader"));
  HERD_ASSIGN_OR_RETURN(auto worker_bin, FindBinary("services/worker/worker"));
  HERD_ASSIGN_OR_RETURN(auto gateway_bin, FindBinary("services/gateway/gateway"));
  if (opts.remote_split && !opts.worker_backends.empty()) {
    return absl::InvalidArgumentError(
        "a remote split (one herd-compute per worker, --backend cpu,remote://...) does not combine with per-worker "
        "backends: choose one");
  }
  absl::StatusOr<std::string> compute_bin = std::string();
  if (opts.remote_split) {
    compute_bin = FindBinary("services/compute/compute");
    if (!compute_bin.ok()) return compute_bin.status();
  }
  absl::StatusOr<std::string> draft_bin = std::string();
  if (opts.draft_workers > 0) {
    draft_bin = FindBinary("services/draft/draft");
    if (!draft_bin.ok()) return draft_bin.status();
  }
  n_computes_ = 0;
  n_workers_ = 0;
  n_drafts_ = 0;

  auto loader = std::make_unique<Process>();
  loader->name = "loader";
  loader->argv = {loader_bin, "--models_dir=" + opts.models_dir, "--host=" + opts.host, "--port=0", "--metrics_port=0"};
  for (const std::string& f : opts.extra_flags) loader->argv.push_back(f);
  absl::Status s = Launch(loader.get(), timeout);
  PinPorts(loader.get());
  procs_.push_back(std::move(loader));
  if (!s.ok()) return s;
  const std::string loader_addr = procs_[0]->grpc_addr;

  // Remote split: compute server i (started first: a worker connects at startup) holds
  // the second half of worker i's layers.
  std::vector<std::string> compute_addrs;
  if (opts.remote_split) {
    const size_t n = models.size() * static_cast<size_t>(std::max(0, opts.workers_per_model));
    for (size_t i = 0; i < n; ++i) {
      auto c = std::make_unique<Process>();
      c->name = absl::StrCat("compute-", i);
      c->argv = {*compute_bin, "--host=" + opts.host, "--port=0", "--metrics_port=0",
                 absl::StrCat("--threads=", opts.threads_per_worker)};
      for (const std::string& f : opts.extra_compute_flags) c->argv.push_back(f);
      for (const std::string& f : opts.extra_flags) c->argv.push_back(f);
      s = Launch(c.get(), timeout);
      PinPorts(c.get());
      compute_addrs.push_back(c->grpc_addr);
      procs_.push_back(std::move(c));
      ++n_computes_;
      if (!s.ok()) return s;
    }
  }

  // The draft workers' ports are chosen first: the target workers draft (draft-model
  // speculation runs in their schedulers) and are told where the draft workers are.
  std::vector<int> draft_ports;
  for (int i = 0; i < opts.draft_workers; ++i) draft_ports.push_back(FreePort());
  std::vector<std::string> planned_draft_addrs;
  for (int p : draft_ports) planned_draft_addrs.push_back(absl::StrCat(opts.host, ":", p));

  std::vector<std::string> worker_addrs;
  for (const std::string& m : models) {
    for (int i = 0; i < opts.workers_per_model; ++i) {
      auto w = std::make_unique<Process>();
      w->name = absl::StrCat("worker-", m, "-", i);
      const int port = FreePort();
      w->argv = {worker_bin,
                 "--loader=" + loader_addr,
                 "--model=" + m,
                 "--host=" + opts.host,
                 absl::StrCat("--port=", port),
                 "--metrics_port=0",
                 absl::StrCat("--threads=", opts.threads_per_worker)};
      if (opts.n_ctx > 0) w->argv.push_back(absl::StrCat("--n_ctx=", opts.n_ctx));
      if (opts.max_sequences > 0) w->argv.push_back(absl::StrCat("--max_sequences=", opts.max_sequences));
      if (!planned_draft_addrs.empty()) {
        w->argv.push_back("--draft_workers=" + absl::StrJoin(planned_draft_addrs, ","));
      }
      if (!opts.worker_backends.empty()) {
        w->argv.push_back("--backend=" + opts.worker_backends[static_cast<size_t>(i) % opts.worker_backends.size()]);
      }
      if (!compute_addrs.empty()) w->argv.push_back("--backend=cpu,remote://" + compute_addrs[n_workers_]);
      for (const std::string& f : opts.extra_worker_flags) w->argv.push_back(f);
      for (const std::string& f : opts.extra_flags) w->argv.push_back(f);
      s = Launch(w.get(), timeout);
      PinPorts(w.get());
      worker_addrs.push_back(w->grpc_addr);
      procs_.push_back(std::move(w));
      ++n_workers_;
      if (!s.ok()) return s;
    }
  }
  std::vector<std::string> draft_addrs;
  for (int i = 0; i < opts.draft_workers; ++i) {
    auto d = std::make_unique<Process>();
    d->name = absl::StrCat("draft-", i);
    d->argv = {*draft_bin, "--host=" + opts.host, absl::StrCat("--port=", draft_ports[static_cast<size_t>(i)]),
               "--metrics_port=0", absl::StrCat("--threads=", opts.threads_per_worker)};
    // The gateway sends every request's whole configuration; the draft worker's default
    // type only matters to other callers (and draft-model needs a model there).
    const bool draft_type = opts.spec_type == "draft-model" || opts.spec_type == "draft";
    if (!opts.spec_type.empty() && (!draft_type || !opts.model_draft.empty())) {
      d->argv.push_back("--spec_type=" + opts.spec_type);
    }
    if (!opts.model_draft.empty()) {
      d->argv.push_back("--model_draft=" + opts.model_draft);
      d->argv.push_back("--loader=" + loader_addr);
      d->argv.push_back("--target_model=" + (opts.draft_target_model.empty() ? models[0] : opts.draft_target_model));
    }
    for (const std::string& f : opts.extra_draft_flags) d->argv.push_back(f);
    for (const std::string& f : opts.extra_flags) d->argv.push_back(f);
    s = Launch(d.get(), timeout);
    PinPorts(d.get());
    draft_addrs.push_back(d->grpc_addr);
    procs_.push_back(std::move(d));
    ++n_drafts_;
    if (!s.ok()) return s;
  }
  auto gw = std::make_unique<Process>();
  gw->name = "gateway";
  gw->argv = {gateway_bin,
              "--loader=" + loader_addr,
              "--workers=" + absl::StrJoin(worker_addrs, ","),
              "--host=" + opts.host,
              absl::StrCat("--port=", opts.gateway_port),
              absl::StrCat("--http_port=", opts.http_port),
              "--metrics_port=0"};
  if (!draft_addrs.empty()) gw->argv.push_back("--draft_workers=" + absl::StrJoin(draft_addrs, ","));
  if (!opts.spec_type.empty()) gw->argv.push_back("--spec_type=" + opts.spec_type);
  for (const std::string& f : opts.extra_gateway_flags) gw->argv.push_back(f);
  for (const std::string& f : opts.extra_flags) gw->argv.push_back(f);
  s = Launch(gw.get(), timeout);
  PinPorts(gw.get());
  procs_.push_back(std::move(gw));
  if (!s.ok()) return s;

  s = WaitForGateway(static_cast<int>(models.size()), timeout);
  if (!s.ok()) return s;
  supervisor_ = std::thread([this] { Supervise(); });
  return absl::OkStatus();
}

// The models of a directory: every NAME.gguf in it, sorted. NOT_FOUND for an unreadable
// directory or one without .gguf files.
absl::StatusOr<std::vector<std::string>> LocalCluster::ModelsIn(const std::string& dir) {
  std::vector<std::string> models;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return absl::NotFoundError(absl::StrCat("cannot open models dir ", dir));
  while (dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n.size() > 5 && n.substr(n.size() - 5) == ".gguf") models.push_back(n.substr(0, n.size() - 5));
  }
  ::closedir(d);
  std::sort(models.begin(), models.end());
  if (models.empty()) return absl::NotFoundError(absl::StrCat("no .gguf models in ", dir));
  return models;
}

// Ready when the gateway lists n_models models, each with all its workers; UNAVAILABLE
// after `timeout`.
absl::Status LocalCluster::WaitForGateway(int n_models, std::chrono::milliseconds timeout) {
  auto channel = serving::MakeChannel(gateway_addr(), opts_.gateway_security);
  auto stub = herd::v1::Gateway::NewStub(channel);
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    herd::v1::ListModelsResponse resp;
    grpc::Status st = stub->ListModels(&ctx, herd::v1::ListModelsRequest(), &resp);
    int ready_models = 0;
    if (st.ok()) {
      for (const auto& card : resp.models()) {
        if (card.workers() >= opts_.workers_per_model) ++ready_models;
      }
    }
    if (ready_models >= n_models) return absl::OkStatus();
    if (std::chrono::steady_clock::now() > deadline) {
      return absl::UnavailableError(
          absl::StrCat("gateway at ", gateway_addr(), " did not see all workers within ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void LocalCluster::Supervise() {
  using Clock = std::chrono::steady_clock;
  while (!stopping_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) break;
    const Clock::time_point now = Clock::now();
    for (const std::unique_ptr<Process>& owned : procs_) {
      Process* p = owned.get();
      if (p->pid > 0) {
        int status = 0;
        const pid_t old_pid = p->pid;
        if (::waitpid(old_pid, &status, WNOHANG) != old_pid) continue;  // still running
        p->pid = -1;
        if (!opts_.restart) {
          std::fprintf(stderr, "herd up: %s (pid %d) %s; not restarting (--no-restart)\n", p->name.c_str(),
                       static_cast<int>(old_pid), DescribeExit(status).c_str());
          continue;
        }
        // A process that stayed up long enough starts over with the shortest delay.
        if (p->backoff.count() == 0 || now - p->started >= opts_.restart_backoff_reset) {
          p->backoff = opts_.restart_backoff_initial;
        }
        p->restart_pending = true;
        p->restart_at = now + p->backoff;
        std::fprintf(stderr, "herd up: %s (pid %d) %s after %.1f s; restarting in %lld ms\n", p->name.c_str(),
                     static_cast<int>(old_pid), DescribeExit(status).c_str(),
                     std::chrono::duration<double>(now - p->started).count(),
                     static_cast<long long>(p->backoff.count()));
        p->backoff = std::min(p->backoff * 2, opts_.restart_backoff_max);
      } else if (p->restart_pending && now >= p->restart_at) {
        p->restart_pending = false;
        std::shared_ptr<Announcement> announced;  // same ports: the addresses stay
        absl::Status s = Spawn(p, &announced);
        if (!s.ok()) {  // fork failed: try again later
          std::fprintf(stderr, "herd up: restart of %s failed: %s\n", p->name.c_str(),
                       std::string(s.message()).c_str());
          p->restart_pending = true;
          p->restart_at = now + p->backoff;
          p->backoff = std::min(p->backoff * 2, opts_.restart_backoff_max);
          continue;
        }
        ++p->restarts;
        std::fprintf(stderr, "herd up: restarted %s (pid %d, restart %d)\n", p->name.c_str(), static_cast<int>(p->pid),
                     p->restarts);
      }
    }
  }
}

void LocalCluster::Stop(std::chrono::milliseconds grace) {
  if (stopping_.exchange(true)) return;
  if (supervisor_.joinable()) supervisor_.join();
  std::lock_guard<std::mutex> l(mu_);
  // Gateway first (stops new traffic), then workers, then the loader.
  for (auto it = procs_.rbegin(); it != procs_.rend(); ++it) {
    Process* p = it->get();
    if (p->pid > 0) ::kill(p->pid, SIGTERM);
  }
  const auto deadline = std::chrono::steady_clock::now() + grace;
  for (auto it = procs_.rbegin(); it != procs_.rend(); ++it) {
    Process* p = it->get();
    while (p->pid > 0) {
      int status;
      if (::waitpid(p->pid, &status, WNOHANG) == p->pid) {
        p->pid = -1;
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(p->pid, SIGKILL);
        ::waitpid(p->pid, &status, 0);
        p->pid = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

std::string LocalCluster::gateway_addr() const { return procs_.empty() ? "" : procs_.back()->grpc_addr; }
std::string LocalCluster::gateway_http_addr() const { return procs_.empty() ? "" : procs_.back()->http_addr; }
std::string LocalCluster::gateway_metrics_addr() const { return procs_.empty() ? "" : procs_.back()->metrics_addr; }
std::string LocalCluster::loader_addr() const { return procs_.empty() ? "" : procs_.front()->grpc_addr; }

std::vector<Process*> LocalCluster::processes() {
  std::vector<Process*> out;
  for (const auto& p : procs_) out.push_back(p.get());
  return out;
}

std::vector<Process*> LocalCluster::workers() {
  std::vector<Process*> out;
  const size_t first = 1 + n_computes_;
  for (size_t i = 0; i < n_workers_ && first + i < procs_.size(); ++i) out.push_back(procs_[first + i].get());
  return out;
}

std::vector<Process*> LocalCluster::draft_workers() {
  std::vector<Process*> out;
  const size_t first = 1 + n_computes_ + n_workers_;
  for (size_t i = 0; i < n_drafts_ && first + i < procs_.size(); ++i) out.push_back(procs_[first + i].get());
  return out;
}

std::vector<Process*> LocalCluster::computes() {
  std::vector<Process*> out;
  for (size_t i = 0; i < n_computes_ && 1 + i < procs_.size(); ++i) out.push_back(procs_[1 + i].get());
  return out;
}

pid_t LocalCluster::Pid(const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& p : procs_) {
    if (p->name == name) return p->pid > 0 ? p->pid : -1;
  }
  return -1;
}

absl::Status LocalCluster::Signal(const std::string& name, int sig) {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& p : procs_) {
    if (p->name != name) continue;
    if (p->pid <= 0) return absl::FailedPreconditionError(absl::StrCat(name, " is not running"));
    if (::kill(p->pid, sig) != 0) return absl::InternalError(absl::StrCat("kill ", name, ": ", std::strerror(errno)));
    return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("no process ", name));
}

absl::StatusOr<Process*> LocalCluster::ProcAt(size_t first, size_t count, size_t i, const char* what) {
  if (i >= count || first + i >= procs_.size()) return absl::OutOfRangeError(absl::StrCat("no ", what, " ", i));
  return procs_[first + i].get();
}

absl::Status LocalCluster::Kill(Process* p) {
  if (p->pid <= 0) return absl::FailedPreconditionError(absl::StrCat(p->name, " is not running"));
  ::kill(p->pid, SIGKILL);
  if (!opts_.restart) {  // else the supervisor reaps and restarts it
    int status;
    ::waitpid(p->pid, &status, 0);
    p->pid = -1;
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::KillLoader() {
  std::lock_guard<std::mutex> l(mu_);
  if (procs_.empty()) return absl::FailedPreconditionError("the cluster is not started");
  return Kill(procs_.front().get());
}

absl::Status LocalCluster::KillGateway() {
  std::lock_guard<std::mutex> l(mu_);
  if (procs_.size() < 2) return absl::FailedPreconditionError("the cluster is not started");
  return Kill(procs_.back().get());
}

int LocalCluster::Restarts(const std::string& name) const {
  std::lock_guard<std::mutex> l(mu_);
  for (const auto& p : procs_) {
    if (p->name == name) return p->restarts;
  }
  return -1;
}

absl::Status LocalCluster::KillWorker(size_t i) {
  std::lock_guard<std::mutex> l(mu_);
  HERD_ASSIGN_OR_RETURN(auto p, ProcAt(1 + n_computes_, n_workers_, i, "worker"));
  return Kill(p);
}

absl::Status LocalCluster::TerminateWorker(size_t i) {
  std::lock_guard<std::mutex> l(mu_);
  HERD_ASSIGN_OR_RETURN(auto p, ProcAt(1 + n_computes_, n_workers_, i, "worker"));
  if (p->pid <= 0) return absl::FailedPreconditionError(absl::StrCat(p->name, " is not running"));
  ::kill(p->pid, SIGTERM);  // the supervisor reaps it (and restarts it with `restart`)
  return absl::OkStatus();
}

absl::Status LocalCluster::RestartWorker(size_t i, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> l(mu_);
  HERD_ASSIGN_OR_RETURN(auto p, ProcAt(1 + n_computes_, n_workers_, i, "worker"));
  if (p->pid > 0) return absl::FailedPreconditionError(absl::StrCat(p->name, " is running"));
  return Launch(p, timeout);
}

absl::Status LocalCluster::KillDraftWorker(size_t i) {
  std::lock_guard<std::mutex> l(mu_);
  HERD_ASSIGN_OR_RETURN(auto p, ProcAt(1 + n_computes_ + n_workers_, n_drafts_, i, "draft worker"));
  return Kill(p);
}

absl::Status LocalCluster::RestartDraftWorker(size_t i, std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> l(mu_);
  HERD_ASSIGN_OR_RETURN(auto p, ProcAt(1 + n_computes_ + n_workers_, n_drafts_, i, "draft worker"));
  if (p->pid > 0) return absl::FailedPreconditionError(absl::StrCat(p->name, " is running"));
  return Launch(p, timeout);
}

void LocalCluster::WaitForSignal() {
  struct sigaction sa = {};
  sa.sa_handler = OnSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  while (!g_signalled) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

}  // namespace herd::cli
