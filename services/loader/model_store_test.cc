#include "services/loader/model_store.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace herd::loader {
namespace {

std::string TempDir(const std::string& leaf) {
  const char* t = std::getenv("TEST_TMPDIR");
  std::string d = std::string(t ? t : "/tmp") + "/" + leaf;
  ::mkdir(d.c_str(), 0755);
  return d;
}

// Creates the symlink `link` -> `target`; one left by an earlier run outside Bazel
// (same /tmp directory) is fine.
void Symlink(const std::string& target, const std::string& link) {
  ASSERT_TRUE(::symlink(target.c_str(), link.c_str()) == 0 || errno == EEXIST) << link << ": " << std::strerror(errno);
}

void WriteFile(const std::string& path, const std::string& bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

TEST(ValidateModelName, AcceptsOrdinaryNames) {
  for (const char* n : {"stories260K", "llama-2-7b.Q4_K_M", "a", "x y", "ünïcode", "a.b"}) {
    EXPECT_TRUE(ValidateModelName(n).ok()) << n << ": " << ValidateModelName(n);
  }
  EXPECT_TRUE(ValidateModelName(std::string(kMaxModelNameBytes, 'a')).ok());
}

TEST(ValidateModelName, RejectsEscapesWithTheProblemNamed) {
  struct Case {
    std::string name, problem;
  } cases[] = {
      {"", "empty"},
      {"..", "'..'"},
      {"../x", "'/'"},
      {"a/../../b", "'/'"},
      {"/etc/passwd", "'/'"},
      {"a\\b", "'\\'"},
      {"..\\x", "'\\'"},
      {std::string("a\0b", 3), "NUL"},
      {".hidden", "starts with '.'"},
      {"a..b", "'..'"},
      {"tab\there", "control character"},
      {std::string(kMaxModelNameBytes + 1, 'a'), "bytes long"},
      {std::string(300, 'a'), "bytes long"},
  };
  for (const Case& c : cases) {
    absl::Status s = ValidateModelName(c.name);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(s.message().find(c.problem), std::string::npos) << s.message();
  }
}

TEST(ModelStore, ResolvesInsideAndRejectsOutside) {
  const std::string outside = TempDir("outside");
  WriteFile(outside + "/secret.gguf", "GGUF secret");
  const std::string dir = TempDir("store");
  WriteFile(dir + "/m.gguf", "GGUF");
  ::mkdir((dir + "/sub").c_str(), 0755);
  WriteFile(dir + "/sub/deep.gguf", "GGUF deep");
  Symlink("m.gguf", dir + "/alias.gguf");        // inside: fine
  Symlink("sub/deep.gguf", dir + "/deep.gguf");  // inside, deeper: fine
  Symlink(outside + "/secret.gguf", dir + "/escape.gguf");
  Symlink("../outside/secret.gguf", dir + "/escape2.gguf");
  Symlink("missing.gguf", dir + "/dangling.gguf");
  ::mkdir((dir + "/adir.gguf").c_str(), 0755);
  WriteFile(dir + "/.hidden.gguf", "GGUF");
  WriteFile(dir + "/notes.txt", "x");

  auto store = ModelStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto m = store->Resolve("m");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(*m, store->root() + "/m.gguf");
  EXPECT_EQ(*store->Resolve("alias"), store->root() + "/m.gguf");
  EXPECT_EQ(*store->Resolve("deep"), store->root() + "/sub/deep.gguf");
  EXPECT_EQ(store->Resolve("escape").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(store->Resolve("escape").status().message().find("outside"), std::string::npos);
  EXPECT_EQ(store->Resolve("escape2").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Resolve("dangling").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Resolve("nope").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(store->Resolve("adir").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Resolve("../outside/secret").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store->Resolve(".hidden").status().code(), absl::StatusCode::kInvalidArgument);

  auto list = store->List();
  ASSERT_TRUE(list.ok()) << list.status();
  std::vector<std::string> names;
  for (const StoreEntry& e : *list) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"alias", "deep", "m"}));

  EXPECT_EQ(store->PathForNewModel("m").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store->PathForNewModel("dangling").status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(store->PathForNewModel("../x").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*store->PathForNewModel("fresh"), store->root() + "/fresh.gguf");
}

TEST(ModelStore, OpenErrors) {
  EXPECT_EQ(ModelStore::Open(TempDir("x") + "/missing").status().code(), absl::StatusCode::kNotFound);
  const std::string file = TempDir("y") + "/file";
  WriteFile(file, "x");
  EXPECT_EQ(ModelStore::Open(file).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ModelStore::Open("").status().code(), absl::StatusCode::kInvalidArgument);
}

bool Exists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

TEST(ModelStore, TempFileNamesMatchGgufWriterOnly) {
  int64_t pid = 0;
  EXPECT_TRUE(ModelStore::IsTempFileName("m.gguf.tmp.123.0", &pid));
  EXPECT_EQ(pid, 123);
  EXPECT_TRUE(ModelStore::IsTempFileName("llama-2-7b.Q4_K_M.gguf.tmp.1.42"));
  for (const char* n : {"m.gguf", "m.gguf.tmp", "m.gguf.tmp.1", "m.gguf.tmp.1.", "m.gguf.tmp..1", "m.gguf.tmp.x.1",
                        "m.gguf.tmp.1.2.bak", "m.gguf.tmp.-1.2", ".hidden.gguf.tmp.1.1", ".gguf.tmp.1.1",
                        "notes.tmp.1.2", "m.tmp.1.2"}) {
    EXPECT_FALSE(ModelStore::IsTempFileName(n)) << n;
  }
}

TEST(ModelStore, RemovesStaleTempFilesOnly) {
  const std::string dir = TempDir("stale_temps");
  // A pid that is certainly dead: a child that exited and was reaped.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  const std::string dead = std::to_string(child), self = std::to_string(::getpid()),
                    parent = std::to_string(::getppid());
  const std::vector<std::string> stale = {"a.gguf.tmp." + dead + ".0", "b.gguf.tmp." + self + ".3"};
  const std::vector<std::string> kept = {"c.gguf.tmp." + parent + ".1",  // writer alive
                                         "c.gguf",
                                         "notes.tmp.1.2",
                                         "d.gguf.tmp.x.1",
                                         "e.gguf.tmp." + dead + ".0.bak",
                                         ".f.gguf.tmp." + dead + ".0"};
  for (const auto& f : stale) WriteFile(dir + "/" + f, "partial");
  for (const auto& f : kept) WriteFile(dir + "/" + f, "keep");
  // Never followed nor removed: a directory and a symlink with a temp file's name.
  ASSERT_EQ(::mkdir((dir + "/g.gguf.tmp." + dead + ".0").c_str(), 0755), 0);
  ASSERT_EQ(::symlink((dir + "/c.gguf").c_str(), (dir + "/h.gguf.tmp." + dead + ".0").c_str()), 0);

  auto store = ModelStore::Open(dir);
  ASSERT_TRUE(store.ok()) << store.status();
  auto removed = store->RemoveStaleTempFiles();
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, stale);
  for (const auto& f : stale) EXPECT_FALSE(Exists(dir + "/" + f)) << f;
  for (const auto& f : kept) EXPECT_TRUE(Exists(dir + "/" + f)) << f;
  EXPECT_TRUE(Exists(dir + "/g.gguf.tmp." + dead + ".0"));
  EXPECT_TRUE(Exists(dir + "/h.gguf.tmp." + dead + ".0"));
  EXPECT_TRUE(Exists(dir + "/c.gguf"));  // the symlink's target
  // Nothing left to remove the second time.
  auto again = store->RemoveStaleTempFiles();
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_TRUE(again->empty());
}

}  // namespace
}  // namespace herd::loader
