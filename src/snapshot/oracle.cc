#include "snapshot/oracle.h"

#include <httplib.h>

#include <cmath>

#include "common/bounded_json.h"
#include "snapshot/json_fields.h"

namespace fr::snapshot {

using nlohmann::json;

json to_json(const Oracle& o) {
  return {{"prompt", o.prompt}, {"model", o.model}, {"max_tokens", o.max_tokens}, {"token_ids", o.token_ids},
          {"text", o.text}, {"logprobs", o.logprobs}};
}

Result<Oracle> oracle_from_json(const json& j, const std::string& where) {
  Fields f(j, where);
  Oracle o;
  FR_ASSIGN(o.prompt, f.str("prompt"));
  FR_ASSIGN(o.model, f.str("model"));
  FR_ASSIGN(int64_t n, f.integer("max_tokens"));
  o.max_tokens = static_cast<int>(n);
  FR_ASSIGN(const json* ids, f.child("token_ids", json::value_t::array));
  for (const auto& x : *ids) {
    if (!x.is_number_integer()) return f.fail("token_ids", "expected integers");
    o.token_ids.push_back(x.get<int>());
  }
  FR_ASSIGN(o.text, f.str("text"));
  FR_ASSIGN(const json* lp, f.child("logprobs", json::value_t::array));
  for (const auto& x : *lp) {
    if (!x.is_number()) return f.fail("logprobs", "expected numbers");
    o.logprobs.push_back(x.get<double>());
  }
  return o;
}

Result<Oracle> request_oracle(const std::string& host, int port, const std::string& prompt, const std::string& model,
                              int max_tokens, double timeout_s) {
  httplib::Client c(host, port);
  auto sec = static_cast<time_t>(timeout_s);
  auto usec = static_cast<time_t>((timeout_s - static_cast<double>(sec)) * 1e6);
  c.set_connection_timeout(sec, usec);
  c.set_read_timeout(sec, usec);
  c.set_keep_alive(false);
  json body{{"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"logprobs", 1}};
  if (!model.empty()) body["model"] = model;
  const std::string what = "oracle: POST http://" + host + ":" + std::to_string(port) + "/v1/completions";
  auto res = c.Post("/v1/completions", body.dump(), "application/json");
  if (!res) return make_error(Errc::kIo, what + ": " + httplib::to_string(res.error()));
  if (res->status != 200)
    return make_error(Errc::kIo, what + ": HTTP " + std::to_string(res->status) + " " + res->body.substr(0, 200));
  auto j = parse_json_or_discarded(res->body, kSmallJsonLimits);
  if (j.is_discarded() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].empty())
    return make_error(Errc::kInvalidArgument, what + ": the answer has no choices");
  const json& ch = j["choices"][0];
  Oracle o;
  o.prompt = prompt;
  o.model = model;
  o.max_tokens = max_tokens;
  if (!ch.contains("text") || !ch["text"].is_string())
    return make_error(Errc::kInvalidArgument, what + ": the answer has no choices[0].text");
  o.text = ch["text"].get<std::string>();
  if (ch.contains("token_ids") && ch["token_ids"].is_array())
    for (const auto& t : ch["token_ids"])
      if (t.is_number_integer()) o.token_ids.push_back(t.get<int>());
  if (ch.contains("logprobs") && ch["logprobs"].is_object() && ch["logprobs"].contains("token_logprobs"))
    for (const auto& l : ch["logprobs"]["token_logprobs"])
      if (l.is_number()) o.logprobs.push_back(l.get<double>());
  return o;
}

std::optional<std::string> oracle_mismatch(const Oracle& want, const Oracle& got) {
  if (want.token_ids != got.token_ids)
    return "oracle: token ids " + json(got.token_ids).dump() + " differ from the recorded " + json(want.token_ids).dump();
  if (want.text != got.text)
    return "oracle: text " + json(got.text).dump() + " differs from the recorded " + json(want.text).dump();
  if (want.logprobs.size() != got.logprobs.size())
    return "oracle: " + std::to_string(got.logprobs.size()) + " log-probabilities, recorded " +
           std::to_string(want.logprobs.size());
  for (size_t i = 0; i < want.logprobs.size(); ++i)
    if (!(std::fabs(want.logprobs[i] - got.logprobs[i]) <= kLogprobTolerance))
      return "oracle: log-probability of token " + std::to_string(i) + " is " + json(got.logprobs[i]).dump() +
             ", recorded " + json(want.logprobs[i]).dump();
  return std::nullopt;
}

}  // namespace fr::snapshot
