// The checkpoint's files as the engines load them: a directory stands for its *.safetensors.
#pragma once

#include <string>
#include <vector>

#include "supervisor/config.h"

namespace fr::supervisor {

// weights.checkpoint with directories expanded to their *.safetensors, sorted.
std::vector<std::string> checkpoint_files(const Config& c);
// Files as given; a directory becomes its *.safetensors files, sorted (what the engines load).
std::vector<std::string> expand_checkpoint_paths(const std::vector<std::string>& paths);

}  // namespace fr::supervisor
