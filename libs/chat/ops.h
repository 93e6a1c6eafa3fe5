// Python semantics of the operators, iteration, len(), subscripts and slices for the
// chat-template interpreter. Internal.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

#include "libs/chat/value.h"

namespace herd::chat::internal {

/// Largest string or list an operator may build (str * n, list * n).
inline constexpr size_t kMaxBuiltSize = size_t{1} << 26;

/// list(v): list/tuple items, dict keys, string characters; Undefined is empty.
/// INVALID_ARGUMENT for non-iterables ("'int' object is not iterable").
absl::StatusOr<std::vector<Value>> Iterate(const Value& v);
/// len(v); Undefined has length 0. INVALID_ARGUMENT for values without a length.
absl::StatusOr<int64_t> Len(const Value& v);
/// a OP b for + - * / // % ** ~.
absl::StatusOr<Value> BinaryOp(std::string_view op, const Value& a, const Value& b);
/// a OP b for == != < <= > >= in notin.
absl::StatusOr<bool> CompareOp(std::string_view op, const Value& a, const Value& b);
/// item in container.
absl::StatusOr<bool> Contains(const Value& container, const Value& item);
/// Python obj[key] for dicts, lists, tuples and strings: the value, or nullopt-like
/// Undefined (with Jinja2's message) when the key or index is missing or of the wrong
/// type. Errors only for Undefined obj.
absl::StatusOr<Value> ItemOf(const Value& obj, const Value& key);
/// obj[start:stop:step] (each part may be None/Undefined).
absl::StatusOr<Value> SliceOf(const Value& obj, const Value& start, const Value& stop, const Value& step);
/// Python "%" string formatting (str % args) for %s %r %d %i %f %x %%.
absl::StatusOr<std::string> PercentFormat(const std::string& fmt, const Value& args);
/// "'x' is undefined"-style error when v is Undefined, for operations that need a value.
absl::Status UndefinedError(const Value& v);

}  // namespace herd::chat::internal
