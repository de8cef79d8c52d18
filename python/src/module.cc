// fastrestart._fastrestart: the Python binding of engine_loader (docs/python.md).
// attach() returns tensors that export themselves through DLPack (no copy); each exported capsule holds a
// shared_ptr to the Weights, so the mapping lives as long as any consumer's array does, also after the
// AttachResult and the daemon are gone. publish() takes buffer-protocol objects (host) or DLPack producers.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dlpack.h"
#include "fastrestart/arena.h"
#include "fastrestart/engine_loader.h"
#include "fastrestart/standby.h"

namespace py = pybind11;
using namespace pybind11::literals;  // "key"_a = value: the dicts below, built in their keys' order

namespace {

// ---- errors ----

[[noreturn]] void raise_error(const fastrestart::Error& e) {
  if (e.code == fastrestart::Errc::kInvalidArgument) throw py::value_error(e.message);
  if (e.code == fastrestart::Errc::kTimeout) {  // TimeoutError: an arena lease that waited wait_s in vain
    PyErr_SetString(PyExc_TimeoutError, e.to_string().c_str());
    throw py::error_already_set();
  }
  throw std::runtime_error(e.to_string());
}

// f() (a library call returning a Result) run without the GIL, so that other Python threads go on while it
// waits on a daemon or a lock; its value, or its error raised (raise_error) once the GIL is held again.
template <class F>
auto without_gil(F&& f) {
  std::optional<decltype(f())> r;
  {
    py::gil_scoped_release nogil;
    r.emplace(f());
  }
  if (!r->ok()) raise_error(r->error());
  return std::move(r->value());
}

// ---- dtypes ----

struct DTypeInfo {
  const char* name;      // safetensors
  uint8_t code;          // DLPack
  uint8_t bits;
  const char* numpy;     // nullptr: numpy has no such type
};

constexpr DTypeInfo kDTypes[] = {
    {"BOOL", kDLBool, 8, "bool"},      {"U8", kDLUInt, 8, "uint8"},       {"I8", kDLInt, 8, "int8"},
    {"U16", kDLUInt, 16, "uint16"},    {"I16", kDLInt, 16, "int16"},      {"F16", kDLFloat, 16, "float16"},
    {"BF16", kDLBfloat, 16, nullptr},  {"U32", kDLUInt, 32, "uint32"},    {"I32", kDLInt, 32, "int32"},
    {"F32", kDLFloat, 32, "float32"},  {"U64", kDLUInt, 64, "uint64"},    {"I64", kDLInt, 64, "int64"},
    {"F64", kDLFloat, 64, "float64"},
};

const DTypeInfo* dtype_by_name(const std::string& name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

const DTypeInfo* dtype_by_dl(DLDataType t) {
  if (t.lanes != 1) return nullptr;
  for (const auto& d : kDTypes)
    if (d.code == t.code && d.bits == t.bits) return &d;
  if (t.code == kDLUInt && t.bits == 1) return nullptr;
  return nullptr;
}

// A buffer-protocol format character (struct module syntax) to a safetensors dtype name.
std::optional<std::string> dtype_from_format(std::string fmt, py::ssize_t itemsize) {
  if (!fmt.empty() && (fmt[0] == '@' || fmt[0] == '=' || fmt[0] == '<')) fmt = fmt.substr(1);
  if (fmt.size() != 1) return std::nullopt;
  const char c = fmt[0];
  auto sized = [&](const char* prefix) -> std::optional<std::string> {
    if (itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8) return std::nullopt;
    return std::string(prefix) + std::to_string(itemsize * 8);
  };
  switch (c) {
    case '?': return "BOOL";
    case 'b': return "I8";
    case 'B': return "U8";
    case 'h': case 'i': case 'l': case 'q': case 'n': return sized("I");
    case 'H': case 'I': case 'L': case 'Q': case 'N': return sized("U");
    case 'e': return "F16";
    case 'f': return "F32";
    case 'd': return "F64";
    default: return std::nullopt;
  }
}

// ---- exported tensors ----

struct Device {
  DLDeviceType type = kDLCPU;
  int32_t id = 0;
};

Device parse_device(const std::string& device) {
  if (device == "host") return {kDLCPU, 0};
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 && device.size() < 12) {
    int32_t id = 0;
    for (char ch : device.substr(5)) {
      if (ch < '0' || ch > '9') throw py::value_error("device: '" + device + "': expected host or cuda:<ordinal>");
      id = id * 10 + (ch - '0');
    }
    return {kDLCUDA, id};
  }
  throw py::value_error("device: '" + device + "': expected host or cuda:<ordinal>");
}

// What a DLPack capsule owns: what keeps the memory mapped (the Weights, or an Arena) and the shape/strides
// arrays it points into.
struct ExportCtx {
  std::shared_ptr<const void> owner;
  std::vector<int64_t> shape, strides;
};

// The two DLPack capsule kinds differ only in their struct and names (DLPack: a consumer renames the
// capsule to "used_..." once it owns the tensor; an unconsumed capsule frees it on destruction).
template <typename M>
struct CapsuleNames;
template <>
struct CapsuleNames<DLManagedTensor> {
  static constexpr const char* name = "dltensor";
  static constexpr const char* used = "used_dltensor";
};
template <>
struct CapsuleNames<DLManagedTensorVersioned> {
  static constexpr const char* name = "dltensor_versioned";
  static constexpr const char* used = "used_dltensor_versioned";
};

template <typename M>
py::object to_capsule(M* m) {
  m->deleter = [](M* self) {
    delete static_cast<ExportCtx*>(self->manager_ctx);
    delete self;
  };
  PyObject* cap = PyCapsule_New(m, CapsuleNames<M>::name, [](PyObject* c) {
    if (PyCapsule_IsValid(c, CapsuleNames<M>::used)) return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    auto* p = static_cast<M*>(PyCapsule_GetPointer(c, CapsuleNames<M>::name));
    if (p && p->deleter) p->deleter(p);
    if (!p) PyErr_WriteUnraisable(c);
    PyErr_Restore(type, value, tb);
  });
  if (!cap) {
    m->deleter(m);
    throw py::error_already_set();
  }
  return py::reinterpret_steal<py::object>(cap);
}

// A DLPack capsule of `dl` (whose shape/strides point into ctx): versioned (DLPack 1.0) when the consumer
// asks for max_version >= 1.
py::object export_capsule(const DLTensor& dl, std::unique_ptr<ExportCtx> ctx, const py::object& max_version, bool readonly) {
  bool versioned = false;
  if (!max_version.is_none()) versioned = max_version.cast<std::pair<int, int>>().first >= 1;
  if (versioned) {
    auto* m = new DLManagedTensorVersioned{};
    m->version = DLPackVersion{1, 0};
    m->dl_tensor = dl;
    m->flags = readonly ? kDLPackFlagReadOnly : 0;
    m->manager_ctx = ctx.release();
    return to_capsule(m);
  }
  auto* m = new DLManagedTensor{};
  m->dl_tensor = dl;
  m->manager_ctx = ctx.release();
  return to_capsule(m);
}

class PyTensor {
 public:
  PyTensor(std::shared_ptr<fastrestart::Weights> w, const fastrestart::Tensor* t, Device dev)
      : m_weights(std::move(w)), m_t(t), m_dev(dev) {}

