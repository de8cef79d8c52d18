// The snapshot directory: artifacts by id, created atomically, listed newest first, deleted safely
// (layout: manifest.h).
#pragma once

#include <string>
#include <vector>

#include "common/private_dir.h"
#include "fastrestart/result.h"
#include "snapshot/manifest.h"

namespace fr::snapshot {

struct Listed {
  std::string id;
  std::string dir;
  Result<Manifest> manifest;  // an unreadable manifest is listed with its error
};

class Store {
 public:
  explicit Store(std::string dir) : m_dir(std::move(dir)) {}
  const std::string& dir() const { return m_dir; }
  std::string path(const std::string& id) const { return m_dir + "/" + id; }

  // Creates the directory 0700 (refusing one that is not ours or too open).
  Status ensure() const;
  // The same rule, creating and changing nothing, for a restore: the directory, and the artifact <id> when
  // `id` is not empty, must be ours (euid), real directories, no mode bit beyond 0700. A restore runs what
  // the images say as our uid: anyone else who could write them could run code as us. The error names the
  // path ("snapshot directory /var/lib/fastrestart/m/snapshots has mode 0770, more open than 0700; ...").
  Status check(const std::string& id = {}) const;
  // A new id from the UTC time ("20261130-081500"), unique within the directory.
  std::string new_id() const;
  // Creates .creating-<id>/images (0700) and returns .creating-<id>.
  Result<std::string> begin(const std::string& id) const;
  // Renames .creating-<id> to <id>: the artifact appears complete or not at all.
  Status commit(const std::string& id) const;
  // Removes .creating-<id> after a failure.
  void abandon(const std::string& id) const;
  // Artifacts, newest first (ids sort by time).
  std::vector<Listed> list() const;
  // Their ids only (no manifest is read), newest first.
  std::vector<std::string> ids() const;
  // Deletes <id>; Errc::kBusy while a restore holds its lock.
  Status remove(const std::string& id) const;
  // The restore lock of <id> (Errc::kBusy: a restore of it is running).
  Result<LockFile> lock(const std::string& id) const;

 private:
  std::string m_dir;
};

// Sum of the sizes of regular files under `dir`.
uint64_t tree_bytes(const std::string& dir);
// A valid artifact id: [0-9A-Za-z._-], not starting with '.', at most 64 characters.
bool valid_id(const std::string& id);

}  // namespace fr::snapshot
