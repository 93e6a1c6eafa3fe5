// The loader over a temp store of copies of ../shared/models files, served
// in-process on 127.0.0.1:0 with health checking and reflection.
#include "services/loader/loader_service.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "gtest/gtest.h"

#include "libs/base/sha256.h"
#include "libs/clients/loader_client.h"
#include "libs/gguf/gguf.h"
#include "libs/serving/metrics.h"
#include "libs/serving/server.h"
#include "libs/tokenizer/tokenizer.h"
#include "proto/herd/v1/loader.grpc.pb.h"
#include "tests/shared_data.h"

namespace herd::loader {
namespace {

using std::chrono::milliseconds;
constexpr char kStoriesSha[] = "270cba1bd5109f42d03350f60406024560464db173c0e387d91f0426d3bd256d";

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

uint32_t Crc(const std::string& d) {
  return static_cast<uint32_t>(
      ::crc32(::crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(d.data()), static_cast<uInt>(d.size())));
}

std::string RealPath(const std::string& p) {
  char* r = ::realpath(p.c_str(), nullptr);
  std::string s = r ? r : "";
  std::free(r);
  return s;
}

// Delegates to the real service, but breaks ReadTensors streams on purpose: the first
// `break_calls` calls end with UNAVAILABLE after `break_after` chunks, and chunk number
// `corrupt_chunk` (counted over all calls) goes out with one data byte flipped.
class FlakyLoader final : public herd::v1::Loader::Service {
 public:
  explicit FlakyLoader(LoaderServiceImpl* impl) : impl_(impl) {}
  grpc::Status GetModelInfo(grpc::ServerContext* ctx, const herd::v1::GetModelInfoRequest* req,
                            herd::v1::ModelInfo* resp) override {
    return impl_->GetModelInfo(ctx, req, resp);
  }
  grpc::Status ReadTensors(grpc::ServerContext* ctx, const herd::v1::ReadTensorsRequest* req,
                           grpc::ServerWriter<herd::v1::TensorChunk>* writer) override {
    const int call = calls_++;
    int sent = 0;
    bool injected_break = false;
    uint64_t bytes = 0;
    absl::Status s = impl_->StreamTensors(
        *req, [ctx] { return ctx->IsCancelled(); },
        [&](const herd::v1::TensorChunk& c) {
          if (call < break_calls && sent == break_after) {
            injected_break = true;
            return false;
          }
          ++sent;
          if (chunks_++ == corrupt_chunk) {
            herd::v1::TensorChunk bad = c;
            (*bad.mutable_data())[bad.data().size() / 2] ^= 0x40;
            return writer->Write(bad);
          }
          return writer->Write(c);
        },
        &bytes);
    if (injected_break) return grpc::Status(grpc::StatusCode::UNAVAILABLE, "injected: stream broken");
    return ToGrpcStatus(s);
  }

  int break_calls = 0, break_after = 0, corrupt_chunk = -1;
  std::atomic<int> calls_{0}, chunks_{0};

 private:
  LoaderServiceImpl* impl_;
};

// Creates the symlink `link` -> `target`; one left by an earlier run outside Bazel
// (same /tmp directory) is fine.
void Symlink(const std::string& target, const std::string& link) {
  ASSERT_TRUE(::symlink(target.c_str(), link.c_str()) == 0 || errno == EEXIST) << link << ": " << std::strerror(errno);
}

class LoaderTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    shared_ = SharedDir();
    if (shared_.empty()) return;
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp ? tmp : "/tmp") + "/loader_store";
    const std::string outside = std::string(tmp ? tmp : "/tmp") + "/outside";
    ::mkdir(dir_.c_str(), 0755);
    ::mkdir(outside.c_str(), 0755);
    stories_ = ReadAll(shared_ + "/models/stories260K.gguf");
    WriteAll(dir_ + "/stories260K.gguf", stories_);
    WriteAll(dir_ + "/llama-2-tiny-random.gguf", ReadAll(shared_ + "/models/llama-2-tiny-random.gguf"));
    // A symlink inside the store is fine; symlinks out (to ../shared, to another
    // directory, to /etc/passwd) are refused.
    Symlink("stories260K.gguf", dir_ + "/alias.gguf");
    Symlink(shared_ + "/models/stories260K.gguf", dir_ + "/escape.gguf");
    WriteAll(outside + "/secret.gguf", stories_);
    Symlink("../outside/secret.gguf", dir_ + "/escape2.gguf");
    Symlink("/etc/passwd", dir_ + "/passwd.gguf");
    // Corrupt files: truncated (tensor data outside the file) and not a GGUF at all.
    WriteAll(dir_ + "/truncated.gguf", stories_.substr(0, 4096));
    WriteAll(dir_ + "/garbage.gguf", "this is not a GGUF file at all\n");