  const fastrestart::Tensor& t() const { return *m_t; }
  bool readonly() const { return m_weights->mode() == fastrestart::Mode::kZeroCopy; }
  Device device() const { return m_dev; }

  DLTensor fill(ExportCtx* ctx) const {
    const DTypeInfo* d = dtype_by_name(m_t->dtype);
    if (!d) throw py::buffer_error("tensor '" + m_t->name + "': dtype " + m_t->dtype + " has no DLPack type");
    ctx->owner = m_weights;
    ctx->shape = m_t->shape;
    ctx->strides = m_t->strides;
    if (ctx->strides.size() != ctx->shape.size()) {  // row-major contiguous, in elements
      ctx->strides.assign(ctx->shape.size(), 1);
      for (size_t i = ctx->shape.size(); i-- > 1;) ctx->strides[i - 1] = ctx->strides[i] * ctx->shape[i];
    }
    DLTensor dl{};
    dl.data = m_t->data;
    dl.device = DLDevice{m_dev.type, m_dev.id};
    dl.ndim = static_cast<int32_t>(ctx->shape.size());
    dl.dtype = DLDataType{d->code, d->bits, 1};
    dl.shape = ctx->shape.empty() ? nullptr : ctx->shape.data();
    dl.strides = ctx->strides.empty() ? nullptr : ctx->strides.data();
    dl.byte_offset = 0;
    return dl;
  }

  py::object dlpack(const py::object& stream, const py::object& max_version, const py::object& dl_device,
                    const py::object& copy) const {
    if (!copy.is_none() && copy.cast<bool>())
      throw py::buffer_error("__dlpack__: copy=True is not supported (the point is not to copy)");
    if (!dl_device.is_none()) {
      auto t = dl_device.cast<std::pair<int, int>>();
      if (t.first != m_dev.type || t.second != m_dev.id) throw py::buffer_error("__dlpack__: dl_device differs from the tensor's device");
    }
    if (m_dev.type == kDLCPU && !stream.is_none())
      throw py::buffer_error("__dlpack__: stream must be None for a host tensor");
    // The weights are immutable and complete when attach returns: no stream ordering is needed.
    auto ctx = std::make_unique<ExportCtx>();
    DLTensor dl = fill(ctx.get());
    return export_capsule(dl, std::move(ctx), max_version, readonly());
  }

