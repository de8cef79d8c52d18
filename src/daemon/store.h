// Store: the entries a daemon holds, keyed by fingerprint, and the waiting that attach needs.
//
// Thread-safety: every method may be called from any connection thread; one mutex guards the map and
// every Entry's mutable fields, and `changed` wakes waiters when an entry finishes loading or goes away.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "daemon/backend.h"
#include "protocol/messages.h"

namespace fr::daemon {

enum class EntryState { kLoading, kReady, kFailed };
const char* entry_state_name(EntryState s);

struct AttachRecord {
  pid_t pid;
  uid_t uid;
  std::string mode;    // zero_copy | copy (attaches); the miss reason (misses)
  double unix_time;
};

struct Progress {
  std::atomic<uint64_t> done_bytes{0};
  uint64_t total_bytes = 0;
  std::chrono::steady_clock::time_point started;
  std::chrono::steady_clock::time_point finished;  // set once loaded
};

struct Entry {
  proto::Key key;
  std::string fingerprint;
  proto::Manifest manifest;  // digest set once ready
  std::string manifest_json; // the manifest serialized once it is ready: attach replies splice it in
  std::unique_ptr<Pool> pool;
  EntryState state = EntryState::kLoading;
  std::string error;         // when failed
  std::string source;        // "preload" | "publish"
  std::vector<std::string> files;  // paths, for status
  Progress progress;
  std::atomic<bool> cancel{false};
  std::thread loader;        // preload thread, joined on removal
  int publisher = -1;        // connection id filling it (publish)
  std::deque<AttachRecord> attaches;  // most recent last, at most 64
};

class Store {
 public:
  ~Store();

  std::mutex& mutex() { return m_mu; }
  std::condition_variable& changed() { return m_changed; }

  // REQUIRES: mutex held.
  std::shared_ptr<Entry> find(const std::string& fingerprint);
  std::shared_ptr<Entry> closest(const proto::Key& key);  // for explaining misses; null when empty
  Status insert(std::shared_ptr<Entry> e);                // Errc::kBusy if the fingerprint is taken
  std::shared_ptr<Entry> remove(const std::string& fingerprint);  // caller joins/destroys outside the lock
  std::vector<std::shared_ptr<Entry>> all() const;
  uint64_t held_bytes() const;

  // Removes everything (cancelling loads), joining loader threads. Must be called WITHOUT the mutex.
  void clear();

 private:
  std::mutex m_mu;
  std::condition_variable m_changed;
  std::map<std::string, std::shared_ptr<Entry>> m_entries;
};

// Joins a removed entry's loader thread (after setting cancel) and drops it. Call without the mutex.
void retire(std::shared_ptr<Entry> e);

}  // namespace fr::daemon
