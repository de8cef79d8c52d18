// The DLPack ABI (https://github.com/dmlc/dlpack, include/dlpack/dlpack.h), v0.8 (DLManagedTensor, capsule
// "dltensor") plus the v1.0 versioned struct (capsule "dltensor_versioned", with the read-only flag).
// Declared here from the public spec so that the binding needs no extra package.
#pragma once

#include <cstdint>

extern "C" {

enum DLDeviceType : int32_t {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
};

struct DLDevice {
  DLDeviceType device_type;
  int32_t device_id;
};

enum DLDataTypeCode : uint8_t {
  kDLInt = 0,
  kDLUInt = 1,
  kDLFloat = 2,
  kDLOpaqueHandle = 3,
  kDLBfloat = 4,
  kDLComplex = 5,
  kDLBool = 6,
};

struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; NULL means compact row-major
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

// DLPack 1.0.
struct DLPackVersion {
  uint32_t major;
  uint32_t minor;
};

constexpr uint64_t kDLPackFlagReadOnly = 1ULL << 0;

struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

}  // extern "C"