  // A numpy view of a host tensor (base: this object); read-only in zero_copy mode.
  py::array numpy(py::object self) const {
    if (m_dev.type != kDLCPU) throw py::type_error("numpy(): tensor '" + m_t->name + "' lives on the GPU");
    const DTypeInfo* d = dtype_by_name(m_t->dtype);
    if (!d || !d->numpy) throw py::type_error("numpy(): numpy has no dtype for " + m_t->dtype + " (use a DLPack consumer such as torch)");
    std::vector<py::ssize_t> shape(m_t->shape.begin(), m_t->shape.end());
    std::vector<py::ssize_t> strides(shape.size());
    const auto item = static_cast<py::ssize_t>(m_t->itemsize ? m_t->itemsize : d->bits / 8);
    if (m_t->strides.size() == shape.size()) {
      for (size_t i = 0; i < shape.size(); ++i) strides[i] = static_cast<py::ssize_t>(m_t->strides[i]) * item;
    } else if (!shape.empty()) {
      strides.back() = item;
      for (size_t i = shape.size() - 1; i-- > 0;) strides[i] = strides[i + 1] * shape[i + 1];
    }
    py::array a(py::dtype(d->numpy), shape, strides, m_t->data, self);
    if (readonly()) a.attr("setflags")(py::arg("write") = false);
    return a;
  }

 private:
  std::shared_ptr<fastrestart::Weights> m_weights;
  const fastrestart::Tensor* m_t;
  Device m_dev;
};

// A key whose files were identified (stat(2)) at one moment: the one a publish must go under.
struct PyKey {
  fastrestart::IdentifiedKey key;
};

struct PyAttachResult {
  bool hit = false;
  PyKey key;
  std::string reason;
  std::vector<std::string> differs;
  py::dict timings;
  std::string digest, fingerprint, mode, device, daemon_gpu_uuid;
  uint64_t pool_bytes = 0;
  py::dict tensors;
  std::shared_ptr<fastrestart::Weights> weights;  // on a hit: what release_mapping()/reattach() act on
};

// ---- snapshots without the weights (docs/snapshot.md) ----

py::dict mapping_dict(const fastrestart::MappingInfo& i) {
  return py::dict("fingerprint"_a = i.fingerprint, "digest"_a = i.digest, "device"_a = i.device,
                  "daemon_socket"_a = i.daemon_socket, "base"_a = i.base, "bytes"_a = i.bytes, "mapped"_a = i.mapped,
                  "seconds"_a = i.seconds);
}

py::dict weights_call(const PyAttachResult& r, bool release) {
  if (!r.weights) throw py::value_error("a miss holds no weights");
  return mapping_dict(without_gil([&] { return release ? r.weights->release_mapping() : r.weights->reattach(); }));
}

// A Python callable run from the agent's thread: takes the GIL; an exception becomes the hook's error.
// Held through a shared_ptr whose deleter takes the GIL, since the agent may drop it from any thread.
std::function<fastrestart::Status()> py_hook(const py::object& f, const char* what) {
  if (f.is_none()) return {};
  std::shared_ptr<py::object> fn(new py::object(f), [](py::object* o) {
    py::gil_scoped_acquire gil;
    delete o;
  });
  return [fn, what]() -> fastrestart::Status {
    py::gil_scoped_acquire gil;
    try {
      (*fn)();
      return {};
    } catch (py::error_already_set& e) {
      return fastrestart::Error{fastrestart::Errc::kInternal, std::string(what) + ": " + e.what()};
    }
  };
}

struct PySnapshotAgent {
  std::unique_ptr<fastrestart::SnapshotAgent> agent;
  void stop() {
    py::gil_scoped_release nogil;  // the thread may be waiting for the GIL in a hook
    agent.reset();
  }
  ~PySnapshotAgent() {
    if (agent) stop();
  }
};

// The arenas of snapshot_agent(arenas=...): the Arena objects' C++ arenas (defined with them, below).
std::vector<std::shared_ptr<fastrestart::Arena>> arenas_of(const py::list& arenas);

std::optional<std::shared_ptr<PySnapshotAgent>> snapshot_agent(const std::vector<PyAttachResult*>& results,
                                                                const py::object& quiesce, const py::object& resume,
                                                                const std::string& socket_path, const py::list& arenas) {
  std::vector<std::shared_ptr<fastrestart::Weights>> ws;
  for (const auto* r : results)
    if (r && r->weights) ws.push_back(r->weights);
  auto a = fastrestart::SnapshotAgent::start(std::move(ws), {py_hook(quiesce, "quiesce"), py_hook(resume, "resume")}, socket_path,
                                             arenas_of(arenas));
  if (!a.ok()) raise_error(a.error());
  if (!*a) return std::nullopt;
  auto out = std::make_shared<PySnapshotAgent>();
  out->agent = std::move(*a);
  return out;
}

PyKey identify(const std::vector<std::string>& files, const std::map<std::string, std::string>& config,
               const std::optional<std::vector<int>>& fds) {
  if (files.empty()) throw py::value_error("files: at least one checkpoint file is required");
  if (fds && fds->size() != files.size())
    throw py::value_error("fds: " + std::to_string(fds->size()) + " descriptors for " + std::to_string(files.size()) + " files");
  return PyKey{without_gil([&] {
    fastrestart::Key key{files, config};
    return fds ? fastrestart::identify_fds(key, *fds) : fastrestart::identify(key);
  })};
}

py::list key_files(const PyKey& k) {
  py::list out;
  for (const auto& f : k.key.files) {
    out.append(py::dict("path"_a = f.path, "dev"_a = f.dev, "ino"_a = f.ino, "size"_a = f.size, "mtime_ns"_a = f.mtime_ns,
                        "ctime_ns"_a = f.ctime_ns));
  }
  return out;
}

void check_timeout(const char* name, double v) {
  if (!(v >= 0 && v <= 86400)) throw py::value_error(std::string(name) + ": must be within 0..86400 seconds");
}

PyAttachResult attach(const PyKey& key, const std::string& mode, bool fallback, double connect_timeout_s, double state_timeout_s,
                      bool verify, const std::string& socket_dir, const std::string& device) {
  fastrestart::Options o;
  if (mode == "zero_copy") {
    o.mode = fastrestart::Mode::kZeroCopy;
  } else if (mode == "copy") {
    o.mode = fastrestart::Mode::kCopy;
  } else {
    throw py::value_error("mode: '" + mode + "': expected zero_copy or copy");
  }
  check_timeout("connect_timeout_s", connect_timeout_s);
  check_timeout("state_timeout_s", state_timeout_s);
  const Device dev = parse_device(device);
  o.fallback = fallback;
  o.connect_timeout_s = connect_timeout_s;
  o.state_timeout_s = state_timeout_s;
  o.verify = verify;
  o.socket_dir = socket_dir;
  o.device = device;

  fastrestart::AttachResult a = without_gil([&] { return fastrestart::attach(key.key, o); });

  PyAttachResult out;
  out.hit = a.hit;
  out.key = PyKey{a.key};
  out.reason = a.reason;
  out.differs = a.differs;
  out.daemon_gpu_uuid = a.daemon_gpu_uuid;
  out.mode = mode;
  out.device = device;
  out.timings["connect_s"] = a.timings.connect_s;
  out.timings["request_s"] = a.timings.request_s;
  out.timings["map_s"] = a.timings.map_s;
  out.timings["copy_s"] = a.timings.copy_s;
  out.timings["verify_s"] = a.timings.verify_s;
  out.timings["total_s"] = a.timings.total_s;
  if (a.hit && a.weights) {
    out.digest = a.weights->digest();
    out.fingerprint = a.weights->fingerprint();
    out.pool_bytes = a.weights->pool_bytes();
    out.weights = a.weights;
    for (const auto& t : a.weights->tensors())
      out.tensors[py::str(t.name)] = py::cast(PyTensor(a.weights, &t, dev));
  }
  return out;
}

// ---- publish ----

// Keeps a tensor's source alive (and its DLPack capsule consumed) while the library copies from it.
struct Source {
  std::unique_ptr<py::buffer_info> buffer;
  DLManagedTensor* managed = nullptr;
  DLManagedTensorVersioned* managed_v = nullptr;
  Source() = default;
  Source(Source&&) = default;
  ~Source() {
    if (managed && managed->deleter) managed->deleter(managed);
    if (managed_v && managed_v->deleter) managed_v->deleter(managed_v);
  }
};

bool contiguous(const std::vector<int64_t>& shape, const int64_t* strides, int64_t unit) {
  if (!strides) return true;
  int64_t expect = unit;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expect) return false;
    expect *= shape[i];
  }
  return true;
}

