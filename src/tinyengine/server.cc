#include "tinyengine/server.h"

#include "tinyengine/kv_cache.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <utility>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "common/bounded_json.h"
#include "tinyengine/chat.h"
#include "tinyengine/tp.h"

namespace fr::te {
namespace {

using nlohmann::json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

json error_body(int status, const std::string& message) {
  const char* type = status == 404 ? "NotFoundError" : status == 503 ? "ServiceUnavailableError"
                     : status >= 500                 ? "InternalServerError"
                                                     : "BadRequestError";
  return {{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", status}}}};
}

void send(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body), "application/json");
}

// prompt: "text" | [token ids] | ["text", ...] | [[token ids], ...]. Returns the prompts or an error message.
Result<std::vector<std::vector<int>>> parse_prompts(const json& p) {
  auto bad = [](const std::string& m) { return make_error(Errc::kInvalidArgument, m); };
  auto ids = [&](const json& a) -> Result<std::vector<int>> {
    std::vector<int> v;
    for (const auto& e : a) {
      if (!e.is_number_integer()) return bad("'prompt' token ids must be integers");
      const auto t = e.get<int64_t>();
      if (t < 0 || t > kEos) return bad("token id " + std::to_string(t) + " is out of range 0.." + std::to_string(kEos));
      v.push_back(static_cast<int>(t));
    }
    return v;
  };
  std::vector<std::vector<int>> out;
  if (p.is_string()) {
    out.push_back(tokenize(p.get<std::string>()));
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    FR_ASSIGN(auto v, ids(p));
    out.push_back(std::move(v));
  } else if (p.is_array() && !p.empty()) {
    for (const auto& e : p) {
      if (e.is_string()) {
        out.push_back(tokenize(e.get<std::string>()));
      } else if (e.is_array()) {
        FR_ASSIGN(auto v, ids(e));
        out.push_back(std::move(v));
      } else {
        return bad("'prompt' must be a string, a list of token ids, or a list of those");
      }
    }
  } else {
    return bad("'prompt' must be a non-empty string, a list of token ids, or a list of those");
  }
  for (const auto& v : out)
    if (v.empty()) return bad("'prompt' must not be empty");
  return out;
}

}  // namespace

void EngineServer::pause_for_snapshot() {
  std::unique_lock lk(m_gate_mutex);
  m_paused = true;
  m_gate_cv.wait(lk, [this] { return m_generating == 0; });
}

void EngineServer::resume_after_snapshot() {
  {
    std::lock_guard lk(m_gate_mutex);
    m_paused = false;
  }
  m_gate_cv.notify_all();
}

const char* state_name(EngineServer::State s) {
  switch (s) {
    case EngineServer::State::kLoading: return "loading";
    case EngineServer::State::kReady: return "ready";
    case EngineServer::State::kStopping: return "stopping";
  }
  return "?";
}

namespace {

// TCP_NODELAY on every connection the engine accepts: httplib writes an answer's head and body in separate
// writes, and with Nagle's algorithm the body waits for the client's ACK of the head. A fresh connection's
// first segments are ACKed at once, but on a kept-alive one (a client or fastrestart-front reusing its
// connection) the client delays that ACK, about 40 ms on Linux, which then lands on every answer
// (docs/tinyengine.md, "Serving").
void set_nodelay(int fd) {
  int yes = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
}

// httplib's Server with access to its listening socket (svr_sock_, protected): to serve on an inherited
// socket, and to stop accepting on it without httplib's stop(), which shuts the socket down for every
// process that holds it.
class SharedSocketServer : public httplib::Server {
 public:
  // Connections accepted on the socket inherit its TCP_NODELAY (Linux copies it from the listener).
  void adopt(int fd) {
    set_nodelay(fd);
    svr_sock_ = fd;
  }
  // The accept loop ends at its next turn (set_idle_interval bounds its wait); the socket stays listening.
  int release() { return svr_sock_.exchange(INVALID_SOCKET); }
  int socket_fd() const { return svr_sock_; }
};

// The accept queue of a port the engine binds itself. httplib (0.11) listens with a queue of 5: under a
// burst (hundreds of clients, or a front re-sending every held request the moment the engine is back) the
// kernel drops the connections beyond it (ListenOverflows), and a client whose handshake completed on its
// side waits on a connection the engine never accepts. The kernel caps it at net.core.somaxconn; a socket
// handed down (engine.listen = "supervisor" or "front") keeps the queue its owner gave it.
constexpr int kListenBacklog = 4096;

// How long the accept loop of an adopted socket waits before it looks whether stop() released it.
constexpr time_t kAdoptedIdleUsec = 100 * 1000;

}  // namespace

EngineServer::EngineServer(const ServeOptions& options)
    : m_options(options), m_server(std::make_unique<SharedSocketServer>()) {
  const int threads = options.threads > 0 ? options.threads : 8;
  m_server->new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // httplib's default also sets SO_REUSEPORT, which lets a second engine (a restart racing an orphan) bind
  // the same port and share its traffic. SO_REUSEADDR alone: a restart can rebind past TIME_WAIT, a live
  // listener still makes bind fail.
  m_server->set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    set_nodelay(sock);
  });
  routes(*m_server);
}

