// StreamSplice: one streamed completion or chat completion followed across engines (docs/front.md, "What
// is continued and what is not"). It decides whether a stream can be continued, records what the client
// has been sent, and when the engine dies mid-stream writes the request that continues it on the next
// engine; the next engine's events are rewritten so that the client reads one stream.
//
// Contract
// - StreamSplice(req, max_body_bytes) reads a complete, checked "stream": true request. continuable() is
//   false, with reason() (a short key, counted in the status file) and why() (for the client's error event),
//   for what cannot be continued exactly: another endpoint than POST /v1/completions or
//   /v1/chat/completions, n or best_of other than 1, beam search, echo, logprobs, guided decoding or tools,
//   stop strings, output penalties or min_tokens, no max_tokens (chat: max_completion_tokens or
//   max_tokens), several prompts; for chat also no messages, a chat without add_generation_prompt or
//   continue_final_message, and (seen in the stream) a tool call or reasoning.
// - forward_body() is the body to send: for a continuable completion stream the client's, with
//   "return_token_ids": true added (vLLM's field: each chunk then carries its token ids); fields the client
//   did not ask for are taken out again (token_ids set to null) before the client sees an event. A chat
//   is sent as the client wrote it.
// - on_event(event) takes one whole SSE event of the current attempt and returns what the client gets:
//   the event itself, a rewrite of it (a continuation's chunks get the first attempt's id and created,
//   prompt_token_ids null, usage counted over the whole stream), or "" (a chat continuation's role chunk:
//   the client has the first one's). Never throws: an event that is not the expected JSON passes unchanged
//   and makes the stream not continuable ("bad_chunk").
// - resume() is called when the engine died after the stream started. kResend: send body() now. A
//   completion: the prompt followed by the tokens already sent, max_tokens reduced by their count; as token
//   ids when every chunk carried them, else as text (weaker, a tokenizer may split the joined text
//   differently). A chat, always as text: the messages with the content sent as a final assistant message
//   (appended to the request's own with continue_final_message), continue_final_message true,
//   add_generation_prompt false, max_completion_tokens / max_tokens reduced by the chunks sent up to the
//   last with content (one token each, or their token_ids' count). kFinish: the client already has every
//   token: send tail() (the usage event if asked, [DONE]) and end. kCannot: reason()/why() say why; the
//   caller ends the stream with an error event.
// - generated_tokens(), after kResend: how many token ids at the end of body()'s prompt were generated for
//   this request by earlier engines (every id sent so far, over all attempts), sent to the engine as the
//   header kGeneratedTokensHeader. 0 for a text or chat continuation: the next engine tokenizes the joined
//   text itself, so which of its prompt's tokens are the generated ones is not known.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "front/http_request.h"

namespace fr::front {

// The request header of a continuation by token ids: "the last K token ids of this prompt were generated
// for this same request by an earlier engine". An engine that must compute those positions as it first
// did (the reference engine: by decode steps, not one prefill) reads it; others ignore an unknown header.
// Only the front writes it: a client's own is not forwarded (docs/front.md, "Fastrestart-Generated-Tokens").
inline constexpr std::string_view kGeneratedTokensHeader = "Fastrestart-Generated-Tokens";

class StreamSplice {
 public:
  StreamSplice(const Request& req, size_t max_body_bytes);

  bool continuable() const { return m_reason.empty(); }
  const std::string& reason() const { return m_reason; }
  const std::string& why() const { return m_why; }
  const std::string& forward_body() const { return m_forward; }

  std::string on_event(std::string_view event);

  enum class Next { kResend, kFinish, kCannot };
  Next resume();
  const std::string& body() const { return m_next_body; }
  const std::string& tail() const { return m_tail; }
  uint64_t generated_tokens() const { return m_generated; }
  // Attempts after the first (resume() that returned kResend).
  int continuations() const { return m_attempt; }
  uint64_t tokens_sent() const { return m_tokens_sent; }

 private:
  void cannot(std::string reason, std::string why);
  enum class ChatChunk { kKeep, kDrop, kPass };  // rewrite and send; drop; pass unchanged (not continuable)
  ChatChunk on_chat_choice(nlohmann::ordered_json& choice);
  Next resume_chat();
  // The continuation `next` as the body to send, unless over max_body (kCannot); on kResend, `sent` tokens
  // are counted as reached the client before it.
  Next resend(const nlohmann::ordered_json& next, uint64_t sent);
  std::string usage_event(uint64_t prompt_tokens, uint64_t completion_tokens) const;

  nlohmann::ordered_json m_req;  // the client's body
  bool m_chat = false;           // POST /v1/chat/completions: continued as text
  std::string m_forward;
  std::string m_reason, m_why;
  size_t m_max_body;
  int64_t m_max_tokens = 0;
  bool m_client_ids = false;     // the client asked return_token_ids itself
  bool m_include_usage = false;  // stream_options.include_usage
  // The prompt: as token ids (from the request, or the first chunk's prompt_token_ids), or as text.
  std::vector<int64_t> m_prompt_ids;
  bool m_prompt_ids_known = false;
  std::optional<uint64_t> m_prompt_tokens;  // from a usage the first engine sent (chat: no prompt ids)
  std::string m_prompt_text;
  bool m_prompt_is_text = false;
  // What the client has been sent.
  nlohmann::ordered_json m_id, m_created, m_model;
  bool m_have_id = false;
  std::vector<int64_t> m_sent_ids;
  bool m_ids_complete = true;  // every chunk so far carried token_ids
  std::string m_sent_text;
  uint64_t m_tokens_sent = 0;
  uint64_t m_text_tokens = 0;  // chat: tokens up to the last chunk with content (the rest had no text yet)
  uint64_t m_tokens_before = 0;  // sent before the current attempt
  bool m_choice_sent = false;    // a chunk with a choice reached the client (its prompt_token_ids too)
  bool m_finished = false;       // a finish_reason reached the client
  bool m_usage_sent = false;
  bool m_done = false;           // [DONE] reached the client
  int m_attempt = 0;
  std::string m_next_body, m_tail;
  uint64_t m_generated = 0;  // generated_tokens() of m_next_body
};

}  // namespace fr::front