void from_dlpack(const std::string& name, const py::handle& obj, const Device& dev, fastrestart::PublishTensor& pt,
                 Source& src) {
  py::object cap = dev.type == kDLCPU ? obj.attr("__dlpack__")() : obj.attr("__dlpack__")(py::arg("stream") = 1);
  PyObject* c = cap.ptr();
  if (!PyCapsule_IsValid(c, "dltensor")) throw py::value_error("tensors['" + name + "']: __dlpack__ did not return a 'dltensor' capsule");
  src.managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(c, "dltensor"));
  PyCapsule_SetName(c, "used_dltensor");
  const DLTensor& dl = src.managed->dl_tensor;
  if (dl.device.device_type != dev.type || (dev.type == kDLCUDA && dl.device.device_id != dev.id))
    throw py::value_error("tensors['" + name + "']: lives on a different device than device=");
  const DTypeInfo* d = dtype_by_dl(dl.dtype);
  if (!d) throw py::value_error("tensors['" + name + "']: unsupported DLPack dtype");
  pt.shape.assign(dl.shape, dl.shape + dl.ndim);
  if (!contiguous(pt.shape, dl.strides, 1)) throw py::value_error("tensors['" + name + "']: not contiguous");
  pt.dtype = d->name;
  pt.data = static_cast<const char*>(dl.data) + dl.byte_offset;
}

