// Turning the public Key (paths + config) into the protocol's Key (file identities from stat(2) only).
#pragma once

#include "fastrestart/engine_loader.h"
#include "protocol/messages.h"

namespace fr::loader {

// stat()s every file (never reads one) and sorts them by path, as docs/protocol.md requires.
Result<proto::Key> identify(const fastrestart::Key& key);
// The same through open descriptors (fds[i] is key.files[i]): fstat and the path the descriptor leads to.
Result<proto::Key> identify_fds(const fastrestart::Key& key, const std::vector<int>& fds);
// The public and the protocol's views of an identified key (the same fields). to_proto checks the config
// limits and the order of the files, since an IdentifiedKey may come from the caller.
Result<proto::Key> to_proto(const fastrestart::IdentifiedKey& key);
fastrestart::IdentifiedKey from_proto(const proto::Key& key);

}  // namespace fr::loader
