// Result<T>: the project's expected-style return type (see CONTRIBUTING.md, "Errors").
//
// Fallible functions at module boundaries return Result<T>; errno, CUresult and negative-errno values are
// converted into an Error where the call is made, so callers only ever see an Error with a code and a
// message that names the file, field or message at fault. Exceptions are used only at program boundaries.
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace fr {

// Stable error codes. Their spelling is part of the wire protocol (docs/protocol.md, "Error codes").
enum class Errc {
  kInvalidArgument,   // bad input from a caller: a flag, a field, a file
  kNotFound,          // a file, entry or tensor that does not exist
  kPermissionDenied,  // peer check, directory modes
  kBusy,              // a lock held by someone else
  kProtocol,          // a malformed or oversized message
  kUnsupported,       // valid request the build or backend cannot serve
  kTimeout,
  kIo,                // a system call failed
  kCuda,              // the CUDA driver failed (or is absent)
  kCorrupt,           // a checkpoint or digest that does not match what it claims
  kCancelled,
  kInternal,
};

const char* errc_name(Errc c);

struct Error {
  Errc code = Errc::kInternal;
  std::string message;

  // Prefix context ("while loading x: ...") keeping the code.
  Error context(const std::string& what) const { return Error{code, what + ": " + message}; }
  std::string to_string() const { return std::string(errc_name(code)) + ": " + message; }
};

inline Error make_error(Errc c, std::string msg) { return Error{c, std::move(msg)}; }
// An Error from errno, e.g. sys_error("open /x") -> "open /x: No such file or directory".
Error sys_error(const std::string& what, int err);
Error sys_error(const std::string& what);  // uses errno

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : m_v(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit by design
  Result(Error e) : m_v(std::in_place_index<1>, std::move(e)) {}      // NOLINT

  bool ok() const { return m_v.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(m_v); }
  const T& value() const& { return std::get<0>(m_v); }
  T&& value() && { return std::get<0>(std::move(m_v)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const Error& error() const { return std::get<1>(m_v); }

 private:
  std::variant<T, Error> m_v;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error e) : m_err(std::move(e)), m_ok(false) {}  // NOLINT
  bool ok() const { return m_ok; }
  explicit operator bool() const { return m_ok; }
  const Error& error() const { return m_err; }

 private:
  Error m_err;
  bool m_ok = true;
};

using Status = Result<void>;

}  // namespace fr

// FR_TRY(expr): return the error of a failed Result from the enclosing function.
#define FR_TRY(expr)                              \
  do {                                            \
    auto&& fr_try_r_ = (expr);                    \
    if (!fr_try_r_.ok()) return fr_try_r_.error(); \
  } while (0)

#define FR_CONCAT_INNER(a, b) a##b
#define FR_CONCAT(a, b) FR_CONCAT_INNER(a, b)
// FR_ASSIGN(decl, expr): `decl = value of expr`, or return its error.
#define FR_ASSIGN(decl, expr) FR_ASSIGN_IMPL(FR_CONCAT(fr_assign_r_, __LINE__), decl, expr)
#define FR_ASSIGN_IMPL(tmp, decl, expr)  \
  auto tmp = (expr);                     \
  if (!tmp.ok()) return tmp.error();     \
  decl = std::move(tmp).value()