py::dict publish(const PyKey& key, const py::dict& tensors, const std::string& socket_dir, const std::string& device,
                 double connect_timeout_s) {
  check_timeout("connect_timeout_s", connect_timeout_s);
  const Device dev = parse_device(device);
  if (tensors.size() == 0) throw py::value_error("tensors: at least one tensor is required");
  fastrestart::Options o;
  o.connect_timeout_s = connect_timeout_s;
  o.socket_dir = socket_dir;
  o.device = device;
  o.fallback = false;

  std::vector<fastrestart::PublishTensor> pts;
  std::vector<Source> sources;
  pts.reserve(tensors.size());
  sources.reserve(tensors.size());
  for (auto item : tensors) {
    if (!py::isinstance<py::str>(item.first)) throw py::value_error("tensors: names must be str");
    const std::string name = item.first.cast<std::string>();
    py::handle obj = item.second;
    fastrestart::PublishTensor pt;
    pt.name = name;
    sources.emplace_back();
    Source& src = sources.back();
    if (dev.type == kDLCPU && PyObject_CheckBuffer(obj.ptr())) {
      src.buffer = std::make_unique<py::buffer_info>(py::reinterpret_borrow<py::buffer>(obj).request());
      const py::buffer_info& b = *src.buffer;
      auto dt = dtype_from_format(b.format, b.itemsize);
      if (!dt) throw py::value_error("tensors['" + name + "']: unsupported element format '" + b.format + "'");
      pt.dtype = *dt;
      pt.shape.assign(b.shape.begin(), b.shape.end());
      std::vector<int64_t> strides(b.strides.begin(), b.strides.end());
      if (!contiguous(pt.shape, strides.data(), b.itemsize)) throw py::value_error("tensors['" + name + "']: not C-contiguous");
      pt.data = b.ptr;
    } else if (py::hasattr(obj, "__dlpack__")) {
      from_dlpack(name, obj, dev, pt, src);
    } else {
      throw py::value_error("tensors['" + name + "']: expected an object with the buffer protocol or __dlpack__");
    }
    if (pt.shape.empty() && !pt.data) throw py::value_error("tensors['" + name + "']: no data");
    pts.push_back(std::move(pt));
  }

  const fastrestart::PublishResult r = without_gil([&] { return fastrestart::publish(key.key, pts, o); });
  py::dict out;
  out["fingerprint"] = r.fingerprint;
  out["digest"] = r.digest;
  out["bytes"] = r.bytes;
  out["seconds"] = r.seconds;
  return out;
}

// ---- KV arenas (fastrestart/arena.h; docs/engine_loader.md, "KV arenas") ----

// The Arena shared by its Python object and every view exported from it: the range stays reserved (and
// mapped) while a consumer's tensor over it lives, also after the PyArena is gone. The mutex serializes
// swap_in() (called without the GIL) against another thread's.
struct ArenaHolder {
  std::shared_ptr<fastrestart::Arena> arena;  // shared with a snapshot agent that unmaps and re-leases it
  Device dev;
  std::mutex mu;
};

// cls.def_readonly(name, member) for each name/member pair, in order.
template <class Class>
void def_readonly_pairs(Class&) {}
template <class Class, class Member, class... Rest>
void def_readonly_pairs(Class& cls, const char* name, Member member, Rest... rest) {
  cls.def_readonly(name, member);
  def_readonly_pairs(cls, rest...);
}

// A holder's pid, or None for none (the loader's -1).
template <class Pid>
py::object pid_or_none(Pid pid) {
  return pid < 0 ? py::object(py::none()) : py::object(py::cast(pid));
}

py::dict lease_dict(const fastrestart::ArenaLease& l) {
  return py::dict("created"_a = l.created, "resized"_a = l.resized, "previous_bytes"_a = l.previous_bytes,
                  "previous_holder_pid"_a = pid_or_none(l.previous_holder_pid), "waited_s"_a = l.waited_s,
                  "leases"_a = l.leases, "generation"_a = l.generation, "seconds"_a = l.seconds);
}

// dtype names: safetensors' (F16, BF16) or numpy/torch's (float16, bfloat16).
const DTypeInfo* arena_dtype(const std::string& name) {
  if (const DTypeInfo* d = dtype_by_name(name)) return d;
  std::string n = name.rfind("torch.", 0) == 0 ? name.substr(6) : name;
  if (n == "bfloat16") return dtype_by_name("BF16");
  for (const auto& d : kDTypes)
    if (d.numpy && n == d.numpy) return &d;
  return nullptr;
}

// [offset, offset + prod(shape) * itemsize) of an arena as a row-major tensor, exported through DLPack.
class PyArenaView {
 public:
  PyArenaView(std::shared_ptr<ArenaHolder> h, uint64_t offset, std::vector<int64_t> shape, const DTypeInfo* d)
      : m_h(std::move(h)), m_offset(offset), m_shape(std::move(shape)), m_dtype(d) {}

  void* data() const { return static_cast<char*>(m_h->arena->base()) + m_offset; }
  uint64_t nbytes() const {
    uint64_t n = m_dtype->bits / 8;
    for (int64_t s : m_shape) n *= static_cast<uint64_t>(s);
    return n;
  }
  const std::vector<int64_t>& shape() const { return m_shape; }
  const DTypeInfo& dtype() const { return *m_dtype; }
  Device device() const { return m_h->dev; }

