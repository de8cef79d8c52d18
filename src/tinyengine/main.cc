#include "tinyengine/serve.h"

int main(int argc, char** argv) { return fr::te::cli_main(argc, argv); }
