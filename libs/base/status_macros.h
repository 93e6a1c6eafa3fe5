// Early-return helpers for absl::Status / absl::StatusOr.
//
//   absl::Status Load(const std::string& path) {
//     HERD_RETURN_IF_ERROR(CheckPath(path));
//     HERD_ASSIGN_OR_RETURN(std::unique_ptr<File> f, File::Open(path));
//     HERD_ASSIGN_OR_RETURN(auto header, ReadHeader(*f));
//     ...
//   }
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

/// HERD_RETURN_IF_ERROR(expr): evaluates `expr` (an absl::Status) once and, when it is not
/// OK, returns it unchanged from the enclosing function (which returns absl::Status or any
/// absl::StatusOr<T>). One statement: safe under an unbraced `if`.
#define HERD_RETURN_IF_ERROR(expr)                     \
  do {                                                 \
    ::absl::Status herd_status_macro_status_ = (expr); \
    if (!herd_status_macro_status_.ok()) {             \
      return herd_status_macro_status_;                \
    }                                                  \
  } while (0)

/// HERD_ASSIGN_OR_RETURN(lhs, expr): evaluates `expr` (an absl::StatusOr<T>) once; when it
/// holds an error, returns that status from the enclosing function (absl::Status or any
/// absl::StatusOr<U>), else moves the value into `lhs`. `lhs` is a declaration
/// (`auto x`, `std::unique_ptr<T> p`) or an existing variable (`x`, `*out`, `obj.field`). `lhs` must not contain an
/// unparenthesized comma (use a type alias); `expr` may. It expands to several
/// statements in the current scope (the declared variable lives on after it), so do
/// not use it as the unbraced body of an `if`/`for`/`while`.
#define HERD_ASSIGN_OR_RETURN(lhs, ...)                                                                       \
  HERD_STATUS_MACROS_ASSIGN_OR_RETURN_IMPL_(HERD_STATUS_MACROS_CONCAT_(herd_status_macro_or_, __LINE__), lhs, \
                                            __VA_ARGS__)

// Implementation details.
#define HERD_STATUS_MACROS_CONCAT_INNER_(x, y) x##y
#define HERD_STATUS_MACROS_CONCAT_(x, y) HERD_STATUS_MACROS_CONCAT_INNER_(x, y)
#define HERD_STATUS_MACROS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, ...) \
  auto tmp = (__VA_ARGS__);                                      \
  if (!tmp.ok()) {                                               \
    return tmp.status();                                         \
  }                                                              \
  lhs = std::move(*tmp)
