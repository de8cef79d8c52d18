// Turning the public Key (paths + config) into the protocol's Key (file identities from stat(2) only).
#pragma once

#include "fastrestart/engine_loader.h"
#include "protocol/messages.h"

namespace fr::loader {

// stat()s every file (never reads one) and sorts them by path, as docs/protocol.md requires.
Result<proto::Key> identify(const fastrestart::Key& key);

}  // namespace fr::loader
