// herd generate: a streaming client of the gateway's Generate.
//   herd generate --gateway ADDR -m MODEL -p PROMPT [-n N] [--temp T] [--top-k K]
//                 [--top-p P] [--min-p P] [--seed S] [--stop STR]... [--timeout-ms MS]
//                 [--spec-type T] [--draft-max N] [--draft-min N] ... (speculative overrides)
// The generated text goes to stdout as it arrives; the finish reason, usage, tokens/s
// and (with speculation) llama.cpp-style speculative statistics go to stderr. Errors: one line on stderr, exit status 1
// (2 for usage).
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "grpcpp/grpcpp.h"

#include "libs/base/json_nesting.h"
#include "libs/base/status_macros.h"
#include "libs/grammar/json_schema.h"
#include "proto/herd/v1/gateway.grpc.pb.h"
#include "tools/herd/args.h"
#include "tools/herd/client_security.h"
#include "tools/herd/commands.h"

namespace herd::cli {
namespace {

const std::vector<FlagSpec>& GenerateFlags() {
  static const std::vector<FlagSpec> specs = WithClientSecurityFlags({
      {{"--gateway"}, true, "gateway gRPC address HOST:PORT", "localhost:50051"},
      {{"-m", "--model"}, true, "model name (see ListModels)", ""},
      {{"-p", "--prompt"}, true, "prompt text", ""},
      {{"-n", "--n-predict"}, true, "tokens to generate (-1 = until end of generation; default: the gateway's)", ""},
      {{"--temp"}, true, "temperature (0 = greedy; default: the worker's)", ""},
      {{"--top-k"}, true, "top-k sampling (0 = off)", ""},
      {{"--top-p"}, true, "top-p sampling (1 = off)", ""},
      {{"--min-p"}, true, "min-p sampling (0 = off)", ""},
      {{"--repeat-penalty"}, true, "repetition penalty (1 = off)", ""},
      {{"--repeat-last-n"}, true, "tokens the penalties look back (-1 = context)", ""},
      {{"--presence-penalty"}, true, "presence penalty", ""},
      {{"--frequency-penalty"}, true, "frequency penalty", ""},
      {{"-s", "--seed"}, true, "RNG seed (-1 = random)", ""},
      {{"--stop"}, true, "stop string (repeatable, up to 16)", ""},
      {{"--ignore-eos"}, false, "keep generating past end-of-generation tokens", ""},
      {{"--grammar"}, true, "GBNF grammar the output must follow (llama.cpp syntax)", ""},
      {{"--grammar-file"}, true, "read the GBNF grammar from a file", ""},
      {{"-j", "--json-schema"}, true, "JSON schema the output must follow (converted to GBNF)", ""},
      {{"--timeout-ms"}, true, "deadline of the request in milliseconds (0 = none)", "0"},
      // Per-request speculative overrides (GenerateRequest.speculative; unset: the gateway's defaults).
      {{"--spec-type"},
       true,
       "speculative type: none, ngram-simple, ngram-map-k, ngram-map-k4v, ngram-cache, draft-model",
       ""},
      {{"--spec-ngram-size-n"}, true, "n-gram key size n", ""},
      {{"--spec-ngram-size-m"}, true, "n-gram draft size m", ""},
      {{"--spec-ngram-check-rate"}, true, "n-gram check rate", ""},
      {{"--spec-ngram-min-hits"}, true, "n-gram min hits (ngram-map-*)", ""},
      {{"--draft-max"}, true, "most tokens per draft (n_max)", ""},
      {{"--draft-min"}, true, "fewest tokens per draft (n_min)", ""},
      {{"--draft-p-min"}, true, "draft model p_min", ""},
      {{"-h", "--help"}, false, "show this help", ""},
  });
  return specs;
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "herd: error: %s\n", msg.c_str());
  return 1;
}

// --grammar / --grammar-file / --json-schema (llama.cpp's flags) -> sampling.grammar.
// Errors: INVALID_ARGUMENT for more than one of them, an unreadable file, invalid JSON
// or a schema the converter refuses.
absl::Status SetGrammar(const Args& args, herd::v1::SamplingParams* sp) {
  if (args.Has("--grammar") + args.Has("--grammar-file") + args.Has("-j") > 1) {
    return absl::InvalidArgumentError("--grammar, --grammar-file, --json-schema: give only one");
  }
  if (args.Has("--grammar")) sp->set_grammar(args.Get("--grammar"));
  if (args.Has("--grammar-file")) {
    std::ifstream in(args.Get("--grammar-file"), std::ios::binary);
    if (!in)
      return absl::InvalidArgumentError(absl::StrFormat("--grammar-file: cannot read %s", args.Get("--grammar-file")));
    std::stringstream ss;
    ss << in.rdbuf();
    sp->set_grammar(ss.str());
  }
  if (args.Has("-j")) {
    HERD_RETURN_IF_ERROR(CheckJsonNesting(args.Get("-j"), "--json-schema"));
    const nlohmann::json schema = nlohmann::json::parse(args.Get("-j"), nullptr, /*allow_exceptions=*/false);
    if (schema.is_discarded()) return absl::InvalidArgumentError("--json-schema: invalid JSON");
    HERD_ASSIGN_OR_RETURN(auto g, grammar::JsonSchemaToGrammar(schema));
    sp->set_grammar(g);
  }
  return absl::OkStatus();
}

const char* FinishName(herd::v1::FinishReason r) {
  switch (r) {
    case herd::v1::FINISH_REASON_EOS:
      return "eos";
    case herd::v1::FINISH_REASON_LENGTH:
      return "length";
    case herd::v1::FINISH_REASON_STOP:
      return "stop";
    case herd::v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    default:
      return "none";
  }
}

// The sampling flags (and -n) into `req`. Errors: the message to print.
absl::Status SamplingFromArgs(const Args& args, herd::v1::GenerateRequest* req) {
  herd::v1::SamplingParams* sp = req->mutable_sampling();
  struct IntFlag {
    const char* name;
    std::function<void(int64_t)> set;
  };
  const std::vector<IntFlag> ints = {
      {"-n", [req](int64_t v) { req->set_n_predict(static_cast<int32_t>(v)); }},
      {"--top-k", [sp](int64_t v) { sp->set_top_k(static_cast<int32_t>(v)); }},
      {"--repeat-last-n", [sp](int64_t v) { sp->set_repeat_last_n(static_cast<int32_t>(v)); }},
      {"-s",
       [sp](int64_t v) {
         if (v != -1) sp->set_seed(static_cast<uint32_t>(v));
       }},
  };
  for (const IntFlag& f : ints) {
    if (!args.Has(f.name)) continue;
    auto v = args.GetInt(f.name);
    if (!v.ok()) return absl::InvalidArgumentError(std::string(v.status().message()));
    if (*v < INT32_MIN || *v > (std::string(f.name) == "-s" ? int64_t{UINT32_MAX} : int64_t{INT32_MAX})) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: %d is out of range", f.name, *v));
    }
    f.set(*v);
  }
  struct FloatFlag {
    const char* name;
    void (herd::v1::SamplingParams::*set)(float);
  };
  for (const FloatFlag& f : {FloatFlag{"--temp", &herd::v1::SamplingParams::set_temperature},
                             FloatFlag{"--top-p", &herd::v1::SamplingParams::set_top_p},
                             FloatFlag{"--min-p", &herd::v1::SamplingParams::set_min_p},
                             FloatFlag{"--repeat-penalty", &herd::v1::SamplingParams::set_repeat_penalty},
                             FloatFlag{"--presence-penalty", &herd::v1::SamplingParams::set_presence_penalty},
                             FloatFlag{"--frequency-penalty", &herd::v1::SamplingParams::set_frequency_penalty}}) {
    if (!args.Has(f.name)) continue;
    auto v = args.GetDouble(f.name);
    if (!v.ok()) return absl::InvalidArgumentError(std::string(v.status().message()));
    (sp->*f.set)(static_cast<float>(*v));
  }
  if (absl::Status gs = SetGrammar(args, sp); !gs.ok()) return absl::InvalidArgumentError(std::string(gs.message()));
  return absl::OkStatus();
}

