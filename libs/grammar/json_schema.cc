#include "libs/grammar/json_schema.h"

namespace herd::grammar {

absl::StatusOr<std::string> JsonSchemaToGrammar(const nlohmann::json&) {
  return absl::UnimplementedError("json_schema: not implemented");
}

std::string JsonObjectGrammar() { return ""; }

}  // namespace herd::grammar
