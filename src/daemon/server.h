// The daemon's server: socket directory, lock, listener, one thread per connection, and the requests of
// docs/protocol.md. The event loop lives in run(); everything it touches is owned by the Server.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/private_dir.h"
#include "daemon/arena.h"
#include "daemon/backend.h"
#include "daemon/preload.h"
#include "daemon/store.h"
#include "protocol/frame.h"

namespace fr::daemon {

struct PreloadRequest {
  std::vector<std::string> files;
  std::map<std::string, std::string> config;
  std::vector<std::string> tensors;
  std::optional<DType> dtype;
};

struct ServerOptions {
  std::string socket_dir;            // empty: default_socket_dir()
  std::optional<gid_t> group;        // allow this group (dir 0750, socket 0660)
  int reader_threads = 8;
  size_t max_clients = 256;
  TestReadHold test_read_hold;       // tests only: hold every read task back (docs/weightd.md)
  // A connection with a publish open is never idle (never evicted): the publish must commit within this.
  double publish_timeout_s = 600;
  // An attach waits for a loading entry at most this long, whatever its wait_s asks.
  double attach_wait_limit_s = 3600;
  // KV arenas (docs/weightd.md, "KV arenas"), as the ArenaTable takes them: who may lease and release
  // them, whatever the socket's group allows (docs/protocol.md, "Arena security"; the engine's uid, the
  // daemon's own by default), how many and how many bytes it holds at most, the names allowed. A lease's
  // wait for the previous holder is capped by attach_wait_limit_s too.
  ArenaPolicy arenas;
};

// Exit codes of fastrestart-weightd (docs/weightd.md).
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;   // bad flags, unusable socket directory
inline constexpr int kExitBusy = 3;    // another daemon holds the GPU's lock
inline constexpr int kExitNoGpu = 4;   // no CUDA driver, no such GPU, built without CUDA

class Server {
 public:
  // Prepares the directory, takes the lock, removes a stale socket and listens. Errc::kBusy: lock held.
  static Result<std::unique_ptr<Server>> create(Backend& backend, ServerOptions options);
  ~Server();

  // Starts a preload as the preload request would (asynchronously); returns the fingerprint.
  Result<std::string> preload(const PreloadRequest& req, bool wait);
  // Serves until SIGTERM/SIGINT (which the caller must have blocked in all threads) or a shutdown request.
  Status run();

  const std::string& socket_path() const { return m_socket_path; }

 private:
  struct Conn;
  Server(Backend& b, ServerOptions o);

  void serve(Conn& c);
  void serve_requests(Conn& c);
  // Tells the peer why its connection ends: a framing error, a frame that stopped arriving, an eviction.
  void read_failed(Conn& c, const Error& e);
  // With m_conn_mu held: true when a new connection may be served, evicting the longest-idle one if all
  // slots are taken; false when every connection is busy.
  bool make_room();
  proto::json dispatch(Conn& c, const proto::json& req, UniqueFd* fd_out);
  proto::json hello() const;
  proto::json do_status();
  Result<proto::json> do_attach(Conn& c, const proto::json& req, UniqueFd* fd_out);
  Result<proto::json> do_publish_begin(Conn& c, const proto::json& req, UniqueFd* fd_out);
  Result<proto::json> do_publish_commit(Conn& c, const proto::json& req);
  Result<proto::json> do_preload(const proto::json& req);
  Result<proto::json> do_evict(const proto::json& req);
  Result<proto::json> do_arena_lease(Conn& c, const proto::json& req, UniqueFd* fd_out);
  Result<proto::json> do_arena_release(Conn& c, const proto::json& req);
  void abort_publish(Conn& c);
  // Drops every entry (not loading) a file of which no longer has the identity the entry was made from:
  // an attach identifies the files anew, so such an entry can never match again and only holds memory.
  // Run where a new entry is about to be made (publish_begin, preload). Call without the store's mutex.
  void drop_stale_entries(const char* before);
  bool peer_allowed(const PeerCred& p) const;
  void reap_connections(bool all);
  void request_stop();

  Backend& m_backend;
  ServerOptions m_opts;
  std::string m_socket_path;
  LockFile m_lock;
  UniqueFd m_listen;
  UniqueFd m_wake_r, m_wake_w;  // self-pipe: shutdown requests wake run()
  bool m_pidfd_messages = false;  // the kernel attaches the sender's pidfd to each request (SO_PASSPIDFD)
  std::atomic<bool> m_stopping{false};
  Store m_store;
  ArenaTable m_arenas;

  std::deque<AttachRecord> m_misses;  // GUARDED_BY(m_store.mutex()): the last 64 misses, for status
  uint64_t m_stale_dropped = 0;       // GUARDED_BY(m_store.mutex())

  std::mutex m_conn_mu;
  std::map<int, std::unique_ptr<Conn>> m_conns;
  int m_next_conn = 1;
};

}  // namespace fr::daemon
