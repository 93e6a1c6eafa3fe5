#include "libs/chat/chat_template.h"

#include "libs/chat/interpreter.h"
#include "libs/chat/parser.h"

namespace herd::chat {

struct ChatTemplate::Tree {
  internal::Body body;
};

absl::StatusOr<ChatTemplate> ChatTemplate::Parse(std::string_view source) {
  auto body = internal::ParseTemplate(source);
  if (!body.ok()) return body.status();
  auto tree = std::make_shared<Tree>();
  tree->body = *std::move(body);
  return ChatTemplate(std::make_shared<const std::string>(source), std::move(tree));
}

absl::StatusOr<std::string> ChatTemplate::Apply(const ChatTemplateInputs& in) const {
  using internal::Value;
  internal::DictObj vars;
  if (!in.extra_context.is_null() && !in.extra_context.is_object()) {
    return absl::InvalidArgumentError("extra_context must be a JSON object");
  }
  if (in.extra_context.is_object()) {
    for (auto it = in.extra_context.begin(); it != in.extra_context.end(); ++it) {
      vars.Set(Value::String(it.key()), internal::FromJson(it.value()));
    }
  }
  vars.Set(Value::String("messages"), internal::FromJson(in.messages));
  if (!in.tools.is_null()) vars.Set(Value::String("tools"), internal::FromJson(in.tools));
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
