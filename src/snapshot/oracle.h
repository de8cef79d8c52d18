// The oracle: a greedy completion recorded when the snapshot is created and replayed after a restore
// (ARCHITECTURE.md, "Snapshots"). Equal token ids and text, and log-probabilities within kLogprobTolerance, prove the
// restored process computes what the original did, weights and GPU state included.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fastrestart/result.h"

namespace fr::snapshot {

inline constexpr double kLogprobTolerance = 1e-4;

struct Oracle {
  std::string prompt;
  std::string model;
  int max_tokens = 1;
  std::vector<int> token_ids;
  std::string text;
  std::vector<double> logprobs;
};

nlohmann::json to_json(const Oracle& o);
Result<Oracle> oracle_from_json(const nlohmann::json& j, const std::string& where);

// POST /v1/completions {prompt, max_tokens, temperature 0, logprobs 1}; reads choices[0].text,
// .token_ids (or logprobs.tokens when absent: then ids stay empty) and logprobs.token_logprobs.
Result<Oracle> request_oracle(const std::string& host, int port, const std::string& prompt, const std::string& model,
                              int max_tokens, double timeout_s);

// Why `got` is not `want`, or nullopt when it matches.
std::optional<std::string> oracle_mismatch(const Oracle& want, const Oracle& got);

}  // namespace fr::snapshot