EngineServer::~EngineServer() {
  if (m_listener.joinable()) {
    stop_accepting();
    m_listener.join();
  }
  if (m_probe_listener.joinable()) {
    static_cast<SharedSocketServer&>(*m_probe).release();
    m_probe_listener.join();
  }
  if (m_adopted_fd >= 0) ::close(m_adopted_fd);
  if (m_probe_fd >= 0) ::close(m_probe_fd);
}

void EngineServer::stop_accepting() {
  if (m_adopted_fd >= 0) static_cast<SharedSocketServer&>(*m_server).release();
  else m_server->stop();
  if (m_probe) static_cast<SharedSocketServer&>(*m_probe).release();
}

std::string EngineServer::model_name() const {
  return m_options.served_model_name.empty() ? m_options.model : m_options.served_model_name;
}

Status EngineServer::bind() {
  if (m_options.port == 0) {
    m_port = m_server->bind_to_any_port(m_options.host);
  } else {
    m_port = m_server->bind_to_port(m_options.host, m_options.port) ? m_options.port : -1;
  }
  if (m_port <= 0)
    return make_error(Errc::kIo, "cannot listen on " + m_options.host + ":" + std::to_string(m_options.port));
  // listen() again on a listening socket only sets its queue's length (Linux).
  if (::listen(static_cast<SharedSocketServer&>(*m_server).socket_fd(), kListenBacklog) != 0)
    return make_error(Errc::kIo, "listen on " + m_options.host + ":" + std::to_string(m_port) + ": " + std::strerror(errno));
  return {};
}

Status EngineServer::adopt(int fd) {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
    return make_error(Errc::kIo, "the inherited listening socket (fd " + std::to_string(fd) + "): getsockname: " + std::strerror(errno));
  if (addr.ss_family == AF_INET) m_port = ntohs(reinterpret_cast<sockaddr_in&>(addr).sin_port);
  else if (addr.ss_family == AF_INET6) m_port = ntohs(reinterpret_cast<sockaddr_in6&>(addr).sin6_port);
  else return make_error(Errc::kInvalidArgument, "the inherited listening socket (fd " + std::to_string(fd) + ") is not a TCP socket");
  m_adopted_fd = fd;
  m_server->set_idle_interval(0, kAdoptedIdleUsec);
  static_cast<SharedSocketServer&>(*m_server).adopt(fd);
  return {};
}

Status EngineServer::adopt_probe(int fd) {
  auto probe = std::make_unique<SharedSocketServer>();
  // Only fastrestartd's checks come here, one at a time (two: a check a timeout left behind).
  probe->new_task_queue = [] { return new httplib::ThreadPool(2); };
  probe->set_idle_interval(0, kAdoptedIdleUsec);
  probe->adopt(fd);
  m_probe = std::move(probe);
  m_probe_fd = fd;
  routes(*m_probe);
  return {};
}

