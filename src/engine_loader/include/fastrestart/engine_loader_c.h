/* engine_loader's C ABI, for engines and bindings that are not C++ (contract: engine_loader.h).
 *
 * Conventions
 * - Every function returns 0 on success, a positive value for an expected outcome (1 = miss), and a
 *   negative value on error (-1 invalid argument, -2 any other failure).
 * - `err`/`errlen`: when given, receive a NUL-terminated message (a miss's reason, or the error).
 * - Ownership: fr_weights_t objects are released with fr_weights_release(), fr_key_t objects with
 *   fr_key_release(); tensor views and their strings stay valid until then. Strings passed in are copied.
 * - Publishing: identify the key (fr_key_identify) BEFORE reading the checkpoint, attach with it, and on a
 *   miss publish under that same key after the load. The daemon refuses (FR_EFAIL, err names the file) a
 *   publish whose files changed since they were identified; keep serving what was read.
 * - Threading: as the C++ API. The ABI is stable within a major version; fr_options_t has a size field
 *   that callers set with fr_options_init(), so fields can be appended.
 */
#ifndef FASTRESTART_ENGINE_LOADER_C_H
#define FASTRESTART_ENGINE_LOADER_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fr_weights fr_weights_t;
typedef struct fr_key fr_key_t;

enum { FR_MODE_ZERO_COPY = 0, FR_MODE_COPY = 1 };
enum { FR_OK = 0, FR_MISS = 1, FR_EINVAL = -1, FR_EFAIL = -2 };

typedef struct {
  size_t struct_size;
  int mode;               /* FR_MODE_* */
  int fallback;           /* non-zero: failures become misses */
  double connect_timeout_s;
  double state_timeout_s;
  int verify;
  const char* socket_dir; /* NULL: $FASTRESTART_SOCKET_DIR, else the default */
  const char* device;     /* "host" | "cuda:<ordinal>"; NULL: "host" */
} fr_options_t;

typedef struct {
  const char* name;
  const char* dtype;      /* "BF16", "F32", ... */
  int ndim;
  const int64_t* shape;
  const int64_t* strides; /* elements; NULL on input to fr_publish_key (contiguous) */
  void* data;
  uint64_t nbytes;
} fr_tensor_t;

void fr_options_init(fr_options_t* o);

/* Identifies (stat(2), never reads) the checkpoint files now, with `nconfig` config strings "key=value".
 * On FR_OK *out holds the key. */
int fr_key_identify(const char* const* files, size_t nfiles, const char* const* config, size_t nconfig,
                    fr_key_t** out, char* err, size_t errlen);
/* The same for files the caller has open and reads through `fds` (fds[i] is files[i]; the paths name
 * them in errors): identified by fstat and the path each descriptor leads to, so the key is what is read
 * even if a symlink on the way is retargeted during the load. */
int fr_key_identify_fds(const char* const* files, const int* fds, size_t nfiles, const char* const* config,
                        size_t nconfig, fr_key_t** out, char* err, size_t errlen);
const char* fr_key_fingerprint(const fr_key_t* key);
void fr_key_release(fr_key_t* key);

/* Attaches with the identities in `key`. On FR_OK *out holds the weights; on FR_MISS err holds the reason. */
int fr_attach_key(const fr_key_t* key, const fr_options_t* options, fr_weights_t** out, char* err, size_t errlen);
/* fr_key_identify() then fr_attach_key(), for an engine that never publishes. */
int fr_attach(const char* const* files, size_t nfiles, const char* const* config, size_t nconfig,
              const fr_options_t* options, fr_weights_t** out, char* err, size_t errlen);
size_t fr_weights_count(const fr_weights_t* w);
int fr_weights_tensor(const fr_weights_t* w, size_t index, fr_tensor_t* out);
const char* fr_weights_digest(const fr_weights_t* w);
void fr_weights_release(fr_weights_t* w);

/* Snapshots without the weights (docs/snapshot.md): release the pool's mapping keeping its address range
 * reserved, and map the daemon's entry at the same address again (fastrestart::Weights::release_mapping
 * and reattach). FR_OK, or FR_EFAIL with the reason in err. */
int fr_weights_release_mapping(fr_weights_t* w, char* err, size_t errlen);
int fr_weights_reattach(fr_weights_t* w, char* err, size_t errlen);

/* The prepare/resume exchange (fastrestart::SnapshotAgent). The hooks return 0, or non-zero with a message
 * written to err; they run on the agent's thread. socket_path NULL: $FASTRESTART_SNAPSHOT_SOCKET; when that
 * is unset too, returns FR_MISS and *out is NULL (the engine is not asked to take part). */
typedef struct fr_snapshot_agent fr_snapshot_agent_t;
typedef int (*fr_snapshot_hook_t)(void* user, char* err, size_t errlen);
int fr_snapshot_agent_start(fr_weights_t* const* weights, size_t nweights, fr_snapshot_hook_t quiesce,
                            fr_snapshot_hook_t resume, void* user, const char* socket_path,
                            fr_snapshot_agent_t** out, char* err, size_t errlen);
void fr_snapshot_agent_stop(fr_snapshot_agent_t* agent);