    LoaderOptions opts;
    opts.models_dir = dir_;
    opts.registry = &registry_;
    auto svc = LoaderServiceImpl::Create(opts);
    ASSERT_TRUE(svc.ok()) << svc.status();
    service_ = std::move(*svc).release();
    serving::GrpcServerOptions gopts;
    gopts.address = "127.0.0.1:0";
    auto server = serving::StartGrpcServer(gopts, {service_}, &port_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server).release();
    // As main.cc does: the per-service health entry (StartGrpcServer sets the overall one).
    server_->GetHealthCheckService()->SetServingStatus("herd.v1.Loader", true);
    channel_ = new std::shared_ptr<grpc::Channel>(MakeLoaderChannel(absl::StrCat("127.0.0.1:", port_)));
    stub_ = herd::v1::Loader::NewStub(*channel_).release();

    flaky_ = new FlakyLoader(service_);
    auto fserver = serving::StartGrpcServer(gopts, {flaky_}, &flaky_port_);
    ASSERT_TRUE(fserver.ok()) << fserver.status();
    flaky_server_ = std::move(*fserver).release();
    flaky_stub_ = herd::v1::Loader::NewStub(MakeLoaderChannel(absl::StrCat("127.0.0.1:", flaky_port_))).release();
  }

  static void TearDownTestSuite() {
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
    if (flaky_server_ != nullptr) flaky_server_->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
    delete stub_;
    delete flaky_stub_;
    delete channel_;
    delete server_;
    delete flaky_server_;
    delete flaky_;
    delete service_;
  }

  void SetUp() override {
    if (shared_.empty()) GTEST_SKIP() << kSharedDirMissing;
    ASSERT_NE(stub_, nullptr);
  }

  static absl::StatusOr<herd::v1::ModelInfo> Info(const std::string& name, bool sha = false, bool vocab = false) {
    return GetModelInfo(stub_, name, milliseconds(10000), sha, vocab);
  }

  // Reads a whole ReadTensors stream, checking chunk offsets and CRCs.
  static grpc::Status Read(const herd::v1::ReadTensorsRequest& req, std::string* out, int* chunks = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(10000));
    auto reader = stub_->ReadTensors(&ctx, req);
    herd::v1::TensorChunk c;
    out->clear();
    int n = 0;
    while (reader->Read(&c)) {
      EXPECT_EQ(c.offset(), req.offset() + out->size());
      EXPECT_EQ(c.crc32(), Crc(c.data())) << "chunk at " << c.offset();
      out->append(c.data());
      ++n;
    }
    if (chunks) *chunks = n;
    return reader->Finish();
  }

  static inline std::string shared_, dir_, stories_;
  static inline serving::Registry registry_;
  static inline LoaderServiceImpl* service_ = nullptr;
  static inline grpc::Server* server_ = nullptr;
  static inline int port_ = 0;
  static inline std::shared_ptr<grpc::Channel>* channel_ = nullptr;
  static inline herd::v1::Loader::Stub* stub_ = nullptr;
  static inline FlakyLoader* flaky_ = nullptr;
  static inline grpc::Server* flaky_server_ = nullptr;
  static inline int flaky_port_ = 0;
  static inline herd::v1::Loader::Stub* flaky_stub_ = nullptr;
};

TEST_F(LoaderTest, ListModelsMarksUnreadableAndHidesEscapes) {
  auto models = ListModels(stub_, milliseconds(10000));
  ASSERT_TRUE(models.ok()) << models.status();
  std::vector<std::string> names;
  for (const auto& m : *models) names.push_back(m.name());
  EXPECT_EQ(names, (std::vector<std::string>{"alias", "garbage", "llama-2-tiny-random", "stories260K", "truncated"}));
  for (const auto& m : *models) {
    if (m.name() == "stories260K" || m.name() == "alias") {
      EXPECT_EQ(m.architecture(), "llama");
      EXPECT_EQ(m.size_bytes(), stories_.size());
      EXPECT_EQ(m.error(), "");
    } else if (m.name() == "garbage" || m.name() == "truncated") {
      EXPECT_EQ(m.architecture(), "");
      EXPECT_NE(m.error(), "") << m.name();
    } else {
      EXPECT_EQ(m.architecture(), "llama");
    }
  }
}

