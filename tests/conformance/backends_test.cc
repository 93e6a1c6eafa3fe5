// Conformance of every device backend present (Vulkan on lavapipe here; the CPU is
// covered by reference_test and arch_test) against llama.cpp's references: stories260K
// and llama-2-tiny-random (../shared/reference/A-*, B-*) and the 12 synthetic models of
// other families (../shared/reference/arch). Through the Engine with an F32 KV cache on
// CreateBackend(kind) (the device with the CPU as fallback), the logits at the
// reference positions are within the per-family tolerance below of llama.cpp's
// alt_f32_kv_no_flash_attn run, and greedy ids equal its output up to the first fragile
// id (greedy margin below twice the measured logit error). Backends compiled in without
// a device here are skipped by name. backends_hip_test is this file linked with the hip
// kind (//libs/backend/hip:register) and compiled with HERD_TEST_ONLY_HIP: hip alone.
#include <dirent.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

#include "libs/backend/registry.h"
#include "libs/engine/engine.h"
#include "libs/engine/generate.h"
#include "libs/model/model.h"
#include "libs/tokenizer/tokenizer.h"
#include "tests/conformance/logits.h"
#include "tests/shared_data.h"

namespace herd {
namespace {

using json = nlohmann::json;

// One reference case on backend kind `kind`.
void CheckCase(const std::string& kind, const std::string& path) {
  SCOPED_TRACE(kind + ": " + path);
  std::ifstream in(path);
  const json ref = json::parse(in);
  const json& alt = ref["alt_f32_kv_no_flash_attn"];
  auto model = model::Model::Load(SharedDir() + "/" + ref["model_path"].get<std::string>());
  ASSERT_TRUE(model.ok()) << model.status();
  BackendOptions o;
  o.n_threads = 2;
  auto backend = CreateBackend(kind, o);
  ASSERT_TRUE(backend.ok()) << backend.status();
  ASSERT_TRUE((*model)->PlaceWeights(backend->get()).ok());
  auto vocab = tokenizer::Vocab::FromGguf((*model)->file());
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  const std::string arch = (*model)->hparams().arch;
  const double tol = conformance::UsesGelu(arch) ? 1e-3 : 1e-4;
  const auto prompt_ids = ref["prompt_ids"].get<std::vector<int32_t>>();
  const auto positions = ref["logits"]["positions"].get<std::vector<int>>();
  engine::EngineParams ep;
  ep.n_ctx = ref["settings"]["n_ctx"].get<int64_t>();
  ep.kv_type = GgmlType::F32;
  auto eng = engine::Engine::Create(**model, ep, backend->get());
  ASSERT_TRUE(eng.ok()) << eng.status();
  const auto alt_out = alt["output_ids"].get<std::vector<int32_t>>();
  const double d = conformance::MaxAbsDiff(
      conformance::TeacherForcedLogitsOrFail(**eng, prompt_ids, alt_out, positions), alt["logits"]["values"]);
  EXPECT_LE(d, tol);
  engine::GenerateParams gp;
  gp.prompt_ids = prompt_ids;
  gp.n_predict = ref["n_predict"].get<int32_t>();
  gp.sampling.temp = 0.0f;
  gp.ignore_eos = true;
  auto res = engine::Generate(**eng, **vocab, gp);
  ASSERT_TRUE(res.ok()) << res.status();
  const size_t comparable = conformance::Comparable(alt, std::max(d, 1e-5));
  ASSERT_GE(res->output_ids.size(), comparable);
  bool equal = true;
  for (size_t j = 0; j < comparable; ++j) {
    EXPECT_EQ(res->output_ids[j], alt_out[j]) << "output index " << j;
    equal &= res->output_ids[j] == alt_out[j];
  }
  std::printf("%-8s %-44s %-9s F32 KV max |dlogit| %.2g (tol %.0e); greedy %zu/%zu ids%s\n", kind.c_str(),
              path.substr(path.rfind('/') + 1).c_str(), arch.c_str(), d, tol, comparable, alt_out.size(),
              equal ? " equal" : " DIFFER");
}

TEST(BackendsConformance, EveryDeviceBackendOnEveryReferenceModel) {
  const std::string shared = SharedDir();
  if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
  std::vector<std::string> cases = conformance::ReferenceCases(shared + "/reference", {"A-", "B-"});
  for (const std::string& c : conformance::ReferenceCases(shared + "/reference/arch", {"synth-"})) cases.push_back(c);
  ASSERT_FALSE(cases.empty());
  int tested = 0;
  for (const BackendKind& k : BackendKinds()) {
    if (k.name == "cpu") continue;  // reference_test, arch_test
#ifdef HERD_TEST_ONLY_HIP
    if (k.name != "hip") continue;  // the others are backends_test's
#endif
    if (k.devices().empty()) {
      std::printf("backend %s: no device here, skipped\n", k.name.c_str());
      continue;
    }
    ++tested;
    for (const std::string& c : cases) CheckCase(k.name, c);
  }
  if (tested == 0) GTEST_SKIP() << "no device backend here (" << DescribeDevices() << ")";
}

}  // namespace
}  // namespace herd