// The --spec-* and --draft-* flags into `spec`. Errors: the message to print.
absl::Status SpeculativeFromArgs(const Args& args, herd::v1::SpeculativeConfig* spec) {
  if (args.Has("--spec-type")) spec->set_type(args.Get("--spec-type"));
  struct SpecIntFlag {
    const char* name;
    void (herd::v1::SpeculativeConfig::*set)(int32_t);
  };
  for (const SpecIntFlag& f :
       {SpecIntFlag{"--spec-ngram-size-n", &herd::v1::SpeculativeConfig::set_ngram_size_n},
        SpecIntFlag{"--spec-ngram-size-m", &herd::v1::SpeculativeConfig::set_ngram_size_m},
        SpecIntFlag{"--spec-ngram-check-rate", &herd::v1::SpeculativeConfig::set_ngram_check_rate},
        SpecIntFlag{"--spec-ngram-min-hits", &herd::v1::SpeculativeConfig::set_ngram_min_hits},
        SpecIntFlag{"--draft-max", &herd::v1::SpeculativeConfig::set_draft_max},
        SpecIntFlag{"--draft-min", &herd::v1::SpeculativeConfig::set_draft_min}}) {
    if (!args.Has(f.name)) continue;
    auto v = args.GetInt(f.name);
    if (!v.ok()) return absl::InvalidArgumentError(std::string(v.status().message()));
    if (*v < INT32_MIN || *v > INT32_MAX) {
      return absl::InvalidArgumentError(absl::StrFormat("%s: %d is out of range", f.name, *v));
    }
    (spec->*f.set)(static_cast<int32_t>(*v));
  }
  if (args.Has("--draft-p-min")) {
    auto v = args.GetDouble("--draft-p-min");
    if (!v.ok()) return absl::InvalidArgumentError(std::string(v.status().message()));
    spec->set_draft_p_min(static_cast<float>(*v));
  }
  return absl::OkStatus();
}