TEST_F(LoaderTest, GetModelInfoDescribesTheFile) {
  auto info = Info("stories260K", /*sha=*/true);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->name(), "stories260K");
  EXPECT_EQ(info->sha256(), kStoriesSha);
  EXPECT_EQ(info->file_size(), stories_.size());
  EXPECT_EQ(info->local_path(), RealPath(dir_ + "/stories260K.gguf"));
  EXPECT_EQ(info->vocab_gguf(), "");

  auto f = gguf::GgufFile::FromBytes(stories_);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(info->data_offset(), (*f)->data_offset());
  const herd::v1::Hparams& hp = info->hparams();
  EXPECT_EQ(hp.architecture(), "llama");
  EXPECT_EQ(hp.n_vocab(), 512);
  EXPECT_EQ(hp.n_embd(), *(*f)->GetInt("llama.embedding_length"));
  EXPECT_EQ(hp.n_layer(), *(*f)->GetInt("llama.block_count"));
  EXPECT_EQ(hp.n_head(), *(*f)->GetInt("llama.attention.head_count"));
  EXPECT_EQ(hp.n_head_kv(), *(*f)->GetInt("llama.attention.head_count_kv"));
  EXPECT_EQ(hp.n_ff(), *(*f)->GetInt("llama.feed_forward_length"));
  EXPECT_EQ(hp.n_ctx_train(), *(*f)->GetInt("llama.context_length"));

  ASSERT_EQ(info->metadata_size(), static_cast<int>((*f)->metadata().size()));
  bool saw_tokens = false;
  for (const auto& e : info->metadata()) {
    if (e.key() == "general.architecture") {
      EXPECT_EQ(e.type(), "string");
      EXPECT_EQ(e.value(), "\"llama\"");
    }
    if (e.key() == "tokenizer.ggml.tokens") {
      saw_tokens = true;
      EXPECT_EQ(e.type(), "array[string,512]");
    }
  }
  EXPECT_TRUE(saw_tokens);
  ASSERT_EQ(info->tensors_size(), static_cast<int>((*f)->tensors().size()));
  for (int i = 0; i < info->tensors_size(); ++i) {
    const auto& e = info->tensors(i);
    const gguf::TensorInfo& t = (*f)->tensors()[static_cast<size_t>(i)];
    EXPECT_EQ(e.name(), t.name);
    EXPECT_EQ(e.type(), GgmlTypeName(t.type));
    ASSERT_EQ(e.ne_size(), static_cast<int>(t.n_dims));
    EXPECT_EQ(e.nbytes(), t.nbytes);
    ASSERT_LE(e.offset() + e.nbytes(), stories_.size());
    // The offset is a file offset: the bytes there are the tensor's.
    EXPECT_EQ(0, std::memcmp(stories_.data() + e.offset(), t.data, t.nbytes)) << e.name();
  }

  // A symlink inside the store names the same file.
  auto alias = Info("alias", true);
  ASSERT_TRUE(alias.ok()) << alias.status();
  EXPECT_EQ(alias->sha256(), kStoriesSha);
  EXPECT_EQ(alias->local_path(), info->local_path());
}

TEST_F(LoaderTest, VocabGgufLoadsAndTokenizes) {
  auto info = Info("stories260K", false, /*vocab=*/true);
  ASSERT_TRUE(info.ok()) << info.status();
  ASSERT_FALSE(info->vocab_gguf().empty());
  EXPECT_LT(info->vocab_gguf().size(), stories_.size());
  auto f = gguf::GgufFile::FromBytes(info->vocab_gguf(), "vocab");
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_TRUE((*f)->tensors().empty());
  EXPECT_EQ((*f)->metadata().size(), static_cast<size_t>(info->metadata_size()));
  auto vocab = tokenizer::Vocab::FromGguf(**f);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->get()->Tokenize("Once upon a time", true, false), (std::vector<int32_t>{1, 403, 407, 261, 378}));

  auto fetched = FetchVocabGguf(stub_, "stories260K", milliseconds(10000));
  ASSERT_TRUE(fetched.ok()) << fetched.status();
  auto v2 = tokenizer::Vocab::FromGguf(**fetched);
  ASSERT_TRUE(v2.ok()) << v2.status();
  EXPECT_EQ(v2->get()->Tokenize("Once upon a time", true, false), (std::vector<int32_t>{1, 403, 407, 261, 378}));
}

