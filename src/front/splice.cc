#include "front/splice.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "front/sse.h"

namespace fr::front {
namespace {

using ojson = nlohmann::ordered_json;

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

bool present(const ojson& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// A number field equal to `dflt` when present (absent or null counts as the default).
bool is_default(const ojson& j, const char* key, double dflt) {
  if (!present(j, key)) return true;
  return j[key].is_number() && j[key].get<double>() == dflt;
}

bool int_ids(const ojson& a, std::vector<int64_t>* out) {
  if (!a.is_array()) return false;
  for (const auto& e : a) {
    if (!e.is_number_integer()) return false;
    if (out) out->push_back(e.get<int64_t>());
  }
  return true;
}


bool is_chat_url(const Request& req) { return req.url.substr(0, req.url.find('?')) == "/v1/chat/completions"; }

// A positive integer field (max_tokens, max_completion_tokens).
bool positive_int(const ojson& r, const char* key) {
  return present(r, key) && r[key].is_number_integer() && r[key].get<int64_t>() >= 1;
}

// A message content the continuation can append text to: a string or null.
bool text_content(const ojson& m) { return !m.contains("content") || m["content"].is_null() || m["content"].is_string(); }

// Why the request's stream cannot be continued exactly: {reason, message}; nullopt when it can.
std::optional<std::pair<std::string, std::string>> refusal(const Request& req, const ojson& r) {
  using R = std::pair<std::string, std::string>;
  if (r.is_discarded() || !r.is_object()) return R{"bad_request", "the request is not a JSON object"};
  const std::string path = req.url.substr(0, req.url.find('?'));
  const bool chat = path == "/v1/chat/completions";
  if (req.method != "POST" || (path != "/v1/completions" && !chat))
    return R{"endpoint", "only POST /v1/completions and /v1/chat/completions streams are continued"};
  if (!is_default(r, "n", 1) || !is_default(r, "best_of", 1) ||
      (present(r, "use_beam_search") && r["use_beam_search"] != false))
    return R{"n", "n, best_of and beam search other than one sequence are not continued"};
  if (present(r, "echo") && r["echo"] != false) return R{"echo", "echo is not continued"};
  // Completions: logprobs is a number (any asks for them); chat: a boolean, with top_logprobs.
  if ((present(r, "logprobs") && !(chat && r["logprobs"] == false)) || (chat && present(r, "top_logprobs")))
    return R{"logprobs", "logprobs are not continued (the next engine computes the tokens sent as a prompt, "
                         "whose log-probabilities need not be the same bit for bit)"};
  for (const char* k : {"guided_json", "guided_regex", "guided_choice", "guided_grammar", "structured_outputs",
                        "response_format", "structural_tag"})
    if (present(r, k)) return R{"guided", std::string("guided decoding (") + k + ") is not continued"};
  for (const char* k : {"tools", "tool_choice", "functions", "function_call"})
    if (present(r, k)) return R{"tools", std::string("tools (") + k + ") are not continued"};
  if (present(r, "stop") && !(r["stop"].is_array() && r["stop"].empty()) &&
      !(r["stop"].is_string() && r["stop"].get<std::string>().empty()))
    return R{"stop", "stop strings are not continued (one may span the tokens sent and the next engine's)"};
  if (!is_default(r, "frequency_penalty", 0) || !is_default(r, "presence_penalty", 0) ||
      !is_default(r, "repetition_penalty", 1) || !is_default(r, "min_tokens", 0))
    return R{"penalties", "penalties and min_tokens depend on the tokens generated: not continued"};
  if (chat) {
    if (!(present(r, "max_completion_tokens") ? positive_int(r, "max_completion_tokens") : positive_int(r, "max_tokens")))
      return R{"max_tokens", "a stream without max_completion_tokens or max_tokens is not continued (the engine's "
                             "default is not known)"};
    if (present(r, "max_tokens") && !positive_int(r, "max_tokens"))
      return R{"max_tokens", "max_tokens is not a positive integer"};
    const ojson* msgs = present(r, "messages") ? &r["messages"] : nullptr;
    if (!msgs || !msgs->is_array() || msgs->empty() || !msgs->back().is_object())
      return R{"messages", "the request has no list of messages"};
    const bool cont = present(r, "continue_final_message") && r["continue_final_message"] == true;
    const bool gen = !present(r, "add_generation_prompt") || r["add_generation_prompt"] == true;
    if (cont && (msgs->back().value("role", ojson()) != "assistant" || !text_content(msgs->back())))
      return R{"messages", "continue_final_message with a last message that is not the assistant's text"};
    if (!cont && !gen)
      return R{"generation_prompt", "a chat without add_generation_prompt or continue_final_message is not continued "
                                    "(its answer does not follow an assistant turn the continuation could extend)"};
    return std::nullopt;
  }
  if (!positive_int(r, "max_tokens"))
    return R{"max_tokens", "a stream without max_tokens is not continued (the engine's default is not known)"};
  if (!present(r, "prompt")) return R{"prompt", "the request has no prompt"};
  return std::nullopt;
}

}  // namespace

void StreamSplice::cannot(std::string reason, std::string why) {
  if (!m_reason.empty()) return;  // the first reason stays
  m_reason = std::move(reason);
  m_why = std::move(why);
}

StreamSplice::StreamSplice(const Request& req, size_t max_body_bytes) : m_max_body(max_body_bytes) {
  m_forward = req.body;
  m_req = ojson::parse(req.body, nullptr, false);
  if (auto no = refusal(req, m_req)) {
    cannot(no->first, no->second);
    return;
  }
  const ojson& r = m_req;
  if (present(r, "stream_options") && r["stream_options"].is_object()) {
    const ojson& so = r["stream_options"];
    m_include_usage = !present(so, "include_usage") || so["include_usage"] == true;
  }
  m_client_ids = present(r, "return_token_ids") && r["return_token_ids"] == true;
  if (is_chat_url(req)) {
    // Continued as text (the messages with the content sent appended), forwarded as the client wrote it.
    m_chat = true;
    m_max_tokens = r[present(r, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens"].get<int64_t>();
    return;
  }
  m_max_tokens = r["max_tokens"].get<int64_t>();
  ojson p = r["prompt"];
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = ojson(p[0]);
  if (p.is_string()) {
    m_prompt_is_text = true;
    m_prompt_text = p.get<std::string>();
  } else if (!p.empty() && int_ids(p, &m_prompt_ids)) {
    m_prompt_ids_known = true;
  } else {
    cannot("prompt", "only one prompt, as text or token ids, is continued");
    return;
  }
  if (!m_client_ids) {
    ojson f = m_req;
    f["return_token_ids"] = true;
    m_forward = dump(f);
  }
}

std::string StreamSplice::usage_event(uint64_t prompt_tokens, uint64_t completion_tokens) const {
  ojson j = {{"id", m_id},
             {"object", m_chat ? "chat.completion.chunk" : "text_completion"},
             {"created", m_created},
             {"model", m_model},
             {"choices", ojson::array()},
             {"usage",
              {{"prompt_tokens", prompt_tokens},
               {"total_tokens", prompt_tokens + completion_tokens},
               {"completion_tokens", completion_tokens}}}};
  return "data: " + dump(j) + "\n\n";
}

// One chat chunk's choice: what the client was sent (content, tokens), a tool call or reasoning that text
// cannot carry over, and a continuation's role chunk (the client has the first one's).
StreamSplice::ChatChunk StreamSplice::on_chat_choice(ojson& c) {
  if (!present(c, "delta") || !c["delta"].is_object()) {
    cannot("bad_chunk", "the engine sent a chat chunk without a delta");
    return ChatChunk::kPass;
  }
  ojson& d = c["delta"];
  for (const char* k : {"tool_calls", "function_call"})
    if (present(d, k) && !(d[k].is_array() && d[k].empty())) {
      cannot("tool_call", "a tool call had started in the stream (its arguments cannot be continued as text)");
      return ChatChunk::kPass;
    }
  for (const char* k : {"reasoning_content", "reasoning"})
    if (present(d, k) && !(d[k].is_string() && d[k].get<std::string>().empty())) {
      cannot("reasoning", "the stream carried reasoning, which a continued assistant message cannot hold apart");
      return ChatChunk::kPass;
    }
  const std::string content = present(d, "content") && d["content"].is_string() ? d["content"].get<std::string>() : "";
  const bool finish = present(c, "finish_reason");
  if (present(d, "role")) {
    // The head of a stream: no token. A continuation's is not the client's to read again.
    if (m_attempt > 0) {
      if (content.empty() && !finish) return ChatChunk::kDrop;
      d.erase("role");
    }
  } else {
    m_tokens_sent += present(c, "token_ids") && c["token_ids"].is_array() ? std::max<size_t>(1, c["token_ids"].size()) : 1;
  }
  if (!content.empty()) {
    m_sent_text += content;
    // The tokens whose text the client has: a chunk with "" (bytes held back until their character is
    // whole) is generated again by the continuation, whose prompt ends before them.
    m_text_tokens = m_tokens_sent;
  }
  if (finish) m_finished = true;
  m_choice_sent = true;
  return ChatChunk::kKeep;
}

std::string StreamSplice::on_event(std::string_view event) {
  const auto data = data_of(event);
  if (!data) return std::string(event);
  if (*data == "[DONE]") {
    m_done = true;
    return std::string(event);
  }
  if (!continuable()) return std::string(event);
  ojson j = ojson::parse(*data, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    cannot("bad_chunk", "the engine sent an event that is not a JSON object");
    return std::string(event);
  }
  if (j.contains("error")) {
    cannot("engine_error", "the engine's stream ended with its own error");
    return std::string(event);
  }
  // A completion stream's chunks lose the token_ids the front added; a chat stream is forwarded as the
  // client wrote it, so only a continuation's events are rewritten.
  const bool rewrite = m_attempt > 0 || (!m_chat && !m_client_ids);
  if (!m_have_id) {
    m_have_id = true;
    m_id = j.value("id", ojson());
    m_created = j.value("created", ojson());
    m_model = j.value("model", ojson());
  } else if (m_attempt > 0) {
    if (j.contains("id")) j["id"] = m_id;
    if (j.contains("created")) j["created"] = m_created;
  }
  if (m_chat && j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    if (j["choices"].size() != 1 || !j["choices"][0].is_object()) {
      cannot("bad_chunk", "the engine sent a chunk with several choices");
      return std::string(event);
    }
    switch (on_chat_choice(j["choices"][0])) {
      case ChatChunk::kPass: return std::string(event);
      case ChatChunk::kDrop: return "";
      case ChatChunk::kKeep: break;
    }
    if (m_attempt == 0 && present(j, "prompt_token_ids") && !m_prompt_ids_known) {
      m_prompt_ids.clear();
      m_prompt_ids_known = int_ids(j["prompt_token_ids"], &m_prompt_ids);
    }
  } else if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    if (j["choices"].size() != 1 || !j["choices"][0].is_object()) {
      cannot("bad_chunk", "the engine sent a chunk with several choices");
      return std::string(event);
    }
    ojson& c = j["choices"][0];
    uint64_t count = 1;  // without token ids a chunk counts as one token (weaker: text continuation)
    if (present(c, "token_ids") && int_ids(c["token_ids"], &m_sent_ids)) {
      count = c["token_ids"].size();
    } else {
      m_ids_complete = false;
    }
    if (c.contains("text") && c["text"].is_string()) m_sent_text += c["text"].get<std::string>();
    if (present(c, "prompt_token_ids")) {
      if (!m_choice_sent && m_attempt == 0 && !m_prompt_ids_known) {
        m_prompt_ids.clear();
        m_prompt_ids_known = int_ids(c["prompt_token_ids"], &m_prompt_ids);
      }
      // The client had the prompt's ids in its first chunk; the next engine's prompt is longer.
      if (m_choice_sent && m_attempt > 0) c["prompt_token_ids"] = nullptr;
    }
    if (present(c, "finish_reason")) m_finished = true;
    if (!m_client_ids && c.contains("token_ids")) c["token_ids"] = nullptr;
    m_tokens_sent += count;
    m_choice_sent = true;
  }
  if (present(j, "usage") && j["usage"].is_object()) {
    ojson& u = j["usage"];
    if (m_attempt == 0 && u.contains("prompt_tokens") && u["prompt_tokens"].is_number_unsigned())
      m_prompt_tokens = u["prompt_tokens"].get<uint64_t>();
    if (m_attempt > 0 && u.contains("prompt_tokens") && u["prompt_tokens"].is_number_unsigned() &&
        u.contains("completion_tokens") && u["completion_tokens"].is_number_unsigned()) {
      // The next engine counted the tokens sent as prompt: they are the completion's.
      const uint64_t prompt = u["prompt_tokens"].get<uint64_t>();
      const uint64_t before = std::min<uint64_t>(m_tokens_before, prompt);
      u["prompt_tokens"] = prompt - before;
      u["completion_tokens"] = u["completion_tokens"].get<uint64_t>() + before;  // total_tokens stays
    }
    if (j.contains("choices") && j["choices"].is_array() && j["choices"].empty()) m_usage_sent = true;
  }
  if (!rewrite) return std::string(event);
  return "data: " + dump(j) + "\n\n";
}

StreamSplice::Next StreamSplice::resume() {
  m_next_body.clear();
  m_tail.clear();
  m_generated = 0;
  if (m_done) return Next::kFinish;
  if (!continuable()) return Next::kCannot;
  if (m_finished) {
    // Every token reached the client: only the usage event (if asked) and [DONE] are missing.
    if (m_include_usage && !m_usage_sent) {
      if (!m_prompt_ids_known && !m_prompt_tokens) {
        cannot("usage", "the stream's usage cannot be counted without the prompt's token ids or token count");
        return Next::kCannot;
      }
      m_tail = usage_event(m_prompt_ids_known ? m_prompt_ids.size() : *m_prompt_tokens, m_tokens_sent);
    }
    m_tail += done_event();
    m_done = true;
    return Next::kFinish;
  }
  if (m_chat) return resume_chat();
  if (m_tokens_sent >= static_cast<uint64_t>(m_max_tokens)) {
    cannot("max_tokens", "the engine sent max_tokens tokens without a finish_reason");
    return Next::kCannot;
  }
  ojson next = m_req;
  if (m_ids_complete && m_prompt_ids_known) {
    ojson ids = ojson::array();
    for (auto t : m_prompt_ids) ids.push_back(t);
    for (auto t : m_sent_ids) ids.push_back(t);
    next["prompt"] = std::move(ids);
    next["return_token_ids"] = true;
    // A prompt of nothing but generated ids (an engine that reported an empty prompt) claims none: the
    // engine must have at least one prompt id before them.
    m_generated = m_prompt_ids.empty() ? 0 : m_sent_ids.size();
  } else if (m_prompt_is_text) {
    next["prompt"] = m_prompt_text + m_sent_text;
  } else {
    cannot("no_token_ids", "the engine gave no token ids for a prompt of token ids");
    return Next::kCannot;
  }
  next["max_tokens"] = m_max_tokens - static_cast<int64_t>(m_tokens_sent);
  return resend(next, m_tokens_sent);
}

StreamSplice::Next StreamSplice::resend(const ojson& next, uint64_t sent) {
  m_next_body = dump(next);
  if (m_next_body.size() > m_max_body) {
    cannot("body_too_large", "the continuation's request is over front.max_body_bytes = " + std::to_string(m_max_body));
    return Next::kCannot;
  }
  ++m_attempt;
  m_tokens_sent = sent;
  m_tokens_before = sent;
  return Next::kResend;
}

// A chat continues as text: the messages with the content sent as the assistant's final message (or
// appended to the request's own final assistant message), continued without a generation prompt.
StreamSplice::Next StreamSplice::resume_chat() {
  // Tokens after the last one with text (held back by the engine) are generated again.
  const uint64_t sent = m_text_tokens;
  if (sent >= static_cast<uint64_t>(m_max_tokens)) {
    cannot("max_tokens", "the engine sent max_tokens tokens without a finish_reason");
    return Next::kCannot;
  }
  ojson next = m_req;
  if (!m_sent_text.empty()) {
    ojson& msgs = next["messages"];
    const bool own_final = present(m_req, "continue_final_message") && m_req["continue_final_message"] == true;
    if (own_final) {
      ojson& last = msgs.back();
      last["content"] = (last.contains("content") && last["content"].is_string() ? last["content"].get<std::string>() : "") +
                        m_sent_text;
    } else {
      msgs.push_back({{"role", "assistant"}, {"content", m_sent_text}});
    }
    next["continue_final_message"] = true;
    next["add_generation_prompt"] = false;
    // The limit the engine reads (vLLM: max_completion_tokens, else max_tokens) is above `sent`; the other,
    // when both are given, is ignored by it and kept valid.
    for (const char* k : {"max_completion_tokens", "max_tokens"})
      if (present(next, k)) next[k] = std::max<int64_t>(1, next[k].get<int64_t>() - static_cast<int64_t>(sent));
  }  // else nothing reached the client but the role chunk: the request as it was
  return resend(next, sent);
}

}  // namespace fr::front