  py::object dlpack(const py::object& stream, const py::object& max_version, const py::object& dl_device,
                    const py::object& copy) const {
    if (!copy.is_none() && copy.cast<bool>()) throw py::buffer_error("__dlpack__: copy=True is not supported (a view of the arena)");
    if (!dl_device.is_none()) {
      auto t = dl_device.cast<std::pair<int, int>>();
      if (t.first != m_h->dev.type || t.second != m_h->dev.id) throw py::buffer_error("__dlpack__: dl_device differs from the arena's device");
    }
    if (m_h->dev.type == kDLCPU && !stream.is_none()) throw py::buffer_error("__dlpack__: stream must be None for a host arena");
    // No stream ordering: swap_in() synchronizes the context, and what runs over the range is the consumer's.
    auto ctx = std::make_unique<ExportCtx>();
    ctx->owner = m_h;
    ctx->shape = m_shape;
    ctx->strides.assign(m_shape.size(), 1);
    for (size_t i = m_shape.size(); i-- > 1;) ctx->strides[i - 1] = ctx->strides[i] * m_shape[i];
    DLTensor dl{};
    dl.data = data();
    dl.device = DLDevice{m_h->dev.type, m_h->dev.id};
    dl.ndim = static_cast<int32_t>(m_shape.size());
    dl.dtype = DLDataType{m_dtype->code, m_dtype->bits, 1};
    dl.shape = ctx->shape.empty() ? nullptr : ctx->shape.data();
    dl.strides = ctx->strides.empty() ? nullptr : ctx->strides.data();
    return export_capsule(dl, std::move(ctx), max_version, false);
  }

  py::array numpy(py::object self) const {
    if (m_h->dev.type != kDLCPU) throw py::type_error("numpy(): the arena lives on the GPU (use torch.from_dlpack)");
    if (!m_dtype->numpy) throw py::type_error(std::string("numpy(): numpy has no dtype for ") + m_dtype->name);
    std::vector<py::ssize_t> shape(m_shape.begin(), m_shape.end());
    // Strides in bytes from our own item size: pybind11 before 2.12 reads a numpy 2 dtype's item size from
    // numpy 1's descriptor layout, and the strides it derives from it would be wrong (every element at the
    // first one's address).
    std::vector<py::ssize_t> strides(shape.size(), m_dtype->bits / 8);
    for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
    return py::array(py::dtype(m_dtype->numpy), shape, strides, data(), self);
  }

 private:
  std::shared_ptr<ArenaHolder> m_h;
  uint64_t m_offset;
  std::vector<int64_t> m_shape;
  const DTypeInfo* m_dtype;
};

struct PyArena {
  std::shared_ptr<ArenaHolder> h;

  py::dict swap_in() {
    return lease_dict(without_gil([&] {  // the lease may wait up to wait_s for the previous holder's exit
      std::lock_guard lock(h->mu);
      return h->arena->swap_in();
    }));
  }

  PyArenaView view(uint64_t offset, const std::vector<int64_t>& shape, const std::string& dtype) const {
    const DTypeInfo* d = arena_dtype(dtype);
    if (!d) throw py::value_error("dtype: '" + dtype + "': not a dtype name (F16, BF16, F32, float16, bfloat16, ...)");
    uint64_t n = d->bits / 8;
    for (int64_t s : shape) {
      if (s < 0) throw py::value_error("shape: negative dimension " + std::to_string(s));
      if (s != 0 && n > UINT64_MAX / static_cast<uint64_t>(s)) throw py::value_error("shape: too large");
      n *= static_cast<uint64_t>(s);
    }
    const uint64_t size = h->arena->bytes();
    if (offset > size || n > size - offset)
      throw py::value_error("view [" + std::to_string(offset) + ", " + std::to_string(offset) + " + " + std::to_string(n) +
                            ") is outside the arena's " + std::to_string(size) + " bytes");
    if (offset % (d->bits / 8)) throw py::value_error("offset: " + std::to_string(offset) + " is not a multiple of the dtype's size");
    return PyArenaView(h, offset, shape, d);
  }
};

std::vector<std::shared_ptr<fastrestart::Arena>> arenas_of(const py::list& arenas) {
  std::vector<std::shared_ptr<fastrestart::Arena>> out;
  for (const auto& a : arenas) {
    if (!py::isinstance<PyArena>(a)) throw py::type_error("snapshot_agent: arenas must be Arena objects");
    out.push_back(a.cast<const PyArena&>().h->arena);
  }
  return out;
}

fastrestart::ArenaOptions arena_options(const std::string& name, uint64_t bytes, double wait_s, double connect_timeout_s,
                                        const std::string& device, const std::string& socket_dir) {
  check_timeout("wait_s", wait_s);
  check_timeout("connect_timeout_s", connect_timeout_s);
  return {.name = name, .bytes = bytes, .wait_s = wait_s, .connect_timeout_s = connect_timeout_s, .socket_dir = socket_dir,
          .device = device};
}

// host and host:<name> are host memory; cuda:<ordinal> the GPU's.
Device arena_device(const std::string& device) {
  if (device == "host" || device.rfind("host:", 0) == 0) return {kDLCPU, 0};
  return parse_device(device);
}