TEST_F(LoaderTest, ReadTensorsReassemblesTheFile) {
  herd::v1::ReadTensorsRequest req;
  req.set_name("stories260K");
  req.set_chunk_size(4096);
  std::string got;
  int chunks = 0;
  grpc::Status s = Read(req, &got, &chunks);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(chunks, static_cast<int>((stories_.size() + 4095) / 4096));
  EXPECT_TRUE(got == stories_) << "reassembled " << got.size() << " of " << stories_.size() << " bytes";
  EXPECT_EQ(Sha256Hex(got), kStoriesSha);

  // Default chunk size (1 MiB) and the largest one.
  for (uint32_t cs : {0u, 4u << 20}) {
    req.set_chunk_size(cs);
    ASSERT_TRUE(Read(req, &got).ok());
    EXPECT_TRUE(got == stories_);
  }
}

TEST_F(LoaderTest, ReadTensorsResumesFromAnyOffset) {
  herd::v1::ReadTensorsRequest req;
  req.set_name("stories260K");
  req.set_chunk_size(8192);
  const uint64_t mid = stories_.size() / 2 + 123;
  req.set_offset(mid);
  std::string got;
  ASSERT_TRUE(Read(req, &got).ok());
  EXPECT_TRUE(got == stories_.substr(mid));
  // A window.
  req.set_length(10000);
  ASSERT_TRUE(Read(req, &got).ok());
  EXPECT_TRUE(got == stories_.substr(mid, 10000));
  // Exactly at the end: an empty, successful stream.
  req.set_offset(stories_.size());
  req.set_length(0);
  int chunks = -1;
  ASSERT_TRUE(Read(req, &got, &chunks).ok());
  EXPECT_EQ(chunks, 0);
}

TEST_F(LoaderTest, ReadTensorsValidatesRanges) {
  herd::v1::ReadTensorsRequest req;
  req.set_name("stories260K");
  std::string got;
  for (uint32_t cs : {1u, 4095u, (4u << 20) + 1}) {
    req.set_chunk_size(cs);
    grpc::Status s = Read(req, &got);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << cs;
    EXPECT_NE(s.error_message().find("chunk_size"), std::string::npos) << s.error_message();
  }
  req.set_chunk_size(0);
  req.set_offset(stories_.size() + 1);
  EXPECT_EQ(Read(req, &got).error_code(), grpc::StatusCode::OUT_OF_RANGE);
  req.set_offset(10);
  req.set_length(stories_.size());
  EXPECT_EQ(Read(req, &got).error_code(), grpc::StatusCode::OUT_OF_RANGE);
  req.set_offset(UINT64_MAX);
  req.set_length(UINT64_MAX);
  EXPECT_EQ(Read(req, &got).error_code(), grpc::StatusCode::OUT_OF_RANGE);
}

TEST_F(LoaderTest, PathTraversalIsRefusedAndTheServiceStaysUp) {
  const std::vector<std::string> bad = {
      "../x",
      "/etc/passwd",
      "a/../../b",
      "..",
      "../../../../etc/passwd",
      "escape",
      "escape2",
      "passwd",
      "",
      ".hidden",
      "..\\..\\x",
      std::string("stories260K\0x", 13),
      std::string(300, 'a'),
      "sub/x",
  };
  for (const std::string& name : bad) {
    auto info = Info(name);
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument) << "'" << name << "': " << info.status();
    herd::v1::ReadTensorsRequest req;
    req.set_name(name);
    std::string got;
    grpc::Status s = Read(req, &got);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "'" << name << "': " << s.error_message();
    EXPECT_TRUE(got.empty());
  }
  EXPECT_NE(Info("escape").status().message().find("outside"), std::string::npos);
  EXPECT_EQ(Info("no-such-model").status().code(), absl::StatusCode::kNotFound);
  auto still = Info("stories260K");
  EXPECT_TRUE(still.ok()) << still.status();
}

