// A small llama.cpp-style command-line parser: short and long flags with a value
// ("-m FILE", "--top-k 40", "--temp=0.5") and boolean switches.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace herd::cli {

struct FlagSpec {
  std::vector<std::string> names;  // e.g. {"-m", "--model"}
  bool takes_value = true;
  std::string help;
  std::string default_value;
};

/// Parsed flags: canonical name (the first listed) -> value ("1" for switches).
class Args {
 public:
  /// INVALID_ARGUMENT naming an unknown flag or a flag missing its value.
  static absl::StatusOr<Args> Parse(const std::vector<FlagSpec>& specs, int argc, char** argv, int first);
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name) const;
  absl::StatusOr<int64_t> GetInt(const std::string& name) const;
  absl::StatusOr<double> GetDouble(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }
  static std::string Usage(const std::vector<FlagSpec>& specs);

 private:
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> defaults_;
  std::vector<std::string> positional_;
};

/// Parses argv[2..] by `specs` for a command whose help text is `usage`. Returns the flags;
/// or nothing, with `*exit_status` set to the status the command returns now: 2 after a
/// usage error (UsageError), 0 after printing `usage` on stdout for -h.
std::optional<Args> ParseCommand(const std::vector<FlagSpec>& specs, int argc, char** argv, const std::string& usage,
                                 int* exit_status);

/// Prints "herd: error: MESSAGE" for `s` on stderr; returns the error exit status, 1.
int Fail(const absl::Status& s);

/// Prints "herd: error: MSG (FIRST USAGE LINE; -h for all flags)" on stderr; returns the
/// usage error exit status, 2.
int UsageError(const std::string& msg, const std::string& usage);

}  // namespace herd::cli