void EngineServer::start() {
  // The private endpoint first: fastrestartd's readiness request is answered no later than a client's.
  if (m_probe)
    m_probe_listener = std::thread([this] {
      m_probe->listen_after_bind();
      std::lock_guard lk(m_done_mutex);
      m_probe_done = true;
      m_done_cv.notify_all();
    });
  m_listener = std::thread([this] {
    m_server->listen_after_bind();
    std::lock_guard lk(m_done_mutex);
    m_listen_done = true;
    m_done_cv.notify_all();
  });
}

void EngineServer::set_ready(std::unique_ptr<LoadedModel> model, double warmup_s, double ready_s) {
  m_model = std::move(model);
  m_warmup_s = warmup_s;
  m_ready_s = ready_s;
  m_state = State::kReady;
  if (m_options.faults.hang_after_requests == 0) hang();
}

bool EngineServer::stop(double grace_s) {
  m_state = State::kStopping;
  // httplib closes the listening socket, lets each connection finish its current request, then joins its
  // workers; listen_after_bind returns when the last in-flight request is answered.
  // An adopted socket stays listening: connections that arrive from here on wait for the next engine.
  stop_accepting();
  std::unique_lock lk(m_done_mutex);
  const bool done = m_done_cv.wait_for(lk, std::chrono::duration<double>(grace_s),
                                       [this] { return m_listen_done && (!m_probe_listener.joinable() || m_probe_done); });
  lk.unlock();
  if (done) {
    m_listener.join();
    if (m_probe_listener.joinable()) m_probe_listener.join();
    if (m_adopted_fd >= 0) ::close(std::exchange(m_adopted_fd, -1));
    if (m_probe_fd >= 0) ::close(std::exchange(m_probe_fd, -1));
  } else {
    if (m_probe_listener.joinable()) m_probe_listener.detach();
    m_probe_fd = -1;
    m_listener.detach();  // a worker is stuck (the hang fault); the caller exits anyway
    m_adopted_fd = -1;    // the detached loop may still look at it: left to the exit
  }
  return done;
}

void EngineServer::block_if_hung() const {
  while (m_hung) std::this_thread::sleep_for(std::chrono::hours(1));
}

