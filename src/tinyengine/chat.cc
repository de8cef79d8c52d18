#include "tinyengine/chat.h"

#include <utility>

namespace fr::te {
namespace {

using nlohmann::json;
using ojson = nlohmann::ordered_json;

Result<std::string> content_text(const json& m, size_t i) {
  auto bad = [&](const std::string& why) {
    return make_error(Errc::kInvalidArgument, "'messages[" + std::to_string(i) + "].content' " + why);
  };
  if (!m.contains("content") || m["content"].is_null()) return std::string();
  const json& c = m["content"];
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) return bad("must be a string, null or a list of text parts");
  std::string out;
  for (size_t k = 0; k < c.size(); ++k) {
    const json& part = c[k];
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") || !part["text"].is_string())
      return bad("part " + std::to_string(k) + " is not {\"type\": \"text\", \"text\": string} (the only part this engine reads)");
    if (k > 0) out += "\n";
    out += part["text"].get<std::string>();
  }
  return out;
}

Result<bool> chat_flag(const json& r, const char* key, bool dflt) {
  if (!r.contains(key) || r[key].is_null()) return dflt;
  if (!r[key].is_boolean()) return make_error(Errc::kInvalidArgument, std::string("'") + key + "' must be a boolean");
  return r[key].get<bool>();
}

std::string chat_event(const ojson& j) { return "data: " + j.dump(-1, ' ', false, ojson::error_handler_t::replace) + "\n\n"; }

ojson chat_usage(size_t prompt, size_t completion) {
  // vLLM's UsageInfo field order.
  return {{"prompt_tokens", prompt}, {"total_tokens", prompt + completion}, {"completion_tokens", completion}};
}

}  // namespace

Result<ChatPrompt> render_chat(const json& r) {
  auto bad = [](const std::string& m) { return make_error(Errc::kInvalidArgument, m); };
  FR_ASSIGN(const bool add_generation_prompt, chat_flag(r, "add_generation_prompt", true));
  FR_ASSIGN(const bool continue_final, chat_flag(r, "continue_final_message", false));
  if (add_generation_prompt && continue_final)
    return bad("Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  if (!r.contains("messages")) return bad("'messages' is required");
  const json& msgs = r["messages"];
  if (!msgs.is_array() || msgs.empty()) return bad("'messages' must be a non-empty list");
  ChatPrompt out;
  for (size_t i = 0; i < msgs.size(); ++i) {
    const json& m = msgs[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || m["role"].get<std::string>().empty())
      return bad("'messages[" + std::to_string(i) + "]' must be an object with a non-empty string 'role'");
    FR_ASSIGN(auto content, content_text(m, i));
    const std::string role = m["role"].get<std::string>();
    const bool last = i + 1 == msgs.size();
    if (last && continue_final && role != "assistant")
      return bad("'continue_final_message' continues the last message, which must be the assistant's (it is '" + role + "')");
    out.text += role + ": " + content;
    if (!(last && continue_final)) out.text += "\n";
    if (last) out.role = add_generation_prompt ? "assistant" : role;
  }
  if (add_generation_prompt) out.text += "assistant: ";
  return out;
}

StreamedCompletion build_chat_stream_events(const CompletionRequest& req, const std::string& role,
                                            const Generation& gen, const std::string& id, int64_t created,
                                            const std::string& model) {
  StreamedCompletion out;
  const std::vector<int> prompt = req.prompts.empty() ? std::vector<int>() : req.prompts[0];
  auto head = [&] {
    return ojson{{"id", id}, {"object", "chat.completion.chunk"}, {"created", created}, {"model", model}};
  };
  // The role chunk (vLLM: DeltaMessage(role, content=""), prompt_token_ids set on it, null unless asked).
  {
    ojson j = head();
    j["choices"] = ojson::array({ojson{{"index", 0},
                                       {"delta", {{"role", role}, {"content", ""}}},
                                       {"logprobs", nullptr},
                                       {"finish_reason", nullptr}}});
    if (req.continuous_usage) j["usage"] = chat_usage(prompt.size(), 0);
    j["prompt_token_ids"] = req.return_token_ids ? ojson(prompt) : ojson(nullptr);
    out.events.push_back(chat_event(j));
  }
  out.head_events = out.events.size();
  // Bytes held back until their character is whole, as in build_stream_events (a prompt ending inside a
  // character starts with its bytes pending).
  std::string pending;
  {
    std::string tail;
    for (size_t b = prompt.size() >= 3 ? prompt.size() - 3 : 0; b < prompt.size(); ++b)
      tail.push_back(prompt[b] == kEos ? ' ' : static_cast<char>(prompt[b]));
    pending = tail.substr(utf8_sendable(tail));
  }
  const auto& steps = gen.steps;
  for (size_t k = 0; k < steps.size(); ++k) {
    const auto& s = steps[k];
    const bool last = k + 1 == steps.size();
    if (s.token != kEos) pending.push_back(static_cast<char>(s.token));
    const size_t n = last ? pending.size() : utf8_sendable(pending);
    ojson choice = {{"index", 0}, {"delta", {{"content", pending.substr(0, n)}}}, {"logprobs", nullptr}};
    pending.erase(0, n);
    if (last) {
      choice["finish_reason"] = gen.stopped_on_eos ? "stop" : "length";
      choice["stop_reason"] = nullptr;
    } else {
      choice["finish_reason"] = nullptr;
    }
    choice["token_ids"] = req.return_token_ids ? ojson::array({s.token}) : ojson(nullptr);
    ojson j = head();
    j["choices"] = ojson::array({choice});
    if (req.continuous_usage) j["usage"] = chat_usage(prompt.size(), k + 1);
    out.events.push_back(chat_event(j));
  }
  out.token_events = out.events.size();
  if (req.include_usage) {
    ojson j = head();
    j["choices"] = ojson::array();
    j["usage"] = chat_usage(prompt.size(), steps.size());
    out.events.push_back(chat_event(j));
  }
  out.events.push_back("data: [DONE]\n\n");
  return out;
}

json chat_answer(const CompletionRequest& req, const std::string& role, const Generation& gen, const std::string& id,
                 int64_t created, const std::string& model) {
  std::vector<int> ids;
  for (const auto& s : gen.steps) ids.push_back(s.token);
  const size_t prompt = req.prompts.empty() ? 0 : req.prompts[0].size();
  json choice = {{"index", 0},
                 {"message", {{"role", role}, {"content", detokenize(ids)}, {"tool_calls", json::array()}}},
                 {"logprobs", nullptr},
                 {"finish_reason", gen.stopped_on_eos ? "stop" : "length"},
                 {"stop_reason", nullptr}};
  if (req.return_token_ids) choice["token_ids"] = ids;
  json out = {{"id", id}, {"object", "chat.completion"}, {"created", created}, {"model", model},
              {"choices", json::array({choice})},
              {"usage", {{"prompt_tokens", prompt}, {"total_tokens", prompt + ids.size()}, {"completion_tokens", ids.size()}}}};
  if (req.return_token_ids) out["prompt_token_ids"] = req.prompts.empty() ? json::array() : json(req.prompts[0]);
  return out;
}

}  // namespace fr::te
