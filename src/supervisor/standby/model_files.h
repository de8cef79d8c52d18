// The files a standby read before its gate (docs/standby.md, "Lifecycle"): not only the weights but the
// model's config.json, tokenizer and chat template, which an engine reads during the slow start a standby
// does in advance. A parked standby whose files changed would serve the old model: it is not released.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "common/file_identity.h"

namespace fr::supervisor {

struct ModelFileLimits {
  int max_depth = 8;          // entries at most this many levels below a root directory
  size_t max_files = 4096;    // in all; a root with more is tracked by the first ones found
};

// Every regular file (a symlink to one included) under each root, a root that is a file itself, sorted.
// Names starting with '.' (and everything under such a directory) are skipped: caches and lock files
// that change while the model does not. Symlinked directories are not followed. A root that does not
// exist is listed as is, so its appearance is a change.
std::vector<std::string> model_files(const std::vector<std::string>& roots, const ModelFileLimits& limits = {});

// The identities of `files` now, by path; one that cannot be stat()ed matches no real file.
std::map<std::string, FileIdentity> identify_model_files(const std::vector<std::string>& files);

// The first difference between two sets of identities, in words ("<path> is gone", "<path> appeared",
// "<path>: <what changed>"); "" when they are the same files.
std::string model_files_change(const std::map<std::string, FileIdentity>& was, const std::map<std::string, FileIdentity>& now);

}  // namespace fr::supervisor
