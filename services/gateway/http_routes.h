// Route groups of the HTTP front end (HttpFrontEnd registers them). Internal to
// services/gateway.
#pragma once
#include "libs/serving/http_server.h"

namespace herd::gateway {
class Gateway;

namespace http {

/// GET /health, /healthz, /v1/models, /v1/models/{id}; POST /tokenize, /detokenize
/// (llama.cpp server's shapes). http_info.cc.
void RegisterInfoRoutes(serving::http::Server* server, Gateway* gw);

/// POST /v1/chat/completions (also /chat/completions). http_chat.cc.
void RegisterChatRoutes(serving::http::Server* server, Gateway* gw);

/// POST /v1/responses (also /responses): OpenAI's Responses API over the chat path,
/// whole or streamed as Responses events; nothing is stored. http_responses.cc.
void RegisterResponsesRoutes(serving::http::Server* server, Gateway* gw);

}  // namespace http
}  // namespace herd::gateway
