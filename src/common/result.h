// Moved: the Result type is public (installed with engine_loader). See fastrestart/result.h.
#pragma once
#include "fastrestart/result.h"
