#include "tinyengine/stream.h"

#include <nlohmann/json.hpp>

namespace fr::te {
namespace {

using ojson = nlohmann::ordered_json;

std::string event_of(const ojson& j) {
  return "data: " + j.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n";
}

// The length of the UTF-8 sequence a lead byte starts (0: not a lead byte).
size_t utf8_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 0;
}

}  // namespace

size_t utf8_sendable(std::string_view s) {
  // Only the tail can be an unfinished character: look back at most 3 bytes for its lead byte.
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte: its lead is further back
    const size_t len = utf8_length(c);
    if (len > back) {
      // A lead byte whose character is not whole yet, when the bytes after it do continue it.
      return n - back;
    }
    return n;
  }
  return n;
}

StreamedCompletion build_stream_events(const CompletionRequest& req, const std::vector<Generation>& gens,
                                       const std::string& id, int64_t created, const std::string& model) {
  StreamedCompletion out;
  size_t total_prompt = 0, total_completion = 0;
  for (size_t i = 0; i < gens.size() && i < req.prompts.size(); ++i) {
    const auto& prompt = req.prompts[i];
    const auto& steps = gens[i].steps;
    total_prompt += prompt.size();
    // Bytes held back until their character is whole. A prompt that ends inside a character (a stream
    // continued after such a token, docs/front.md) starts with its partial bytes pending, so the first
    // chunk's text completes the character as the uninterrupted stream's would have.
    std::string pending;
    {
      std::string tail;
      for (size_t b = prompt.size() >= 3 ? prompt.size() - 3 : 0; b < prompt.size(); ++b)
        tail.push_back(prompt[b] == kEos ? ' ' : static_cast<char>(prompt[b]));
      pending = tail.substr(utf8_sendable(tail));
    }
    size_t text_offset = 0;
    for (size_t k = 0; k < steps.size(); ++k) {
      const auto& s = steps[k];
      const bool last = k + 1 == steps.size();
      if (s.token != kEos) pending.push_back(static_cast<char>(s.token));
      const size_t n = last ? pending.size() : utf8_sendable(pending);
      const std::string text = pending.substr(0, n);
      pending.erase(0, n);
      ojson logprobs = nullptr;
      if (req.top >= 0) {
        ojson alt = ojson::object();
        for (const auto& [tok, lp] : s.top) alt[token_name(tok)] = lp;
        logprobs = {{"text_offset", {text_offset}},
                    {"token_logprobs", {s.logprob}},
                    {"tokens", {token_name(s.token)}},
                    {"top_logprobs", req.top > 0 ? ojson::array({alt}) : ojson::array({nullptr})}};
      }
      text_offset += text.size();
      ojson finish = nullptr;
      if (last) finish = gens[i].stopped_on_eos ? "stop" : "length";
      ojson choice = {{"index", i},
                      {"text", text},
                      {"logprobs", logprobs},
                      {"finish_reason", finish},
                      {"stop_reason", nullptr},
                      {"prompt_token_ids", k == 0 ? ojson(prompt) : ojson(nullptr)},
                      {"token_ids", req.return_token_ids ? ojson::array({s.token}) : ojson(nullptr)}};
      ojson usage = nullptr;
      if (req.continuous_usage)
        usage = {{"prompt_tokens", prompt.size()},
                 {"total_tokens", prompt.size() + k + 1},
                 {"completion_tokens", k + 1},
                 {"prompt_tokens_details", nullptr}};
      ojson chunk = {{"id", id},         {"object", "text_completion"}, {"created", created},
                     {"model", model},   {"choices", ojson::array({choice})}, {"usage", usage}};
      out.events.push_back(event_of(chunk));
    }
    total_completion += steps.size();
  }
  out.token_events = out.events.size();
  if (req.include_usage) {
    ojson chunk = {{"id", id},
                   {"object", "text_completion"},
                   {"created", created},
                   {"model", model},
                   {"choices", ojson::array()},
                   {"usage",
                    {{"prompt_tokens", total_prompt},
                     {"total_tokens", total_prompt + total_completion},
                     {"completion_tokens", total_completion}}}};
    out.events.push_back(event_of(chunk));
  }
  out.events.push_back("data: [DONE]\n\n");
  return out;
}

}  // namespace fr::te
