#include "libs/chat/chat_template.h"

#include "absl/strings/str_cat.h"

#include "libs/base/status_macros.h"
#include "libs/chat/interpreter.h"
#include "libs/chat/parser.h"

namespace herd::chat {

struct ChatTemplate::Tree {
  internal::Body body;
};

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  HERD_ASSIGN_OR_RETURN(auto body, internal::ParseTemplate(source));
  auto tree = std::make_shared<Tree>();
  tree->body = std::move(body);
  return ChatTemplate(std::make_shared<const std::string>(source), std::move(tree));
}

absl::StatusOr<std::string> ChatTemplate::Apply(const ChatTemplateInputs& in) const {
  using internal::Value;
  internal::DictObj vars;
  if (!in.extra_context.is_null() && !in.extra_context.is_object()) {
    return absl::InvalidArgumentError("extra_context must be a JSON object");
  }
  auto set_json = [&vars](const std::string& name, const nlohmann::ordered_json& j) {
    auto v = internal::FromJson(j);
    if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat(name, ": ", v.status().message()));
    vars.Set(Value::String(name), *std::move(v));
    return absl::OkStatus();
  };
  if (in.extra_context.is_object()) {
    for (auto it = in.extra_context.begin(); it != in.extra_context.end(); ++it) {
      HERD_RETURN_IF_ERROR(set_json(it.key(), it.value()));
    }
  }
  HERD_RETURN_IF_ERROR(set_json("messages", in.messages));
  if (!in.tools.is_null()) {
    HERD_RETURN_IF_ERROR(set_json("tools", in.tools));
  }
  vars.Set(Value::String("add_generation_prompt"), Value::Bool(in.add_generation_prompt));
  vars.Set(Value::String("bos_token"), Value::String(in.bos_token));
  vars.Set(Value::String("eos_token"), Value::String(in.eos_token));
  internal::RenderLimits limits;
  limits.max_output_bytes = in.limits.max_output_bytes;
  limits.max_call_depth = in.limits.max_call_depth;
  limits.max_iterations = in.limits.max_iterations;
  limits.max_stack_bytes = in.limits.max_stack_bytes;
  internal::Interpreter interp(limits, in.now_unix_seconds);
  return interp.Render(tree_->body, vars);
}

std::string_view ChatMlTemplate() {
  return "{% for message in messages %}"
         "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
         "{% endfor %}"
         "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";
}

}  // namespace herd::chat
