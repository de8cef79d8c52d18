#include "common/dtype.h"

#include <array>
#include <utility>

namespace fr {
namespace {
struct Info {
  DType t;
  const char* name;
  size_t size;
};
constexpr std::array<Info, 15> kTable{{
    {DType::kBool, "BOOL", 1},   {DType::kU8, "U8", 1},          {DType::kI8, "I8", 1},
    {DType::kI16, "I16", 2},     {DType::kU16, "U16", 2},        {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2},   {DType::kI32, "I32", 4},        {DType::kU32, "U32", 4},
    {DType::kF32, "F32", 4},     {DType::kF64, "F64", 8},        {DType::kI64, "I64", 8},
    {DType::kU64, "U64", 8},     {DType::kF8E4M3, "F8_E4M3", 1}, {DType::kF8E5M2, "F8_E5M2", 1},
}};
}  // namespace

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kTable)
    if (name == i.name) return i.t;
  return std::nullopt;
}
const char* dtype_name(DType t) { return kTable[static_cast<size_t>(t)].name; }
size_t dtype_size(DType t) { return kTable[static_cast<size_t>(t)].size; }

}  // namespace fr