TEST_F(LoaderTest, CorruptFilesAreInvalidArgument) {
  for (const char* name : {"truncated", "garbage"}) {
    auto info = Info(name, true, true);
    EXPECT_EQ(info.status().code(), absl::StatusCode::kInvalidArgument) << name << ": " << info.status();
    EXPECT_NE(info.status().message().find(std::string(name) + ".gguf"), std::string::npos) << info.status();
    auto fetched = FetchModel(stub_, name, milliseconds(10000));
    EXPECT_EQ(fetched.status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(Info("stories260K").ok());
}

void ExpectSameModel(const gguf::GgufFile& a, const gguf::GgufFile& b) {
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  ASSERT_EQ(a.metadata().size(), b.metadata().size());
  for (size_t i = 0; i < a.tensors().size(); ++i) {
    const gguf::TensorInfo &x = a.tensors()[i], &y = b.tensors()[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.type, y.type);
    for (int d = 0; d < 4; ++d) EXPECT_EQ(x.ne[d], y.ne[d]);
    ASSERT_EQ(x.nbytes, y.nbytes);
    EXPECT_EQ(0, std::memcmp(x.data, y.data, x.nbytes)) << x.name;
  }
}

TEST_F(LoaderTest, FetchModelMmapAndStreamAgree) {
  FetchStats mstats, sstats;
  auto mapped = FetchModel(stub_, "stories260K", milliseconds(10000), FetchOptions(), &mstats);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_TRUE(mstats.mmapped);
  EXPECT_EQ(mstats.attempts, 0);

  FetchOptions stream;
  stream.allow_local_mmap = false;
  stream.chunk_size = 64 << 10;
  auto streamed = FetchModel(stub_, "stories260K", milliseconds(10000), stream, &sstats);
  ASSERT_TRUE(streamed.ok()) << streamed.status();
  EXPECT_FALSE(sstats.mmapped);
  EXPECT_EQ(sstats.attempts, 1);
  EXPECT_EQ(sstats.bytes_streamed, stories_.size());
  ExpectSameModel(**mapped, **streamed);

  EXPECT_EQ(FetchModel(stub_, "no-such-model", milliseconds(10000)).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(LoaderTest, FetchModelResumesBrokenStreamsAndRejectsBadCrcs) {
  flaky_->break_calls = 2;    // the first two calls break...
  flaky_->break_after = 3;    // ...after 3 chunks each
  flaky_->corrupt_chunk = 8;  // and one chunk arrives damaged
  FetchOptions opts;
  opts.allow_local_mmap = false;
  opts.chunk_size = 16 << 10;
  opts.retry_backoff = milliseconds(1);
  FetchStats stats;
  auto f = FetchModel(flaky_stub_, "stories260K", milliseconds(20000), opts, &stats);
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(stats.attempts, 4);  // 2 breaks, 1 CRC failure, then the rest
  EXPECT_EQ(stats.crc_failures, 1);
  EXPECT_EQ(stats.bytes_streamed, stories_.size());
  auto direct = gguf::GgufFile::FromBytes(stories_);
  ASSERT_TRUE(direct.ok());
  ExpectSameModel(**direct, **f);

  // Out of attempts: the last retryable error, with the offset reached.
  flaky_->calls_ = 0;
  flaky_->break_calls = 100;
  flaky_->corrupt_chunk = -1;
  opts.max_attempts = 3;
  stats = FetchStats();
  auto gave_up = FetchModel(flaky_stub_, "stories260K", milliseconds(20000), opts, &stats);
  EXPECT_EQ(gave_up.status().code(), absl::StatusCode::kUnavailable) << gave_up.status();
  EXPECT_NE(gave_up.status().message().find("gave up after 3 attempts"), std::string::npos) << gave_up.status();
  EXPECT_EQ(stats.bytes_streamed, 9u * (16 << 10));
}

TEST_F(LoaderTest, ClientCancellationAndDeadlines) {
  herd::v1::ReadTensorsRequest req;
  req.set_name("llama-2-tiny-random");
  req.set_chunk_size(4096);
  {
    grpc::ClientContext ctx;
    auto reader = stub_->ReadTensors(&ctx, req);
    herd::v1::TensorChunk c;
    ASSERT_TRUE(reader->Read(&c));
    ctx.TryCancel();
    while (reader->Read(&c)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() - milliseconds(1));
    herd::v1::ModelInfo info;
    herd::v1::GetModelInfoRequest ireq;
    ireq.set_name("stories260K");
    EXPECT_EQ(stub_->GetModelInfo(&ctx, ireq, &info).error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  }
  EXPECT_TRUE(Info("stories260K").ok());
}

// Without libs/quant (or a substitute quantizer) a valid request is UNIMPLEMENTED.
TEST_F(LoaderTest, QuantizeValidatesNames) {
  auto run = [](const std::string& src, const std::string& dst, const std::string& type) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(10000));
    herd::v1::QuantizeRequest req;
    req.set_source(src);
    req.set_target(dst);
    req.set_type(type);
    auto reader = stub_->Quantize(&ctx, req);
    herd::v1::QuantizeProgress p;
    while (reader->Read(&p)) {
    }
    return reader->Finish();
  };
  EXPECT_EQ(run("stories260K", "../evil", "Q8_0").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(run("stories260K", "/tmp/evil", "Q8_0").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(run("stories260K", "", "Q8_0").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(run("../stories260K", "x", "Q8_0").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(run("stories260K", "x", "").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(run("nope", "x", "Q8_0").error_code(), grpc::StatusCode::NOT_FOUND);
  grpc::Status exists = run("stories260K", "llama-2-tiny-random", "Q8_0");
  EXPECT_EQ(exists.error_code(), grpc::StatusCode::ALREADY_EXISTS) << exists.error_message();
  EXPECT_EQ(run("stories260K", "escape", "Q8_0").error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_EQ(run("truncated", "x", "Q8_0").error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  if (!QuantizeAvailable()) {
    grpc::Status s = run("stories260K", "stories260K-q8", "Q8_0");
    EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED);
    EXPECT_NE(s.error_message().find("libs/quant"), std::string::npos) << s.error_message();
  }
}

// grpc.health.v1.Health/Check and reflection's list_services, spoken as raw protobuf
// bytes (Debian ships no generated stubs for either).
std::string ToString(const grpc::ByteBuffer& bb) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(bb.Dump(&slices).ok());
  std::string s;
  for (const grpc::Slice& sl : slices) s.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  return s;
}

grpc::ByteBuffer FromString(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

TEST_F(LoaderTest, HealthIsServing) {
  for (const std::string service : {"", "herd.v1.Loader"}) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(5000));
    // HealthCheckRequest{service = 1}
    std::string req;
    if (!service.empty()) req = std::string("\x0a", 1) + static_cast<char>(service.size()) + service;
    grpc::ByteBuffer resp;
    grpc::Status s = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        channel_->get(),
        grpc::internal::RpcMethod("/grpc.health.v1.Health/Check", grpc::internal::RpcMethod::NORMAL_RPC), &ctx,
        FromString(req), &resp);
    ASSERT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(ToString(resp), std::string("\x08\x01", 2)) << "status SERVING (1) for '" << service << "'";
  }
}

TEST_F(LoaderTest, ReflectionListsTheLoader) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(5000));
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          channel_->get(),
          grpc::internal::RpcMethod("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                                    grpc::internal::RpcMethod::BIDI_STREAMING),
          &ctx));
  ASSERT_TRUE(stream->Write(FromString(std::string("\x3a\x01*", 3))));  // list_services = "*"
  stream->WritesDone();
  grpc::ByteBuffer resp;
  ASSERT_TRUE(stream->Read(&resp));
  const std::string bytes = ToString(resp);
  EXPECT_NE(bytes.find("herd.v1.Loader"), std::string::npos);
  EXPECT_NE(bytes.find("grpc.health.v1.Health"), std::string::npos);
  while (stream->Read(&resp)) {
  }
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(LoaderTest, MetricsCountRequests) {
  ASSERT_TRUE(Info("stories260K").ok());
  EXPECT_FALSE(Info("../x").ok());
  herd::v1::ReadTensorsRequest req;
  req.set_name("stories260K");
  std::string got;
  ASSERT_TRUE(Read(req, &got).ok());
  const std::string text = registry_.Render();
  EXPECT_NE(text.find("herd_loader_requests_total{method=\"GetModelInfo\",code=\"OK\"}"), std::string::npos) << text;
  EXPECT_NE(text.find("herd_loader_requests_total{method=\"GetModelInfo\",code=\"INVALID_ARGUMENT\"}"),
            std::string::npos);
  EXPECT_NE(text.find("herd_loader_requests_total{method=\"ReadTensors\",code=\"OK\"}"), std::string::npos);
  EXPECT_NE(text.find("herd_loader_request_seconds_bucket{method=\"ReadTensors\",le=\"+Inf\"}"), std::string::npos);
  EXPECT_GE(registry_.Counter("herd_loader_bytes_sent_total", "")->Value(), static_cast<double>(stories_.size()));
}

}  // namespace
}  // namespace herd::loader

namespace herd::loader {
namespace {

// Quantize's streaming, cancellation and bookkeeping, with a stand-in quantizer (the
// real one is libs/quant): it "quantizes" by copying the source after `steps`
// progress reports `step_ms` apart, and stops when cancelled.
class QuantizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shared_ = SharedDir();
    if (shared_.empty()) GTEST_SKIP() << kSharedDirMissing;
    const char* tmp = std::getenv("TEST_TMPDIR");
    dir_ = std::string(tmp ? tmp : "/tmp") + "/quant_store_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ::mkdir(dir_.c_str(), 0755);
    WriteAll(dir_ + "/stories260K.gguf", ReadAll(shared_ + "/models/stories260K.gguf"));
    LoaderOptions opts;
    opts.models_dir = dir_;
    opts.quantizer = [this](const QuantizeJob& job, const std::function<void(const QuantizeReport&)>& progress,
                            const std::atomic<bool>* cancel) -> absl::Status {
      last_job_ = job;
      if (job.type == "BOGUS") return absl::InvalidArgumentError("type: unknown quantization type 'BOGUS'");
      QuantizeReport r;
      r.tensors_total = steps_;
      r.bytes_total = 1000;
      for (int i = 0; i < steps_; ++i) {
        for (int t = 0; t < step_ms_; ++t) {
          if (cancel->load()) {
            saw_cancel_ = true;
            return absl::CancelledError("cancelled");
          }
          std::this_thread::sleep_for(milliseconds(1));
        }
        r.tensors_done = i + 1;
        r.bytes_done = 1000 * (i + 1) / steps_;
        r.current_tensor = absl::StrCat("blk.", i, ".attn_q.weight");
        progress(r);
      }
      const std::string bytes = ReadAll(job.src_path);
      WriteAll(job.dst_path, bytes);
      return absl::OkStatus();
    };
    auto svc = LoaderServiceImpl::Create(opts);
    ASSERT_TRUE(svc.ok()) << svc.status();
    service_ = *std::move(svc);
    serving::GrpcServerOptions gopts;
    gopts.address = "127.0.0.1:0";
    int port = 0;
    auto server = serving::StartGrpcServer(gopts, {service_.get()}, &port);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = herd::v1::Loader::NewStub(MakeLoaderChannel(absl::StrCat("127.0.0.1:", port)));
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + milliseconds(500));
  }

  std::string shared_, dir_;
  int steps_ = 5, step_ms_ = 150;
  QuantizeJob last_job_;
  std::atomic<bool> saw_cancel_{false};
  std::unique_ptr<LoaderServiceImpl> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<herd::v1::Loader::Stub> stub_;
};

TEST_F(QuantizeTest, StreamsProgressAndWritesTheModel) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(20000));
  herd::v1::QuantizeRequest req;
  req.set_source("stories260K");
  req.set_target("stories260K-q8");
  req.set_type("Q8_0");
  req.set_pure(true);
  req.set_output_tensor_type("F16");
  req.add_tensor_type("attn_v=Q6_K");
  auto reader = stub_->Quantize(&ctx, req);
  std::vector<herd::v1::QuantizeProgress> msgs;
  herd::v1::QuantizeProgress p;
  while (reader->Read(&p)) msgs.push_back(p);
  grpc::Status s = reader->Finish();
  ASSERT_TRUE(s.ok()) << s.error_message();
  ASSERT_GE(msgs.size(), 2u);
  for (size_t i = 0; i + 1 < msgs.size(); ++i) {
    EXPECT_FALSE(msgs[i].done());
    EXPECT_EQ(msgs[i].tensors_total(), 5);
    if (i > 0) {
      EXPECT_GE(msgs[i].tensors_done(), msgs[i - 1].tensors_done());
    }
  }
  EXPECT_TRUE(msgs.back().done());
  EXPECT_EQ(msgs.back().tensors_done(), 5);
  EXPECT_NE(msgs.back().message().find("wrote model 'stories260K-q8'"), std::string::npos) << msgs.back().message();

  EXPECT_EQ(last_job_.src_path, RealPath(dir_ + "/stories260K.gguf"));
  EXPECT_EQ(last_job_.dst_path, RealPath(dir_) + "/stories260K-q8.gguf");
  EXPECT_EQ(last_job_.type, "Q8_0");
  EXPECT_TRUE(last_job_.pure);
  EXPECT_EQ(last_job_.output_tensor_type, "F16");
  EXPECT_EQ(last_job_.tensor_type_overrides, (std::vector<std::string>{"attn_v=Q6_K"}));
  EXPECT_GT(last_job_.n_threads, 0);

  // The new model is in the store, and the name is now taken.
  auto info = GetModelInfo(stub_.get(), "stories260K-q8", milliseconds(10000));
  ASSERT_TRUE(info.ok()) << info.status();
  grpc::ClientContext ctx2;
  auto again = stub_->Quantize(&ctx2, req);
  while (again->Read(&p)) {
  }
  EXPECT_EQ(again->Finish().error_code(), grpc::StatusCode::ALREADY_EXISTS);
}