// What a Generate stream delivered.
struct StreamOutcome {
  herd::v1::FinishReason finish = herd::v1::FINISH_REASON_UNSPECIFIED;
  herd::v1::Usage usage;
  std::vector<herd::v1::SpeculativeStats> spec_stats;
  int64_t n_tokens = 0;
  double ttft_ms = -1;
  double wall_ms = 0;
  grpc::Status status;
};

// Runs the request, writing the text to stdout as it arrives.
StreamOutcome StreamGeneration(herd::v1::Gateway::Stub* stub, grpc::ClientContext* ctx,
                               const herd::v1::GenerateRequest& req) {
  StreamOutcome out;
  const auto t0 = std::chrono::steady_clock::now();
  auto reader = stub->Generate(ctx, req);
  herd::v1::GenerateResponse msg;
  while (reader->Read(&msg)) {
    if (msg.token_ids_size() > 0 && out.ttft_ms < 0) {
      out.ttft_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    }
    out.n_tokens += msg.token_ids_size();
    if (!msg.text().empty()) {
      std::fwrite(msg.text().data(), 1, msg.text().size(), stdout);
      std::fflush(stdout);
    }
    if (msg.finish_reason() != herd::v1::FINISH_REASON_UNSPECIFIED) {
      out.finish = msg.finish_reason();
      out.usage = msg.usage();
      out.spec_stats.assign(msg.speculative().begin(), msg.speculative().end());
    }
  }
  out.status = reader->Finish();
  out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (out.n_tokens > 0) std::fputc('\n', stdout);
  std::fflush(stdout);
  return out;
}