/* Publishes under `key`, identified before the tensors' bytes were read from its files. */
int fr_publish_key(const fr_key_t* key, const fr_tensor_t* tensors, size_t ntensors, const fr_options_t* options,
                   char* err, size_t errlen);

/* The standby gate (fastrestart/standby.h, docs/standby.md "The gate protocol") at `level` ("pre_gpu" |
 * "warmed"): FR_STANDBY_PASSED (0) at once when this process is not a standby or waits at another level;
 * FR_STANDBY_RELEASED (1) once fastrestartd released it (its fd closed, FASTRESTART_STANDBY_FD and
 * FASTRESTART_STANDBY_LEVEL unset); FR_EINVAL (a bad level, or a bad variable: err names it) or FR_EFAIL
 * (a malformed reply: err names it; an I/O failure). Told to exit, or fastrestartd gone: _exit(0), never
 * returns. fr_is_standby(): 1 when FASTRESTART_STANDBY_FD is set (and not empty), else 0. */
enum { FR_STANDBY_PASSED = 0, FR_STANDBY_RELEASED = 1 };
int fr_standby_gate(const char* level, char* err, size_t errlen);
int fr_is_standby(void);

/* The listening socket handed down by the supervisor (fastrestart/listen_socket.h, docs/listen-socket.md):
 * FR_OK with *fd the socket (close-on-exec, the caller's to close); FR_MISS (1) with *fd = -1 when none was
 * passed to this process; FR_EINVAL (a bad LISTEN_* variable or descriptor: err names it) or FR_EFAIL.
 * `name`: the LISTEN_FDNAMES entry to take; NULL means "fastrestart-engine", "" takes the first. The
 * LISTEN_* variables are removed from the environment; call once, before accepting on nothing until the
 * engine can serve. */
int fr_listen_socket(const char* name, int* fd, char* err, size_t errlen);
/* Both the listening socket ("fastrestart-engine") and the engine's private endpoint ("fastrestart-probe",
 * passed with readiness.endpoint = "private"; docs/listen-socket.md) in one call: FR_OK with *serve_fd set
 * and *probe_fd the endpoint or -1; FR_MISS with both -1 when no listening socket was passed; errors as
 * fr_listen_socket. Serve the same routes on both; accept on the endpoint no later than on the socket. */
int fr_listen_sockets(int* serve_fd, int* probe_fd, char* err, size_t errlen);

/* KV arenas (fastrestart/arena.h, docs/engine_loader.md "KV arenas"): reserve the range with its placeholder,
 * then swap the leased arena in at the same address. fr_arena_swap_in: FR_OK (created/waited_s, when not
 * NULL, receive ArenaLease's fields), FR_EINVAL or FR_EFAIL with the reason in err (a wait that ran out names
 * wait_s and the holder's pid). fr_arena_release unmaps and frees the range; the lease ends with the process. */
typedef struct fr_arena fr_arena_t;
typedef struct {
  size_t struct_size;
  const char* name;       /* NULL: "kv" */
  uint64_t bytes;
  double wait_s;          /* for the previous holder's exit; default 30 */
  double connect_timeout_s;
  const char* socket_dir; /* NULL: $FASTRESTART_SOCKET_DIR, else the default */
  const char* device;     /* NULL: "host" */
} fr_arena_options_t;
void fr_arena_options_init(fr_arena_options_t* o);
int fr_arena_reserve(const fr_arena_options_t* options, fr_arena_t** out, char* err, size_t errlen);
int fr_arena_swap_in(fr_arena_t* a, int* created, double* waited_s, char* err, size_t errlen);
void* fr_arena_base(const fr_arena_t* a);
uint64_t fr_arena_bytes(const fr_arena_t* a);
int fr_arena_leased(const fr_arena_t* a);
void fr_arena_release(fr_arena_t* a);
/* The engine's arena line (fastrestart::arena_line, arena_fallback_line; docs/supervisor.md, "The engine's
 * arena line"): the line an engine prints to tell fastrestartd what came of its KV arena, without a newline.
 * Both write at most outlen - 1 bytes and a NUL into out (when outlen > 0) and return the whole line's length,
 * as snprintf does (a larger buffer takes it whole). fr_arena_line: the leased line of a's last swap-in; 0 and
 * an empty string when a is NULL or was never leased. fr_arena_fallback_line: the fallback line for reason
 * (NULL: empty). */
size_t fr_arena_line(const fr_arena_t* a, char* out, size_t outlen);
size_t fr_arena_fallback_line(const char* reason, char* out, size_t outlen);

/* fr_snapshot_agent_start with KV arenas as well (docs/snapshot.md, "Snapshots without the KV cache"): a
 * prepare unmaps them after the weights, keeping their ranges; a resume leases and maps them again at the
 * same addresses before the resume hook. The agent keeps each arena's range reserved until it is stopped,
 * also after fr_arena_release. */
int fr_snapshot_agent_start_arenas(fr_weights_t* const* weights, size_t nweights, fr_arena_t* const* arenas,
                                   size_t narenas, fr_snapshot_hook_t quiesce, fr_snapshot_hook_t resume, void* user,
                                   const char* socket_path, fr_snapshot_agent_t** out, char* err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif
