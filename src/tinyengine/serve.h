// `fastrestart-tinyengine serve` and `gen`: the program flows behind the CLI (cli.cc).
//
// Exit codes (serve): 0 stopped by SIGTERM/SIGINT (also when the grace period ran out); 1 a load or runtime
// failure, or a fault that exits 1; 2 bad usage. The exit-after faults use their own code.
#pragma once

#include <string>

#include "tinyengine/checkpoint.h"
#include "tinyengine/options.h"

namespace fr::te {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

int run_serve(const ServeOptions& options);
int run_gen(const GenOptions& options, const std::string& out_dir);

int cli_main(int argc, char** argv);

}  // namespace fr::te