TEST_F(QuantizeTest, ClientCancelStopsTheJobAndWritesNothing) {
  steps_ = 1000;  // would take minutes
  step_ms_ = 20;
  grpc::ClientContext ctx;
  herd::v1::QuantizeRequest req;
  req.set_source("stories260K");
  req.set_target("never");
  req.set_type("Q4_K_M");
  auto reader = stub_->Quantize(&ctx, req);
  herd::v1::QuantizeProgress p;
  ASSERT_TRUE(reader->Read(&p));
  EXPECT_FALSE(p.done());
  ctx.TryCancel();
  while (reader->Read(&p)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The server notices within its 100 ms poll and the job stops.
  for (int i = 0; i < 200 && !saw_cancel_; ++i) std::this_thread::sleep_for(milliseconds(10));
  EXPECT_TRUE(saw_cancel_);
  struct stat st;
  EXPECT_NE(::stat((dir_ + "/never.gguf").c_str(), &st), 0);
}

TEST_F(QuantizeTest, DeadlineCancelsAndQuantizerErrorsPassThrough) {
  steps_ = 1000;
  step_ms_ = 20;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + milliseconds(300));
    herd::v1::QuantizeRequest req;
    req.set_source("stories260K");
    req.set_target("late");
    req.set_type("Q4_0");
    auto reader = stub_->Quantize(&ctx, req);
    herd::v1::QuantizeProgress p;
    while (reader->Read(&p)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    for (int i = 0; i < 200 && !saw_cancel_; ++i) std::this_thread::sleep_for(milliseconds(10));
    EXPECT_TRUE(saw_cancel_);
  }
  {
    grpc::ClientContext ctx;
    herd::v1::QuantizeRequest req;
    req.set_source("stories260K");
    req.set_target("bogus");
    req.set_type("BOGUS");
    auto reader = stub_->Quantize(&ctx, req);
    herd::v1::QuantizeProgress p;
    while (reader->Read(&p)) {
    }
    grpc::Status s = reader->Finish();
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(s.error_message().find("BOGUS"), std::string::npos);
  }
}

}  // namespace
}  // namespace herd::loader

