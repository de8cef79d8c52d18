// The compiled digest_kernel.cu (fatbin: sm_90 SASS + compute_90 PTX), generated at build time.
#pragma once

#include <cstddef>

extern "C" {
extern const unsigned char fr_digest_fatbin[];
extern const size_t fr_digest_fatbin_size;
}