json EngineServer::stats() const {
  const State st = m_state.load();
  json j = {{"engine", "fastrestart-tinyengine"},
            {"version", FR_TE_VERSION},
            {"pid", ::getpid()},
            {"state", state_name(st)},
            {"uptime_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - m_started).count()},
            {"device", st == State::kLoading ? m_options.device : m_model->device()},
            {"gpu_memory_utilization", m_options.gpu_memory_utilization},
            {"requests",
             {{"completions", m_completions.load()}, {"errors", m_errors.load()}, {"in_flight", m_in_flight.load()}}}};
  if (m_worker_pid > 0) j["worker_pid"] = m_worker_pid;
  j["tensor_parallel"] = {{"size", m_tp_size}};
  if (m_tp) j["tensor_parallel"]["ranks"] = m_tp->ranks_json();
  j["model"] = {{"name", model_name()}, {"path", m_options.model}};
  j["startup"] = {{"startup_delay_s", m_startup_delay_s}};
  if (st != State::kLoading) {
    const auto& m = *m_model;
    j["model"]["files"] = m.info.files;
    j["model"]["config"] = json::parse(m.info.config.to_json());
    j["model"]["weight_bytes"] = m.report.weight_bytes;
    j["load"] = m.report.to_json();
    if (m.kv_cache) j["kv_cache"] = m.kv_cache->stats();
    else j["kv_cache"] = {{"enabled", false}, {"reason", m.cuda ? "cuda forward" : "--no-enable-prefix-caching"}};
    j["startup"]["warmup_s"] = m_warmup_s;
    j["startup"]["ready_s"] = m_ready_s;
  }
  return j;
}

json EngineServer::models() const {
  const auto& m = *m_model;
  json card = {{"id", model_name()},
               {"object", "model"},
               {"created", static_cast<int64_t>(std::time(nullptr))},
               {"owned_by", "fastrestart"},
               {"root", m_options.model},
               {"parent", nullptr},
               {"max_model_len", m_options.max_model_len > 0 ? m_options.max_model_len : m.info.config.max_seq}};
  card["fastrestart"] = {{"load", m.report.to_json()}, {"gpu_memory_utilization", m_options.gpu_memory_utilization}};
  return {{"object", "list"}, {"data", json::array({card})}};
}

Result<nlohmann::json> EngineServer::parse_request_object(const std::string& body) const {
  auto parsed = parse_json_bounded(body, {32, 65536, "the request body"});
  if (!parsed.ok()) return make_error(Errc::kInvalidArgument, parsed.error().message);
  json req = std::move(*parsed);
  if (!req.is_object()) return make_error(Errc::kInvalidArgument, "the request body must be a JSON object");
  if (req.contains("model") && !req["model"].is_null()) {
    if (!req["model"].is_string() || req["model"].get<std::string>() != model_name())
      return make_error(Errc::kNotFound, "The model `" + dump(req["model"]) + "` does not exist.");
  }
  return req;
}

Result<CompletionRequest> EngineServer::parse_completion(const std::string& body) const {
  auto bad = [](const std::string& m) { return make_error(Errc::kInvalidArgument, m); };
  FR_ASSIGN(json req, parse_request_object(body));
  if (!req.contains("prompt")) return bad("'prompt' is required");
  CompletionRequest c;
  FR_ASSIGN(c.prompts, parse_prompts(req["prompt"]));
  if (req.contains("max_tokens") && !req["max_tokens"].is_null()) {
    if (!req["max_tokens"].is_number_integer() || req["max_tokens"].get<int64_t>() < 0 ||
        req["max_tokens"].get<int64_t>() > 1'000'000)
      return bad("'max_tokens' must be a non-negative integer");
    c.max_tokens = req["max_tokens"].get<int>();
  }
  if (req.contains("logprobs") && !req["logprobs"].is_null()) {
    if (!req["logprobs"].is_number_integer() || req["logprobs"].get<int64_t>() < 0 ||
        req["logprobs"].get<int64_t>() > 20)
      return bad("'logprobs' must be an integer 0..20");
    c.top = req["logprobs"].get<int>();
  }
  FR_TRY(parse_common(req, c));
  return c;
}

Result<std::pair<CompletionRequest, ChatPrompt>> EngineServer::parse_chat(const std::string& body) const {
  auto bad = [](const std::string& m) { return make_error(Errc::kInvalidArgument, m); };
  FR_ASSIGN(json req, parse_request_object(body));
  FR_ASSIGN(ChatPrompt prompt, render_chat(req));
  CompletionRequest c;
  c.prompts.push_back(tokenize(prompt.text));
  // vLLM: max_completion_tokens, else the deprecated max_tokens.
  for (const char* k : {"max_tokens", "max_completion_tokens"}) {
    if (!req.contains(k) || req[k].is_null()) continue;
    if (!req[k].is_number_integer() || req[k].get<int64_t>() < 0 || req[k].get<int64_t>() > 1'000'000)
      return bad(std::string("'") + k + "' must be a non-negative integer");
    c.max_tokens = req[k].get<int>();
  }
  if ((req.contains("logprobs") && !req["logprobs"].is_null() && req["logprobs"] != false) ||
      (req.contains("top_logprobs") && !req["top_logprobs"].is_null()))
    return bad("'logprobs' and 'top_logprobs' are not supported for chat by this engine");
  for (const char* k : {"tools", "tool_choice", "functions", "function_call"})
    if (req.contains(k) && !req[k].is_null()) return bad(std::string("'") + k + "' is not supported by this engine");
  FR_TRY(parse_common(req, c));
  return std::pair{std::move(c), std::move(prompt)};
}

Status EngineServer::parse_common(const nlohmann::json& req, CompletionRequest& c) const {
  auto bad = [](const std::string& m) { return make_error(Errc::kInvalidArgument, m); };
  if (req.contains("temperature") && !req["temperature"].is_null() &&
      (!req["temperature"].is_number() || req["temperature"].get<double>() < 0))
    return bad("'temperature' must be a non-negative number");
  if (req.contains("stream") && !req["stream"].is_null()) {
    if (!req["stream"].is_boolean()) return bad("'stream' must be a boolean");
    c.stream = req["stream"].get<bool>();
  }
  if (req.contains("stream_options") && !req["stream_options"].is_null()) {
    // vLLM's StreamOptions: include_usage defaults to true once stream_options is given; continuous usage
    // only with it (should_include_usage in vllm/entrypoints/utils.py).
    const json& so = req["stream_options"];
    if (!so.is_object()) return bad("'stream_options' must be an object");
    if (!c.stream) return bad("'stream_options' is only allowed when 'stream' is true");
    auto flag = [&](const char* k, bool dflt) -> Result<bool> {
      if (!so.contains(k) || so[k].is_null()) return dflt;
      if (!so[k].is_boolean()) return bad(std::string("'stream_options.") + k + "' must be a boolean");
      return so[k].get<bool>();
    };
    FR_ASSIGN(c.include_usage, flag("include_usage", true));
    FR_ASSIGN(bool continuous, flag("continuous_usage_stats", false));
    c.continuous_usage = c.include_usage && continuous;
  }
  if (req.contains("return_token_ids") && !req["return_token_ids"].is_null()) {
    if (!req["return_token_ids"].is_boolean()) return bad("'return_token_ids' must be a boolean");
    c.return_token_ids = req["return_token_ids"].get<bool>();
  }
  if (req.value("echo", false) == true) return bad("'echo' is not supported by this engine");
  if (req.contains("n") && !(req["n"].is_number_integer() && req["n"].get<int64_t>() == 1))
    return bad("'n' must be 1");
  const int max_len = m_options.max_model_len > 0 ? m_options.max_model_len : m_model->info.config.max_seq;
  for (const auto& p : c.prompts)
    if (static_cast<int64_t>(p.size()) + c.max_tokens > max_len)
      return bad("This model's maximum context length is " + std::to_string(max_len) + " tokens. However, you "
                 "requested " + std::to_string(p.size() + static_cast<size_t>(c.max_tokens)) + " tokens (" +
                 std::to_string(p.size()) + " in the messages, " + std::to_string(c.max_tokens) +
                 " in the completion). Please reduce the length of the messages or completion.");
  return {};
}

Result<Generation> EngineServer::generate(const std::vector<int>& prompt, int max_tokens, int top) {
  {
    std::unique_lock lk(m_gate_mutex);
    m_gate_cv.wait(lk, [this] { return !m_paused; });
    ++m_generating;
  }
  Generation g = m_model->generate(prompt, max_tokens, std::max(top, 0));
  {
    std::lock_guard lk(m_gate_mutex);
    --m_generating;
  }
  m_gate_cv.notify_all();
  if (!g.error.empty()) return make_error(Errc::kInternal, "generation failed: " + g.error);
  return g;
}

namespace {

std::pair<int, json> error_answer(const Error& e) {
  const int status = e.code == Errc::kNotFound ? 404 : e.code == Errc::kInternal ? 500 : 400;
  return {status, error_body(status, e.message)};
}

}  // namespace

std::pair<int, json> EngineServer::complete(const std::string& body) {
  auto parsed = parse_completion(body);
  if (!parsed) return error_answer(parsed.error());
  const CompletionRequest& c = *parsed;
  if (c.stream) return {400, error_body(400, "'stream': true is answered as an event stream (POST /v1/completions)")};
  const int top = c.top;
  json choices = json::array();
  size_t prompt_tokens = 0, completion_tokens = 0;
  for (size_t i = 0; i < c.prompts.size(); ++i) {
    const auto& p = c.prompts[i];
    auto gen = generate(p, c.max_tokens, top);
    if (!gen) return error_answer(gen.error());
    const Generation& g = *gen;
    if (m_options.faults.token_delay_s > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(m_options.faults.token_delay_s) * g.steps.size());
    std::vector<int> ids;
    json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
    size_t off = 0;
    for (const auto& s : g.steps) {
      ids.push_back(s.token);
      tokens.push_back(token_name(s.token));
      lps.push_back(s.logprob);
      offsets.push_back(off);
      off += s.token == kEos ? 0 : 1;
      json alt = json::object();
      for (const auto& [tok, lp] : s.top) alt[token_name(tok)] = lp;
      tops.push_back(alt);
    }
    json choice = {{"index", i}, {"text", detokenize(ids)}, {"token_ids", ids},
                   {"finish_reason", g.stopped_on_eos ? "stop" : "length"}, {"logprobs", nullptr}};
    if (c.return_token_ids) choice["prompt_token_ids"] = p;
    if (top >= 0)
      choice["logprobs"] = {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", top > 0 ? tops : json(nullptr)},
                            {"text_offset", offsets}};
    choices.push_back(std::move(choice));
    prompt_tokens += p.size();
    completion_tokens += ids.size();
  }
  json out = {{"id", "cmpl-" + std::to_string(::getpid()) + "-" + std::to_string(++m_next_id)},
              {"object", "text_completion"},
              {"created", static_cast<int64_t>(std::time(nullptr))},
              {"model", model_name()},
              {"choices", choices},
              {"usage",
               {{"prompt_tokens", prompt_tokens},
                {"completion_tokens", completion_tokens},
                {"total_tokens", prompt_tokens + completion_tokens}}}};
  return {200, out};
}

Result<StreamedCompletion> EngineServer::stream_completion(const std::string& body) {
  FR_ASSIGN(auto c, parse_completion(body));
  if (!c.stream) return make_error(Errc::kInvalidArgument, "'stream' is not true");
  std::vector<Generation> gens;
  for (const auto& p : c.prompts) {
    FR_ASSIGN(auto g, generate(p, c.max_tokens, c.top));
    gens.push_back(std::move(g));
  }
  return build_stream_events(c, gens, "cmpl-" + std::to_string(::getpid()) + "-" + std::to_string(++m_next_id),
                             static_cast<int64_t>(std::time(nullptr)), model_name());
}

std::pair<int, json> EngineServer::chat(const std::string& body) {
  auto parsed = parse_chat(body);
  if (!parsed) return error_answer(parsed.error());
  const auto& [c, prompt] = *parsed;
  if (c.stream) return {400, error_body(400, "'stream': true is answered as an event stream (POST /v1/chat/completions)")};
  auto gen = generate(c.prompts[0], c.max_tokens, -1);
  if (!gen) return error_answer(gen.error());
  if (m_options.faults.token_delay_s > 0)
    std::this_thread::sleep_for(std::chrono::duration<double>(m_options.faults.token_delay_s) * gen->steps.size());
  return {200, chat_answer(c, prompt.role, *gen, "chatcmpl-" + std::to_string(::getpid()) + "-" + std::to_string(++m_next_id),
                           static_cast<int64_t>(std::time(nullptr)), model_name())};
}

Result<StreamedCompletion> EngineServer::stream_chat(const std::string& body) {
  FR_ASSIGN(auto parsed, parse_chat(body));
  const auto& [c, prompt] = parsed;
  if (!c.stream) return make_error(Errc::kInvalidArgument, "'stream' is not true");
  FR_ASSIGN(auto gen, generate(c.prompts[0], c.max_tokens, -1));
  return build_chat_stream_events(c, prompt.role, gen,
                                  "chatcmpl-" + std::to_string(::getpid()) + "-" + std::to_string(++m_next_id),
                                  static_cast<int64_t>(std::time(nullptr)), model_name());
}

void EngineServer::send_stream(std::shared_ptr<StreamedCompletion> events, httplib::Response& res) {
  // One event per token, the token delay before each (a kill lands mid-stream); the head events (a chat
  // stream's role chunk) go out at once, and so do the last ones (usage, [DONE]). m_in_flight counts the
  // stream until its last byte is written.
  auto next = std::make_shared<size_t>(0);
  const double delay = m_options.faults.token_delay_s;
  res.status = 200;
  res.set_chunked_content_provider(
      "text/event-stream",
      [events, next, delay](size_t, httplib::DataSink& sink) {
        if (*next >= events->events.size()) {
          sink.done();
          return true;
        }
        if (delay > 0 && *next >= events->head_events && *next < events->token_events)
          std::this_thread::sleep_for(std::chrono::duration<double>(delay));
        const std::string& ev = events->events[(*next)++];
        return sink.write(ev.data(), ev.size());
      },
      [this](bool) { --m_in_flight; });
}

void EngineServer::routes(httplib::Server& s) {
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    block_if_hung();
    const State st = m_state;
    if (st == State::kReady && m_tp) {
      if (auto why = m_tp->check(); !why.empty()) return send(res, 503, {{"status", "broken"}, {"reason", why}});
    }
    if (st == State::kReady) send(res, 200, {{"status", "ok"}});
    else send(res, 503, {{"status", state_name(st)}});
  });
  s.Get("/stats", [this](const httplib::Request&, httplib::Response& res) {
    block_if_hung();
    send(res, 200, stats());
  });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    block_if_hung();
    if (m_state == State::kLoading) return send(res, 503, error_body(503, "the model is loading"));
    send(res, 200, models());
  });
  // Both generation endpoints share the counting and the streamed/whole split; only their request shape
  // differs (docs/tinyengine.md, "Chat").
  auto generation = [this](auto streamed_of, auto whole_of) {
    return [this, streamed_of, whole_of](const httplib::Request& req, httplib::Response& res) {
      block_if_hung();
      if (m_state == State::kLoading) return send(res, 503, error_body(503, "the model is loading"));
      ++m_in_flight;
      auto parsed = parse_json_bounded(req.body, {32, 65536, "the request body"});
      if (parsed.ok() && parsed->is_object() && parsed->value("stream", false) == true) {
        auto streamed = (this->*streamed_of)(req.body);
        if (!streamed) {
          --m_in_flight;
          ++m_errors;
          auto [status, body] = error_answer(streamed.error());
          return send(res, status, body);
        }
        ++m_completions;
        return send_stream(std::make_shared<StreamedCompletion>(std::move(*streamed)), res);
      }
      auto [status, body] = (this->*whole_of)(req.body);
      --m_in_flight;
      if (status != 200) ++m_errors;
      else ++m_completions;
      send(res, status, body);
    };
  };
  s.Post("/v1/completions", generation(&EngineServer::stream_completion, &EngineServer::complete));
  s.Post("/v1/chat/completions", generation(&EngineServer::stream_chat, &EngineServer::chat));
  s.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    send(res, res.status, error_body(res.status, res.status == 404 ? "no route " + req.path : "request failed"));
  });
  s.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send(res, 500, error_body(500, what));
  });
  // The logger runs after the response is written: the place for faults that strike "after M requests".
  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    spdlog::debug("{} {} -> {}", req.method, req.path, res.status);
    if (req.path != "/v1/completions" || res.status != 200) return;
    const auto n = static_cast<int>(++m_answered);
    const auto& f = m_options.faults;
    if (f.exit_after_requests > 0 && n >= f.exit_after_requests) {
      spdlog::warn("fault: exiting with code {} after {} completions", f.exit_code, n);
      std::fflush(nullptr);
      std::_Exit(f.exit_code);
    }
    if (f.abort_after_requests > 0 && n >= f.abort_after_requests) {
      spdlog::warn("fault: aborting after {} completions", n);
      std::fflush(nullptr);
      std::abort();
    }
    if (f.hang_after_requests > 0 && n >= f.hang_after_requests) {
      spdlog::warn("fault: hanging after {} completions", n);
      hang();
    }
  });
}

}  // namespace fr::te
