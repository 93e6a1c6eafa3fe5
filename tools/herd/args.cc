#include "tools/herd/args.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace herd::cli {

absl::StatusOr<Args> Args::Parse(const std::vector<FlagSpec>& specs, int argc, char** argv, int first) {
  Args a;
  for (const FlagSpec& s : specs) {
    if (!s.default_value.empty()) a.defaults_[s.names[0]] = s.default_value;
  }
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-' || arg == "--") {
      a.positional_.push_back(arg);
      continue;
    }
    std::string name = arg, value;
    bool has_inline = false;
    const size_t eq = arg.find('=');
    if (arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_inline = true;
    }
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& s : specs) {
      for (const std::string& n : s.names) {
        if (n == name) spec = &s;
      }
    }
    if (spec == nullptr) return absl::InvalidArgumentError(absl::StrCat("unknown flag ", name));
    if (spec->takes_value) {
      if (!has_inline) {
        if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat("flag ", name, " needs a value"));
        value = argv[++i];
      }
    } else {
      if (has_inline) return absl::InvalidArgumentError(absl::StrCat("flag ", name, " takes no value"));
      value = "1";
    }
    a.values_[spec->names[0]] = value;
  }
  return a;
}

std::string Args::Get(const std::string& name) const {
  auto it = values_.find(name);
  if (it != values_.end()) return it->second;
  auto d = defaults_.find(name);
  return d == defaults_.end() ? "" : d->second;
}

absl::StatusOr<int64_t> Args::GetInt(const std::string& name) const {
  int64_t v;
  const std::string s = Get(name);
  if (!absl::SimpleAtoi(s, &v)) return absl::InvalidArgumentError(absl::StrCat(name, ": '", s, "' is not an integer"));
  return v;
}

absl::StatusOr<double> Args::GetDouble(const std::string& name) const {
  double v;
  const std::string s = Get(name);
  if (!absl::SimpleAtod(s, &v) || std::isnan(v)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": '", s, "' is not a number"));
  }
  return v;
}

std::string Args::Usage(const std::vector<FlagSpec>& specs) {
  std::string out;
  for (const FlagSpec& s : specs) {
    std::string names;
    for (const std::string& n : s.names) absl::StrAppend(&names, names.empty() ? "" : ", ", n);
    if (s.takes_value) absl::StrAppend(&names, " N");
    absl::StrAppend(&out, "  ", names, std::string(names.size() < 28 ? 28 - names.size() : 1, ' '), s.help);
    if (!s.default_value.empty()) absl::StrAppend(&out, " (default: ", s.default_value, ")");
    absl::StrAppend(&out, "\n");
  }
  return out;
}

std::optional<Args> ParseCommand(const std::vector<FlagSpec>& specs, int argc, char** argv, const std::string& usage,
                                 int* exit_status) {
  auto args = Args::Parse(specs, argc, argv, 2);
  if (!args.ok()) {
    *exit_status = UsageError(std::string(args.status().message()), usage);
    return std::nullopt;
  }
  if (args->Has("-h")) {
    std::fputs(usage.c_str(), stdout);
    *exit_status = 0;
    return std::nullopt;
  }
  return *std::move(args);
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "herd: error: %s\n", std::string(s.message()).c_str());
  return 1;
}

int UsageError(const std::string& msg, const std::string& usage) {
  const std::string first = usage.substr(0, usage.find('\n'));
  std::fprintf(stderr, "herd: error: %s (%s; -h for all flags)\n", msg.c_str(), first.c_str());
  return 2;
}

}  // namespace herd::cli
