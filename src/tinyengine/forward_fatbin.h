// The compiled forward_kernels.cu (fatbin), embedded at build time by src/cuda/embed_fatbin.cmake.
#pragma once

#include <cstddef>

extern "C" {
extern const unsigned char fr_te_forward_fatbin[];
extern const size_t fr_te_forward_fatbin_size;
}