PyArena reserve_arena(const std::string& name, uint64_t bytes, double wait_s, double connect_timeout_s,
                      const std::string& device, const std::string& socket_dir) {
  const auto o = arena_options(name, bytes, wait_s, connect_timeout_s, device, socket_dir);
  const Device dev = arena_device(device);
  auto arena = without_gil([&] { return fastrestart::reserve_arena(o); });
  auto h = std::make_shared<ArenaHolder>();
  h->arena = std::move(arena);
  h->dev = dev;
  return PyArena{std::move(h)};
}

std::optional<py::dict> find_arena(const std::string& name, double connect_timeout_s, const std::string& device,
                                   const std::string& socket_dir) {
  const auto o = arena_options(name, 1, 0, connect_timeout_s, device, socket_dir);
  const std::optional<fastrestart::ArenaInfo> found = without_gil([&] { return fastrestart::find_arena(o); });
  if (!found) return std::nullopt;
  const fastrestart::ArenaInfo& i = *found;
  return py::dict("name"_a = name, "bytes"_a = i.bytes, "holder_pid"_a = pid_or_none(i.holder_pid), "leases"_a = i.leases,
                  "waiting"_a = i.waiting);
}

// The standby gate (fastrestart/standby.h): True released, False passed. It blocks without the GIL; told to
// exit (or with fastrestartd gone) the process exits 0 from inside, without unwinding Python.
bool standby_gate(const std::string& level) {
  return without_gil([&] { return fastrestart::standby_gate(level); }) == fastrestart::GateResult::kReleased;
}

}  // namespace

