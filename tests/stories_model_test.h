// A gtest fixture base that loads stories260K and its vocabulary from the shared data.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "gtest/gtest.h"

#include "libs/model/model.h"
#include "libs/tokenizer/tokenizer.h"
#include "tests/shared_data.h"

namespace herd {

/// SetUp loads ../shared/models/stories260K.gguf into model_ and its vocabulary into
/// vocab_; it skips the test when the shared data is absent and fails it when loading does.
class StoriesModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string shared = SharedDir();
    if (shared.empty()) GTEST_SKIP() << kSharedDirMissing;
    auto m = model::Model::Load(shared + "/models/stories260K.gguf");
    ASSERT_TRUE(m.ok()) << m.status();
    model_ = *std::move(m);
    auto v = tokenizer::Vocab::FromGguf(model_->file());
    ASSERT_TRUE(v.ok()) << v.status();
    vocab_ = *std::move(v);
  }

  std::unique_ptr<model::Model> model_;
  std::unique_ptr<tokenizer::Vocab> vocab_;
};

}  // namespace herd