// The summary lines on stderr: finish, usage, speeds, speculative statistics.
void PrintSummary(const StreamOutcome& o) {
  const herd::v1::Usage& usage = o.usage;
  const double tg_s = usage.generation_ms() / 1000.0;
  std::fprintf(stderr,
               "finish: %s | prompt %d tokens, completion %d tokens | pp %.1f ms, tg %.1f ms (%.2f tokens/s) | "
               "queue %.1f ms, ttft %.1f ms, total %.1f ms (client %.1f ms, %.2f tokens/s end to end)\n",
               FinishName(o.finish), usage.prompt_tokens(), usage.completion_tokens(), usage.prompt_ms(),
               usage.generation_ms(), tg_s > 0 ? usage.completion_tokens() / tg_s : 0.0, usage.queue_ms(), o.ttft_ms,
               usage.total_ms(), o.wall_ms, o.wall_ms > 0 ? usage.completion_tokens() * 1000.0 / o.wall_ms : 0.0);
  for (const herd::v1::SpeculativeStats& s : o.spec_stats) {
    // llama.cpp's common_speculative_print_stats line.
    std::fprintf(stderr,
                 "statistics %s: #calls = %lld, #gen drafts = %lld, #acc drafts = %lld, #gen tokens = %lld, "
                 "#acc tokens = %lld, acceptance rate = %.3f\n",
                 s.type().c_str(), static_cast<long long>(s.calls()), static_cast<long long>(s.gen_drafts()),
                 static_cast<long long>(s.acc_drafts()), static_cast<long long>(s.gen_tokens()),
                 static_cast<long long>(s.acc_tokens()),
                 s.gen_tokens() > 0 ? static_cast<double>(s.acc_tokens()) / static_cast<double>(s.gen_tokens()) : 0.0);
  }
}

}  // namespace

int CmdGenerate(int argc, char** argv) {
  const auto& specs = GenerateFlags();
  const std::string usage_text =
      "usage: herd generate --gateway ADDR -m MODEL -p PROMPT [flags]\n" + Args::Usage(specs);
  // --stop may repeat; Args keeps one value per flag, so collect them here first.
  std::vector<std::string> stops;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    if (i >= 2 && std::strcmp(argv[i], "--stop") == 0) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "herd: flag --stop needs a value\n%s", usage_text.c_str());
        return 2;
      }
      stops.push_back(argv[++i]);
    } else if (i >= 2 && std::strncmp(argv[i], "--stop=", 7) == 0) {
      stops.push_back(argv[i] + 7);
    } else {
      rest.push_back(argv[i]);
    }
  }
  int exit_status = 0;
  auto args = ParseCommand(specs, static_cast<int>(rest.size()), rest.data(), usage_text, &exit_status);
  if (!args) return exit_status;
  if (args->Get("-m").empty() || !args->Has("-p")) {
    std::fprintf(stderr, "herd: generate: -m MODEL and -p PROMPT are required\n%s", usage_text.c_str());
    return 2;
  }
  if (!args->positional().empty()) {
    std::fprintf(stderr, "herd: generate: unexpected argument '%s'\n%s", args->positional()[0].c_str(),
                 usage_text.c_str());
    return 2;
  }

  herd::v1::GenerateRequest req;
  req.set_model(args->Get("-m"));
  req.set_text(args->Get("-p"));
  for (const std::string& s : stops) req.add_stop(s);
  req.set_ignore_eos(args->Has("--ignore-eos"));
  if (absl::Status s = SamplingFromArgs(*args, &req); !s.ok()) return Fail(std::string(s.message()));
  if (absl::Status s = SpeculativeFromArgs(*args, req.mutable_speculative()); !s.ok()) {
    return Fail(std::string(s.message()));
  }
  auto timeout_ms = args->GetInt("--timeout-ms");
  if (!timeout_ms.ok()) return Fail(std::string(timeout_ms.status().message()));
  if (*timeout_ms < 0) return Fail("--timeout-ms: must be >= 0");

  grpc::ChannelArguments cargs;
  cargs.SetMaxReceiveMessageSize(64 << 20);
  auto security = ClientSecurityFromArgs(*args, {"HERD_API_KEY"});
  if (!security.ok()) return Fail(std::string(security.status().message()));
  auto channel = serving::MakeChannel(args->Get("--gateway"), *security, cargs);
  auto stub = herd::v1::Gateway::NewStub(channel);
  grpc::ClientContext ctx;
  if (*timeout_ms > 0) ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(*timeout_ms));
  const StreamOutcome o = StreamGeneration(stub.get(), &ctx, req);
  if (!o.status.ok()) {
    // gRPC's status codes are absl's: print the canonical name ("UNAVAILABLE").
    return Fail(absl::StrFormat("generate: %s: %s",
                                absl::StatusCodeToString(static_cast<absl::StatusCode>(o.status.error_code())),
                                o.status.error_message()));
  }
  PrintSummary(o);
  return 0;
}

}  // namespace herd::cli