PYBIND11_MODULE(_fastrestart, m) {
  m.doc() = "fastrestart engine_loader binding: attach to weights a fastrestart-weightd holds, or publish them";

  py::class_<PyTensor>(m, "Tensor", "An attached tensor; export it without a copy through DLPack.")
      .def_property_readonly("name", [](const PyTensor& t) { return t.t().name; })
      .def_property_readonly("dtype", [](const PyTensor& t) { return t.t().dtype; })
      .def_property_readonly("shape", [](const PyTensor& t) { return py::tuple(py::cast(t.t().shape)); })
      .def_property_readonly("strides", [](const PyTensor& t) { return py::tuple(py::cast(t.t().strides)); })
      .def_property_readonly("itemsize", [](const PyTensor& t) { return t.t().itemsize; })
      .def_property_readonly("nbytes", [](const PyTensor& t) { return t.t().nbytes; })
      .def_property_readonly("data_ptr", [](const PyTensor& t) { return reinterpret_cast<uintptr_t>(t.t().data); })
      .def_property_readonly("readonly", &PyTensor::readonly)
      .def_property_readonly("device", [](const PyTensor& t) {
        return t.device().type == kDLCPU ? std::string("host") : "cuda:" + std::to_string(t.device().id);
      })
      .def("__dlpack__", &PyTensor::dlpack, py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
           py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const PyTensor& t) { return py::make_tuple(static_cast<int>(t.device().type), t.device().id); })
      .def("numpy", [](py::object self) { return self.cast<const PyTensor&>().numpy(self); },
           "A numpy view of a host tensor (no copy); read-only in zero_copy mode.")
      .def("__repr__", [](const PyTensor& t) {
        std::string s = "<fastrestart.Tensor '" + t.t().name + "' " + t.t().dtype + " (";
        for (size_t i = 0; i < t.t().shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.t().shape[i]);
        return s + (t.t().shape.size() == 1 ? ",)>" : ")>");
      });

  py::class_<PyKey>(m, "Key", "Checkpoint files identified by stat(2) at one moment, plus config: take it "
                               "before reading the files, and publish under it.")
      .def_property_readonly("files", &key_files)
      .def_property_readonly("config", [](const PyKey& k) { return k.key.config; })
      .def_property_readonly("fingerprint", [](const PyKey& k) { return k.key.fingerprint(); })
      .def("__eq__", [](const PyKey& a, const PyKey& b) { return a.key.files == b.key.files && a.key.config == b.key.config; }, py::is_operator())
      .def("__repr__", [](const PyKey& k) {
        return "<fastrestart.Key " + k.key.fingerprint() + ", " + std::to_string(k.key.files.size()) + " file(s)>";
      });

  using R = PyAttachResult;
  py::class_<R> attach_result(m, "AttachResult");
  def_readonly_pairs(attach_result, "hit", &R::hit, "key", &R::key, "reason", &R::reason, "differs", &R::differs,
                     "timings", &R::timings, "digest", &R::digest, "fingerprint", &R::fingerprint, "mode", &R::mode,
                     "device", &R::device, "pool_bytes", &R::pool_bytes, "daemon_gpu_uuid", &R::daemon_gpu_uuid,
                     "tensors", &R::tensors);
  attach_result
      .def("release_mapping", [](const PyAttachResult& r) { return weights_call(r, true); },
           "Snapshots: unmap the daemon's pool keeping the address range reserved (tensors keep their pointers; "
           "nothing may read them until reattach()). Returns the mapping's fingerprint, digest, base and bytes.")
      .def("reattach", [](const PyAttachResult& r) { return weights_call(r, false); },
           "Snapshots: attach again and map the daemon's entry at the same address (same fingerprint and digest).")
      .def("__bool__", [](const PyAttachResult& r) { return r.hit; })
      .def("__repr__", [](const PyAttachResult& r) {
        return r.hit ? "<fastrestart.AttachResult hit, " + std::to_string(r.tensors.size()) + " tensors>"
                     : "<fastrestart.AttachResult miss: " + r.reason + ">";
      });

  py::class_<PySnapshotAgent, std::shared_ptr<PySnapshotAgent>>(m, "SnapshotAgent",
                                                               "Serves the snapshot prepare/resume exchange (docs/snapshot.md).")
      .def_property_readonly("socket_path", [](const PySnapshotAgent& a) { return a.agent ? a.agent->socket_path() : ""; })
      .def_property_readonly("prepared", [](const PySnapshotAgent& a) { return a.agent && a.agent->prepared(); })
      .def("stop", &PySnapshotAgent::stop);
  m.def("snapshot_agent", &snapshot_agent, py::arg("results"), py::arg("quiesce"), py::arg("resume"), py::arg("socket_path"),
        py::arg("arenas"));
  m.def("identify", &identify, py::arg("files"), py::arg("config"), py::arg("fds") = py::none());
  m.def("attach", &attach, py::arg("key"), py::arg("mode"), py::arg("fallback"),
        py::arg("connect_timeout_s"), py::arg("state_timeout_s"), py::arg("verify"), py::arg("socket_dir"),
        py::arg("device"));
  m.def("publish", &publish, py::arg("key"), py::arg("tensors"), py::arg("socket_dir"),
        py::arg("device"), py::arg("connect_timeout_s"));

  py::class_<PyArenaView>(m, "ArenaView", "Bytes of a KV arena as a row-major tensor; export it without a copy through DLPack.")
      .def_property_readonly("shape", [](const PyArenaView& v) { return py::tuple(py::cast(v.shape())); })
      .def_property_readonly("dtype", [](const PyArenaView& v) { return std::string(v.dtype().name); })
      .def_property_readonly("nbytes", &PyArenaView::nbytes)
      .def_property_readonly("data_ptr", [](const PyArenaView& v) { return reinterpret_cast<uintptr_t>(v.data()); })
      .def("__dlpack__", &PyArenaView::dlpack, py::kw_only(), py::arg("stream") = py::none(), py::arg("max_version") = py::none(),
           py::arg("dl_device") = py::none(), py::arg("copy") = py::none())
      .def("__dlpack_device__", [](const PyArenaView& v) { return py::make_tuple(static_cast<int>(v.device().type), v.device().id); })
      .def("numpy", [](py::object self) { return self.cast<const PyArenaView&>().numpy(self); },
           "A writable numpy view of a host arena's bytes (no copy).");

  py::class_<PyArena>(m, "Arena", "A KV arena's address range: the placeholder until swap_in(), then the leased arena.")
      .def_property_readonly("base", [](const PyArena& a) { return reinterpret_cast<uintptr_t>(a.h->arena->base()); })
      .def_property_readonly("bytes", [](const PyArena& a) { return a.h->arena->bytes(); })
      .def_property_readonly("leased", [](const PyArena& a) { return a.h->arena->leased(); })
      .def_property_readonly("placeholder_bytes", [](const PyArena& a) { return a.h->arena->placeholder_bytes(); })
      .def_property_readonly("device", [](const PyArena& a) {
        return a.h->dev.type == kDLCPU ? std::string("host") : "cuda:" + std::to_string(a.h->dev.id);
      })
      .def_property_readonly("unmapped", [](const PyArena& a) { return a.h->arena->unmapped(); })
      .def_property_readonly("lease", [](const PyArena& a) -> py::object {
        // the last swap_in()'s, a snapshot agent's resume included
        const auto l = a.h->arena->last_lease();
        return l ? py::object(lease_dict(*l)) : py::none();
      })
      .def("swap_in", &PyArena::swap_in,
           "Lease the arena (waiting for the previous holder's exit, without the GIL) and map it over the range "
           "at the same address. Returns the lease: created, resized, previous_bytes, previous_holder_pid, "
           "waited_s, leases, generation, seconds.")
      .def("view", &PyArena::view, py::arg("offset"), py::arg("shape"), py::arg("dtype"),
           "The bytes at [offset, offset + prod(shape) * itemsize) as a row-major tensor (DLPack, no copy).");
  m.def("reserve_arena", &reserve_arena, py::arg("name"), py::arg("bytes"), py::arg("wait_s"),
        py::arg("connect_timeout_s"), py::arg("device"), py::arg("socket_dir"));
  m.def("find_arena", &find_arena, py::arg("name"), py::arg("connect_timeout_s"), py::arg("device"),
        py::arg("socket_dir"));
  // The engine's arena line: engine_loader's one writer of it (fastrestart/arena.h).
  m.def("arena_line", [](const PyArena& a) { return fastrestart::arena_line(*a.h->arena); }, py::arg("arena"));
  m.def("arena_fallback_line", [](const std::string& reason) { return fastrestart::arena_fallback_line(reason); },
        py::arg("reason"));
  m.def("standby_gate", &standby_gate, py::arg("level"));
  m.def("is_standby", &fastrestart::is_standby);
}
