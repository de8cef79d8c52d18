// Releasing and re-attaching an attached pool around a snapshot (docs/snapshot.md, "Snapshots without the
// weights"). Internal: Weights::release_mapping() and Weights::reattach() of attach.cc call these.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine_loader/device.h"
#include "fastrestart/engine_loader.h"
#include "protocol/messages.h"

namespace fr::loader {

// A view of attach.cc's weights: what a release or a re-attach needs.
struct Attached {
  std::shared_ptr<DeviceApi> device;
  MappedPool* pool;
  const std::vector<fastrestart::Tensor>& tensors;
  fastrestart::Mode mode;
  const std::string& fingerprint;
  const std::string& digest;
  const proto::Key& key;
  const fastrestart::Options& options;
};

Result<fastrestart::MappingInfo> release_weights(const Attached& a);
// Asks the daemon for the same key again; maps its pool at the old address only when the entry has the
// same fingerprint, digest, size and tensor layout.
Result<fastrestart::MappingInfo> reattach_weights(const Attached& a);

}  // namespace fr::loader