namespace herd::loader {
namespace {

// The real quantizer (libs/quant), when this build links it: stories260K (F32) to Q8_0,
// with ffn_down (172 columns, not a multiple of Q8_0's 32-element blocks) kept in F16.
TEST(QuantizeReal, Q8_0OfStories) {
  if (!QuantizeAvailable()) GTEST_SKIP() << "built without libs/quant (quantize_backend_none.cc)";
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp ? tmp : "/tmp") + "/quant_real";
  ::mkdir(dir.c_str(), 0755);
  WriteAll(dir + "/stories260K.gguf", ReadAll(shared + "/models/stories260K.gguf"));
  LoaderOptions opts;
  opts.models_dir = dir;
  opts.quantize_threads = 2;
  auto svc = LoaderServiceImpl::Create(opts);
  ASSERT_TRUE(svc.ok()) << svc.status();
  herd::v1::QuantizeRequest req;
  req.set_source("stories260K");
  req.set_target("stories260K-q8_0");
  req.set_type("Q8_0");
  req.add_tensor_type("ffn_down=f16");
  std::vector<herd::v1::QuantizeProgress> msgs;
  absl::Status s = (*svc)->RunQuantize(req, nullptr, [&](const herd::v1::QuantizeProgress& p) {
    msgs.push_back(p);
    return true;
  });
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_FALSE(msgs.empty());
  EXPECT_TRUE(msgs.back().done());
  EXPECT_EQ(msgs.back().tensors_done(), msgs.back().tensors_total());
  auto f = gguf::GgufFile::Open(dir + "/stories260K-q8_0.gguf");
  ASSERT_TRUE(f.ok()) << f.status();
  int q8 = 0, f16 = 0;
  for (const gguf::TensorInfo& t : (*f)->tensors()) {
    q8 += t.type == GgmlType::Q8_0;
    f16 += t.type == GgmlType::F16;
  }
  EXPECT_GT(q8, 0);
  EXPECT_GT(f16, 0);
  // Invalid type: the quantizer's INVALID_ARGUMENT, and nothing written.
  req.set_target("bad");
  req.set_type("Q9_9");
  s = (*svc)->RunQuantize(req, nullptr, [](const herd::v1::QuantizeProgress&) { return true; });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  struct stat st;
  EXPECT_NE(::stat((dir + "/bad.gguf").c_str(), &st), 0);
}

}  // namespace
}  // namespace herd::loader
