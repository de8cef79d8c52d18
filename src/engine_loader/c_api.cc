// The C ABI over the C++ API (fastrestart/engine_loader_c.h). No exception crosses it.
#include <cstring>

#include "fastrestart/arena.h"
#include "fastrestart/engine_loader.h"
#include "fastrestart/engine_loader_c.h"
#include "fastrestart/listen_socket.h"
#include "fastrestart/standby.h"

struct fr_weights {
  std::shared_ptr<fastrestart::Weights> w;
  std::string digest;
};

struct fr_snapshot_agent {
  std::unique_ptr<fastrestart::SnapshotAgent> a;
};

struct fr_arena {
  std::shared_ptr<fastrestart::Arena> a;  // shared with a snapshot agent that reports it
};

struct fr_key {
  fastrestart::IdentifiedKey key;
  std::string fingerprint;
};

namespace {

void set_err(char* err, size_t n, const std::string& msg) {
  if (!err || n == 0) return;
  size_t k = std::min(n - 1, msg.size());
  std::memcpy(err, msg.data(), k);
  err[k] = '\0';
}

int code_of(const fastrestart::Error& e) { return e.code == fastrestart::Errc::kInvalidArgument ? FR_EINVAL : FR_EFAIL; }

bool make_key(const char* const* files, size_t nfiles, const char* const* config, size_t nconfig,
              fastrestart::Key* key, char* err, size_t errlen) {
  if (!files && nfiles) return set_err(err, errlen, "files is NULL"), false;
  for (size_t i = 0; i < nfiles; ++i) key->files.emplace_back(files[i] ? files[i] : "");
  for (size_t i = 0; i < nconfig; ++i) {
    const char* kv = config ? config[i] : nullptr;
    const char* eq = kv ? std::strchr(kv, '=') : nullptr;
    if (!eq || eq == kv) return set_err(err, errlen, std::string("config entry is not key=value: ") + (kv ? kv : "NULL")), false;
    key->config[std::string(kv, eq)] = eq + 1;
  }
  return true;
}

fastrestart::Options make_options(const fr_options_t* o) {
  fastrestart::Options opt;
  if (!o) return opt;
  opt.mode = o->mode == FR_MODE_COPY ? fastrestart::Mode::kCopy : fastrestart::Mode::kZeroCopy;
  opt.fallback = o->fallback != 0;
  opt.connect_timeout_s = o->connect_timeout_s;
  opt.state_timeout_s = o->state_timeout_s;
  opt.verify = o->verify != 0;
  if (o->socket_dir) opt.socket_dir = o->socket_dir;
  if (o->device) opt.device = o->device;
  return opt;
}

// One call on the weights that returns a Status, under the C ABI's error rules (a NULL handle, the
// call's error, or an exception, each as a code and a message in err).
template <class Call>
int weights_status_call(fr_weights_t* w, char* err, size_t errlen, Call call) try {
  if (!w) return set_err(err, errlen, "weights is NULL"), FR_EINVAL;
  auto r = call(*w->w);
  if (!r.ok()) return set_err(err, errlen, r.error().message), code_of(r.error());
  return FR_OK;
} catch (const std::exception& e) {
  return set_err(err, errlen, e.what()), FR_EFAIL;
}

}  // namespace

