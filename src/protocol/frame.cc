#include "protocol/frame.h"

#include <algorithm>

#include "protocol/frame_reader.h"

namespace fr::proto {

namespace {
Result<std::string> frame_of(const std::string& payload) {
  if (payload.empty() || payload.size() > kMaxFrameBytes)
    return make_error(Errc::kProtocol, "message of " + std::to_string(payload.size()) + " bytes exceeds the " +
                                           std::to_string(kMaxFrameBytes) + "-byte frame limit");
  std::string out(4, '\0');
  auto n = static_cast<uint32_t>(payload.size());
  out[0] = static_cast<char>(n >> 24);
  out[1] = static_cast<char>(n >> 16);
  out[2] = static_cast<char>(n >> 8);
  out[3] = static_cast<char>(n);
  out += payload;
  return out;
}
}  // namespace

Result<std::string> encode_frame(const json& body) {
  return frame_of(body.dump(-1, ' ', false, json::error_handler_t::replace));
}

Status write_payload(int sock, const std::string& payload, int fd, Deadline deadline) {
  FR_ASSIGN(std::string bytes, frame_of(payload));
  std::vector<int> fds;
  if (fd >= 0) fds.push_back(fd);
  return send_all(sock, bytes.data(), bytes.size(), fds, deadline);
}

Status write_frame(int sock, const json& body, int fd, Deadline deadline) {
  FR_ASSIGN(std::string bytes, encode_frame(body));
  std::vector<int> fds;
  if (fd >= 0) fds.push_back(fd);
  return send_all(sock, bytes.data(), bytes.size(), fds, deadline);
}

Result<json> decode_payload(std::string_view payload, const JsonLimits& limits) {
  // Bounded before parsing: a value nested deeper would overflow the stack of whoever copies it.
  FR_TRY(check_json_bounds(payload, limits));
  auto j = json::parse(payload, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return make_error(Errc::kProtocol, "frame payload is not valid JSON");
  if (!j.is_object()) return make_error(Errc::kProtocol, "frame payload is not a JSON object");
  return j;
}

namespace {
Error too_many_fds(size_t got, size_t max) {
  return make_error(Errc::kProtocol, "frame carried " + std::to_string(got) + " descriptors; at most " + std::to_string(max) + " allowed");
}
}  // namespace

Result<Frame> read_frame(int sock, Deadline deadline, double frame_timeout_s, const FrameLimits& limits) {
  FrameReader reader;
  std::vector<UniqueFd> fds;
  MessageSender first_sender, sender;
  bool senders_differ = false;
  Deadline rest = deadline;
  for (bool done = false; !done;) {
    std::span<char> buf = reader.next();
    // The first byte alone: from it on the frame timeout runs, also for the rest of the length field.
    if (!reader.started()) buf = buf.subspan(0, 1);
    auto got = recv_some(sock, buf.data(), buf.size(), &fds, reader.started() ? rest : deadline, &sender);
    if (!got.ok()) {
      const Error& e = got.error();
      if (!reader.started()) return e;
      if (e.code == Errc::kCancelled) return make_error(Errc::kProtocol, "connection closed inside a frame");
      if (e.code == Errc::kTimeout)
        return make_error(Errc::kTimeout, "frame incomplete: " + std::to_string(reader.received()) + " of " +
                                              (reader.length() ? std::to_string(reader.length() + 4) : std::string("?")) +
                                              " bytes arrived within " + std::to_string(static_cast<int>(frame_timeout_s)) + " s");
      return e;
    }
    if (fds.size() > limits.max_fds) {
      const size_t n = fds.size();
      fds.clear();  // closed now, not when the frame would have completed
      return too_many_fds(n, limits.max_fds);
    }
    const bool first = !reader.started();
    if (first) {
      first_sender = std::move(sender);
    } else if (sender.has_cred != first_sender.has_cred || sender.pid != first_sender.pid || sender.uid != first_sender.uid) {
      senders_differ = true;
    }
    sender.pidfd.reset();
    FR_ASSIGN(done, reader.commit(*got));
    if (first) rest = std::min(deadline, deadline_in(frame_timeout_s));
  }
  FR_ASSIGN(json body, decode_payload(reader.take(), limits.json));
  Frame f{std::move(body), {}, std::move(first_sender), senders_differ};
  if (!fds.empty()) f.fd = std::move(fds[0]);
  return f;
}

json error_reply(const Error& e) {
  return json{{"ok", false}, {"error", {{"code", errc_name(e.code)}, {"message", e.message}}}};
}

Errc errc_from_name(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(Errc::kInternal); ++i)
    if (name == errc_name(static_cast<Errc>(i))) return static_cast<Errc>(i);
  return Errc::kInternal;
}

Status check_reply(const json& reply) {
  auto ok = reply.find("ok");
  if (ok == reply.end() || !ok->is_boolean()) return make_error(Errc::kProtocol, "reply has no boolean 'ok'");
  if (ok->get<bool>()) return {};
  const json& e = reply.value("error", json::object());
  std::string code = e.is_object() ? e.value("code", "internal") : "internal";
  std::string msg = e.is_object() ? e.value("message", "(no message)") : "(malformed error)";
  return make_error(errc_from_name(code), msg);
}

}  // namespace fr::proto
