// Python's json.dumps for interpreter values (the chat-template `tojson` filter).
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/chat/value.h"

namespace herd::chat::internal {
namespace {

void DumpString(const std::string& s, bool ensure_ascii, std::string* out) {
  *out += '"';
  for (char32_t c : DecodeUtf8(s)) {
    switch (c) {
      case '"':
        *out += "\\\"";
        continue;
      case '\\':
        *out += "\\\\";
        continue;
      case '\n':
        *out += "\\n";
        continue;
      case '\r':
        *out += "\\r";
        continue;
      case '\t':
        *out += "\\t";
        continue;
      case '\b':
        *out += "\\b";
        continue;
      case '\f':
        *out += "\\f";
        continue;
      default:
        break;
    }
    char b[16];
    if (c < 0x20 || (ensure_ascii && c > 0x7e)) {
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        std::snprintf(b, sizeof b, "\\u%04x\\u%04x", static_cast<unsigned>(0xd800 | (v >> 10)),
                      static_cast<unsigned>(0xdc00 | (v & 0x3ff)));
      } else {
        std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(c));
      }
      *out += b;
    } else {
      AppendUtf8(c, out);
    }
  }
  *out += '"';
}

std::string DumpFloat(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d > 0 ? "Infinity" : "-Infinity";
  return FloatRepr(d);
}

class Dumper {
 public:
  Dumper(const JsonDumpOptions& opt, std::string* out) : opt_(opt), out_(out) {
    if (opt.indent.is_string()) {
      indent_ = opt.indent.s;
      pretty_ = true;
    } else if (opt.indent.type == Value::Type::kInt || opt.indent.type == Value::Type::kBool) {
      indent_ = std::string(std::max<int64_t>(0, std::min<int64_t>(opt.indent.as_int(), 256)), ' ');
      pretty_ = true;
    }
  }

  absl::Status Dump(const Value& v, int depth) {
    if (depth > 256) return absl::InvalidArgumentError("tojson: nesting too deep");
    switch (v.type) {
      case Value::Type::kNone:
        *out_ += "null";
        return absl::OkStatus();
      case Value::Type::kBool:
        *out_ += v.b ? "true" : "false";
        return absl::OkStatus();
      case Value::Type::kInt:
        *out_ += std::to_string(v.i);
        return absl::OkStatus();
      case Value::Type::kFloat:
        *out_ += DumpFloat(v.f);
        return absl::OkStatus();
      case Value::Type::kString:
        DumpString(v.s, opt_.ensure_ascii, out_);
        return absl::OkStatus();
      case Value::Type::kList:
        if (v.is_seq()) return DumpList(v, depth);
        break;
      case Value::Type::kDict:
        if (!v.dict->is_namespace) return DumpDict(v, depth);
        break;
      default:
        break;
    }
    return absl::InvalidArgumentError(absl::StrCat("Object of type ", TypeName(v), " is not JSON serializable"));
  }

 private:
  void NewLine(int depth) {
    *out_ += '\n';
    for (int k = 0; k < depth; ++k) *out_ += indent_;
  }

  absl::Status DumpList(const Value& v, int depth) {
    const auto& items = v.list->items;
    if (items.empty()) {
      *out_ += "[]";
      return absl::OkStatus();
    }
    *out_ += '[';
    for (size_t k = 0; k < items.size(); ++k) {
      if (k) *out_ += opt_.item_sep;
      if (pretty_) NewLine(depth + 1);
      HERD_RETURN_IF_ERROR(Dump(items[k], depth + 1));
    }
    if (pretty_) NewLine(depth);
    *out_ += ']';
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Key(const Value& k) {
    switch (k.type) {
      case Value::Type::kString:
        return k.s;
      case Value::Type::kNone:
        return std::string("null");
      case Value::Type::kBool:
        return std::string(k.b ? "true" : "false");
      case Value::Type::kInt:
        return std::to_string(k.i);
      case Value::Type::kFloat:
        return DumpFloat(k.f);
      default:
        return absl::InvalidArgumentError(
            absl::StrCat("keys must be str, int, float, bool or None, not ", TypeName(k)));
    }
  }

  absl::Status DumpDict(const Value& v, int depth) {
    std::vector<std::pair<std::string, const Value*>> entries;
    for (const auto& e : v.dict->entries) {
      HERD_ASSIGN_OR_RETURN(auto key, Key(e.first));
      entries.emplace_back(std::move(key), &e.second);
    }
    if (entries.empty()) {
      *out_ += "{}";
      return absl::OkStatus();
    }
    if (opt_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    }
    *out_ += '{';
    for (size_t k = 0; k < entries.size(); ++k) {
      if (k) *out_ += opt_.item_sep;
      if (pretty_) NewLine(depth + 1);
      DumpString(entries[k].first, opt_.ensure_ascii, out_);
      *out_ += opt_.key_sep;
      HERD_RETURN_IF_ERROR(Dump(*entries[k].second, depth + 1));
    }
    if (pretty_) NewLine(depth);
    *out_ += '}';
    return absl::OkStatus();
  }

  const JsonDumpOptions& opt_;
  std::string* out_;
  std::string indent_;
  bool pretty_ = false;
};

}  // namespace

absl::StatusOr<std::string> JsonDumps(const Value& v, const JsonDumpOptions& opt) {
  std::string out;
  Dumper d(opt, &out);
  HERD_RETURN_IF_ERROR(d.Dump(v, 0));
  return out;
}

}  // namespace herd::chat::internal