extern "C" {

void fr_options_init(fr_options_t* o) {
  fastrestart::Options d;
  *o = fr_options_t{sizeof(fr_options_t), FR_MODE_ZERO_COPY, 1, d.connect_timeout_s, d.state_timeout_s, 0, nullptr, nullptr};
}

int fr_key_identify(const char* const* files, size_t nfiles, const char* const* config, size_t nconfig,
                    fr_key_t** out, char* err, size_t errlen) try {
  if (!out) return set_err(err, errlen, "out is NULL"), FR_EINVAL;
  *out = nullptr;
  fastrestart::Key key;
  if (!make_key(files, nfiles, config, nconfig, &key, err, errlen)) return FR_EINVAL;
  auto k = fastrestart::identify(key);
  if (!k.ok()) return set_err(err, errlen, k.error().message), code_of(k.error());
  *out = new fr_key{*k, k->fingerprint()};
  return FR_OK;
} catch (const std::exception& e) {
  return set_err(err, errlen, e.what()), FR_EFAIL;
}

int fr_key_identify_fds(const char* const* files, const int* fds, size_t nfiles, const char* const* config,
                        size_t nconfig, fr_key_t** out, char* err, size_t errlen) try {
  if (!out) return set_err(err, errlen, "out is NULL"), FR_EINVAL;
  *out = nullptr;
  if (nfiles > 0 && !fds) return set_err(err, errlen, "fds is NULL"), FR_EINVAL;
  fastrestart::Key key;
  if (!make_key(files, nfiles, config, nconfig, &key, err, errlen)) return FR_EINVAL;
  auto k = fastrestart::identify_fds(key, std::vector<int>(fds, fds + nfiles));
  if (!k.ok()) return set_err(err, errlen, k.error().message), code_of(k.error());
  *out = new fr_key{*k, k->fingerprint()};
  return FR_OK;
} catch (const std::exception& e) {
  return set_err(err, errlen, e.what()), FR_EFAIL;
}

const char* fr_key_fingerprint(const fr_key_t* key) { return key ? key->fingerprint.c_str() : ""; }

void fr_key_release(fr_key_t* key) { delete key; }

int fr_attach_key(const fr_key_t* key, const fr_options_t* options, fr_weights_t** out, char* err, size_t errlen) try {
  if (!out) return set_err(err, errlen, "out is NULL"), FR_EINVAL;
  *out = nullptr;
  if (!key) return set_err(err, errlen, "key is NULL"), FR_EINVAL;
  auto r = fastrestart::attach(key->key, make_options(options));
  if (!r.ok()) return set_err(err, errlen, r.error().message), code_of(r.error());
  if (!r->hit) return set_err(err, errlen, r->reason), FR_MISS;
  *out = new fr_weights{r->weights, r->weights->digest()};
  return FR_OK;
} catch (const std::exception& e) {
  return set_err(err, errlen, e.what()), FR_EFAIL;
}

int fr_attach(const char* const* files, size_t nfiles, const char* const* config, size_t nconfig,
              const fr_options_t* options, fr_weights_t** out, char* err, size_t errlen) {
  if (!out) return set_err(err, errlen, "out is NULL"), FR_EINVAL;
  *out = nullptr;
  fr_key_t* key = nullptr;
  int rc = fr_key_identify(files, nfiles, config, nconfig, &key, err, errlen);
  if (rc != FR_OK) return rc;
  rc = fr_attach_key(key, options, out, err, errlen);
  fr_key_release(key);
  return rc;
}

size_t fr_weights_count(const fr_weights_t* w) { return w ? w->w->tensors().size() : 0; }

int fr_weights_tensor(const fr_weights_t* w, size_t i, fr_tensor_t* out) {
  if (!w || !out || i >= w->w->tensors().size()) return FR_EINVAL;
  const auto& t = w->w->tensors()[i];
  *out = fr_tensor_t{t.name.c_str(), t.dtype.c_str(), static_cast<int>(t.shape.size()), t.shape.data(),
                     t.strides.data(), t.data, t.nbytes};
  return FR_OK;
}

const char* fr_weights_digest(const fr_weights_t* w) { return w ? w->digest.c_str() : ""; }

void fr_weights_release(fr_weights_t* w) { delete w; }

int fr_weights_release_mapping(fr_weights_t* w, char* err, size_t errlen) {
  return weights_status_call(w, err, errlen, [](fastrestart::Weights& weights) { return weights.release_mapping(); });
}

int fr_weights_reattach(fr_weights_t* w, char* err, size_t errlen) {
  return weights_status_call(w, err, errlen, [](fastrestart::Weights& weights) { return weights.reattach(); });
}

int fr_snapshot_agent_start(fr_weights_t* const* weights, size_t n, fr_snapshot_hook_t quiesce, fr_snapshot_hook_t resume,
                            void* user, const char* socket_path, fr_snapshot_agent_t** out, char* err, size_t errlen) {
  return fr_snapshot_agent_start_arenas(weights, n, nullptr, 0, quiesce, resume, user, socket_path, out, err, errlen);
}

int fr_snapshot_agent_start_arenas(fr_weights_t* const* weights, size_t n, fr_arena_t* const* arenas, size_t narenas,
                                   fr_snapshot_hook_t quiesce, fr_snapshot_hook_t resume, void* user,
                                   const char* socket_path, fr_snapshot_agent_t** out, char* err, size_t errlen) try {
  if (!out) return set_err(err, errlen, "out is NULL"), FR_EINVAL;
  *out = nullptr;
  if (!weights && n) return set_err(err, errlen, "weights is NULL"), FR_EINVAL;
  std::vector<std::shared_ptr<fastrestart::Weights>> ws;
  for (size_t i = 0; i < n; ++i) {
    if (!weights[i]) return set_err(err, errlen, "weights[" + std::to_string(i) + "] is NULL"), FR_EINVAL;
    ws.push_back(weights[i]->w);
  }
  if (!arenas && narenas) return set_err(err, errlen, "arenas is NULL"), FR_EINVAL;
  std::vector<std::shared_ptr<fastrestart::Arena>> as;
  for (size_t i = 0; i < narenas; ++i) {
    if (!arenas[i]) return set_err(err, errlen, "arenas[" + std::to_string(i) + "] is NULL"), FR_EINVAL;
    as.push_back(arenas[i]->a);
  }
  auto hook = [user](fr_snapshot_hook_t f, const char* what) -> std::function<fastrestart::Status()> {
    if (!f) return {};
    return [f, user, what]() -> fastrestart::Status {
      char msg[512] = {0};
      if (f(user, msg, sizeof msg) == 0) return {};
      return fastrestart::Error{fastrestart::Errc::kInternal, std::string(what) + " hook: " + (msg[0] ? msg : "failed")};
    };
  };
  auto r = fastrestart::SnapshotAgent::start(std::move(ws), {hook(quiesce, "quiesce"), hook(resume, "resume")},
                                             socket_path ? socket_path : "", std::move(as));
  if (!r.ok()) return set_err(err, errlen, r.error().message), code_of(r.error());
  if (!*r) return set_err(err, errlen, "FASTRESTART_SNAPSHOT_SOCKET is not set"), FR_MISS;
  *out = new fr_snapshot_agent{std::move(*r)};
  return FR_OK;
} catch (const std::exception& e) {
  return set_err(err, errlen, e.what()), FR_EFAIL;
}

void fr_snapshot_agent_stop(fr_snapshot_agent_t* a) { delete a; }

int fr_publish_key(const fr_key_t* key, const fr_tensor_t* tensors, size_t ntensors, const fr_options_t* options,
                   char* err, size_t errlen) try {
  if (!key) return set_err(err, errlen, "key is NULL"), FR_EINVAL;
  if (!tensors && ntensors) return set_err(err, errlen, "tensors is NULL"), FR_EINVAL;
  std::vector<fastrestart::PublishTensor> ts;
  for (size_t i = 0; i < ntensors; ++i) {
    const auto& t = tensors[i];
    if (!t.name || !t.dtype || t.ndim < 0 || (t.ndim > 0 && !t.shape)) return set_err(err, errlen, "tensor " + std::to_string(i) + " is incomplete"), FR_EINVAL;
    ts.push_back({t.name, t.dtype, std::vector<int64_t>(t.shape, t.shape + t.ndim), t.data});
  }
  auto r = fastrestart::publish(key->key, ts, make_options(options));
  if (!r.ok()) return set_err(err, errlen, r.error().message), code_of(r.error());
  return FR_OK;
} catch (const std::exception& e) {
  return set_err(err, errlen, e.what()), FR_EFAIL;
}

int fr_standby_gate(const char* level, char* err, size_t errlen) try {
  if (!level) return set_err(err, errlen, "level is NULL"), FR_EINVAL;
  auto r = fastrestart::standby_gate(level);
  if (!r.ok()) return set_err(err, errlen, r.error().message), code_of(r.error());
  set_err(err, errlen, "");
  return *r == fastrestart::GateResult::kReleased ? FR_STANDBY_RELEASED : FR_STANDBY_PASSED;
} catch (const std::exception& e) {
  return set_err(err, errlen, e.what()), FR_EFAIL;
}

int fr_is_standby(void) { return fastrestart::is_standby() ? 1 : 0; }

int fr_listen_socket(const char* name, int* fd, char* err, size_t errlen) try {
  if (!fd) return set_err(err, errlen, "fd is NULL"), FR_EINVAL;
  *fd = -1;
  auto r = fastrestart::inherited_listen_socket(name ? std::string_view(name) : std::string_view(fastrestart::kListenFdName));
  if (!r.ok()) return set_err(err, errlen, r.error().message), code_of(r.error());
  *fd = *r;
  set_err(err, errlen, *r < 0 ? "no listening socket was passed to this process" : "");
  return *r < 0 ? FR_MISS : FR_OK;
} catch (const std::exception& e) {
  return set_err(err, errlen, e.what()), FR_EFAIL;
}

int fr_listen_sockets(int* serve_fd, int* probe_fd, char* err, size_t errlen) try {
  if (!serve_fd || !probe_fd) return set_err(err, errlen, "serve_fd or probe_fd is NULL"), FR_EINVAL;
  *serve_fd = *probe_fd = -1;
  auto r = fastrestart::inherited_listen_sockets();
  if (!r.ok()) return set_err(err, errlen, r.error().message), code_of(r.error());
  *serve_fd = r->serve;
  *probe_fd = r->probe;
  set_err(err, errlen, r->serve < 0 ? "no listening socket was passed to this process" : "");
  return r->serve < 0 ? FR_MISS : FR_OK;
} catch (const std::exception& e) {
  return set_err(err, errlen, e.what()), FR_EFAIL;
}

void fr_arena_options_init(fr_arena_options_t* o) {
  if (!o) return;
  const fastrestart::ArenaOptions d;
  *o = fr_arena_options_t{};
  o->struct_size = sizeof *o;
  o->wait_s = d.wait_s;
  o->connect_timeout_s = d.connect_timeout_s;
}

int fr_arena_reserve(const fr_arena_options_t* options, fr_arena_t** out, char* err, size_t errlen) {
  if (!options || !out || options->struct_size < sizeof(fr_arena_options_t))
    return set_err(err, errlen, "options or out is NULL, or options not set by fr_arena_options_init"), FR_EINVAL;
  fastrestart::ArenaOptions o;
  if (options->name) o.name = options->name;
  o.bytes = options->bytes;
  o.wait_s = options->wait_s;
  o.connect_timeout_s = options->connect_timeout_s;
  if (options->socket_dir) o.socket_dir = options->socket_dir;
  if (options->device) o.device = options->device;
  try {
    auto a = fastrestart::reserve_arena(o);
    if (!a.ok()) return set_err(err, errlen, a.error().message), code_of(a.error());
    *out = new fr_arena{std::move(*a)};
    return FR_OK;
  } catch (const std::exception& e) {
    return set_err(err, errlen, e.what()), FR_EFAIL;
  }
}

int fr_arena_swap_in(fr_arena_t* a, int* created, double* waited_s, char* err, size_t errlen) {
  if (!a) return set_err(err, errlen, "arena is NULL"), FR_EINVAL;
  try {
    auto l = a->a->swap_in();
    if (!l.ok()) return set_err(err, errlen, l.error().message), code_of(l.error());
    if (created) *created = l->created ? 1 : 0;
    if (waited_s) *waited_s = l->waited_s;
    return FR_OK;
  } catch (const std::exception& e) {
    return set_err(err, errlen, e.what()), FR_EFAIL;
  }
}

void* fr_arena_base(const fr_arena_t* a) { return a ? a->a->base() : nullptr; }
uint64_t fr_arena_bytes(const fr_arena_t* a) { return a ? a->a->bytes() : 0; }
int fr_arena_leased(const fr_arena_t* a) { return a && a->a->leased() ? 1 : 0; }
void fr_arena_release(fr_arena_t* a) { delete a; }

size_t fr_arena_line(const fr_arena_t* a, char* out, size_t outlen) {
  try {
    const std::string line = a ? fastrestart::arena_line(*a->a) : std::string();
    set_err(out, outlen, line);
    return line.size();
  } catch (const std::exception&) {  // out of memory: no line
    set_err(out, outlen, "");
    return 0;
  }
}

size_t fr_arena_fallback_line(const char* reason, char* out, size_t outlen) {
  try {
    const std::string line = fastrestart::arena_fallback_line(reason ? reason : "");
    set_err(out, outlen, line);
    return line.size();
  } catch (const std::exception&) {
    set_err(out, outlen, "");
    return 0;
  }
}

}  // extern "C"
