// POST /v1/chat/completions for the tiny engine (docs/tinyengine.md, "Chat"): the messages rendered with a
// fixed, trivial chat template into a text prompt, generated exactly as /v1/completions generates that
// text, and answered in the shape of vLLM's OpenAI server (vllm/entrypoints/openai/serving_chat.py).
//
// Contract
// - render_chat(messages, add_generation_prompt, continue_final_message) is the template: each message
//   "<role>: <content>\n"; then "assistant: " when add_generation_prompt. With continue_final_message the
//   last message (which must be the assistant's) is rendered without its "\n", so the model continues it.
//   Both flags true is an error (as vLLM's ChatCompletionRequest validator), as are messages that are not
//   a non-empty list of {role: string, content: string | null | [{type: "text", text}]} (text parts are
//   joined with "\n", vLLM's "string" content format).
// - The rendered prompt's greedy output is /v1/completions' output for the same text: a chat stream cut
//   mid-way and re-sent with its partial assistant message and continue_final_message renders the
//   uninterrupted prompt followed by the text sent, and continues byte for byte (docs/front.md).
// - build_chat_stream_events(): vLLM's chat stream: a first chunk with delta {role, content: ""}, one chunk
//   per generated token with delta {content}, finish_reason on the last, then with
//   stream_options.include_usage a usage chunk, then "data: [DONE]". The first chunk is the stream's one
//   head event (StreamedCompletion::head_events: sent at once, no token delay).
// - chat_answer() is the non-streamed chat.completion object.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "fastrestart/result.h"
#include "tinyengine/model.h"
#include "tinyengine/stream.h"

namespace fr::te {

struct ChatPrompt {
  std::string text;  // the rendered prompt
  std::string role;  // the answer's role: "assistant", or the last message's without a generation prompt
};

// `request` is the parsed request body (an object). Reads messages, add_generation_prompt (default true)
// and continue_final_message (default false). kInvalidArgument names the field at fault.
Result<ChatPrompt> render_chat(const nlohmann::json& request);

StreamedCompletion build_chat_stream_events(const CompletionRequest& req, const std::string& role,
                                            const Generation& gen, const std::string& id, int64_t created,
                                            const std::string& model);

nlohmann::json chat_answer(const CompletionRequest& req, const std::string& role, const Generation& gen,
                           const std::string& id, int64_t created, const std::string& model);

}  // namespace fr::te
