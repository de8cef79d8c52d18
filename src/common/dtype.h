// Tensor element types, named as safetensors names them ("BF16", "F32", ...).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace fr {

enum class DType { kBool, kU8, kI8, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64, kI64, kU64, kF8E4M3, kF8E5M2 };

// "BF16" -> kBF16; nullopt for names we do not know (a hostile header must not pass).
std::optional<DType> dtype_from_name(std::string_view name);
const char* dtype_name(DType t);
size_t dtype_size(DType t);

}  // namespace fr
