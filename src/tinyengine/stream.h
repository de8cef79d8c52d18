// A completion request as the engine understood it, and its answer as an event stream in the format of
// vLLM's OpenAI server (vllm/entrypoints/openai/serving_completion.py, completion_stream_generator;
// docs/tinyengine.md, "Streaming").
//
// Contract
// - build_stream_events() turns finished generations into the SSE events a client reads, in order: one
//   event per generated token ("data: <chunk>\n\n"; the first `token_events` of the list), then, with
//   stream_options.include_usage, one usage event, then "data: [DONE]\n\n".
// - A chunk is {"id","object":"text_completion","created","model","choices":[{"index","text","logprobs",
//   "finish_reason","stop_reason","prompt_token_ids","token_ids"}],"usage"} with vLLM's field order and
//   nulls: prompt_token_ids on a choice's first chunk only, token_ids (the chunk's tokens) only with
//   return_token_ids, usage only with stream_options.continuous_usage_stats. finish_reason is on the last
//   token's chunk. The usage event is {"id","object","created","model","choices":[],"usage":{"prompt_tokens",
//   "total_tokens","completion_tokens"}}.
// - Text is bytes: a UTF-8 character cut between tokens is held back until it is whole (the chunk that
//   holds back has text ""), as vLLM's incremental detokenizer does; bytes that cannot start or continue a
//   character are sent as they come (JSON replaces them with U+FFFD).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tinyengine/model.h"

namespace fr::te {

struct CompletionRequest {
  std::vector<std::vector<int>> prompts;
  int max_tokens = 16;
  int top = -1;  // logprobs: -1 none, else the number of alternatives
  bool stream = false;
  bool include_usage = false;     // stream_options.include_usage (true once stream_options is given)
  bool continuous_usage = false;  // stream_options.continuous_usage_stats (with include_usage)
  bool return_token_ids = false;  // vLLM's return_token_ids
};

struct StreamedCompletion {
  std::vector<std::string> events;  // whole SSE events, in order
  size_t token_events = 0;          // the first ones are one per token
};

StreamedCompletion build_stream_events(const CompletionRequest& req, const std::vector<Generation>& gens,
                                       const std::string& id, int64_t created, const std::string& model);

// How many leading bytes of `pending` end on a whole UTF-8 character (or a byte that cannot be part of
// one): what a chunk may carry now.
size_t utf8_sendable(std::string_view pending);

}  // namespace fr::te
