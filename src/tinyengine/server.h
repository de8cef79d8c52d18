// The HTTP front end: an OpenAI-compatible subset over cpp-httplib (docs/tinyengine.md, "Endpoints").
//
// Lifecycle: bind() -> start() (answers /health with 503) -> set_ready(model) -> stop(); with a socket
// handed down by the supervisor (docs/listen-socket.md): adopt(fd) -> set_ready(model) -> start() -> stop(),
// so nothing is accepted before the model can serve (connections wait in the kernel's queue). Handlers run on
// httplib's worker threads; the model is immutable once published with set_ready, so requests run
// concurrently without locks.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "fastrestart/result.h"
#include "tinyengine/chat.h"
#include "tinyengine/loader.h"
#include "tinyengine/options.h"
#include "tinyengine/stream.h"

namespace httplib {
class Server;
struct Response;
}

namespace fr::te {

class TpGroup;

class EngineServer {
 public:
  enum class State { kLoading, kReady, kStopping };

  explicit EngineServer(const ServeOptions& options);
  ~EngineServer();

  // Binds host:port (port 0: any free port). Errc::kIo when the address is taken.
  Status bind();
  // Serves on `fd`, a listening socket this process inherited, instead of binding (port() is its port).
  // The socket is shared with the supervisor: stop() stops accepting on it without shutdown(2) (which
  // would end its listening for every holder) and closes only this process's descriptor.
  Status adopt(int fd);
  // Also serves on `fd`, the private endpoint fastrestartd passed beside the public socket
  // (docs/listen-socket.md, "The private endpoint"): the same routes, on a server of its own with its own
  // workers, so fastrestartd's checks never wait behind the clients' requests. start() starts accepting
  // on it first; stop() stops it like the adopted socket.
  Status adopt_probe(int fd);
  int port() const { return m_port; }
  State state() const { return m_state; }
  // Starts the listening thread.
  void start();
  // Publishes the loaded model; /health turns 200.
  void set_ready(std::unique_ptr<LoadedModel> model, double warmup_s, double ready_s);
  // Stops accepting connections and waits up to `grace_s` for in-flight requests; true if they all finished.
  bool stop(double grace_s);

  void set_worker_pid(int pid) { m_worker_pid = pid; }
  // Tensor parallel: /health asks every rank (TpGroup::check), /stats lists them. Set before set_ready.
  void set_tp(TpGroup* group, int size) {
    m_tp = group;
    m_tp_size = size;
  }
  void set_startup_delay(double s) { m_startup_delay_s = s; }
  // Makes every handler block forever from now on (the hang fault).
  void hang() { m_hung = true; }

  // The snapshot exchange's quiesce/resume: pause waits for the completions in flight and holds new ones
  // back (they wait, and run after resume) while the weights are released.
  void pause_for_snapshot();
  void resume_after_snapshot();

  nlohmann::json stats() const;
  nlohmann::json models() const;

  // Handles a completions body; returns the HTTP status and the JSON to send. Public for unit tests.
  // A body with "stream": true is refused here: stream_completion() answers it.
  std::pair<int, nlohmann::json> complete(const std::string& body);
  // A "stream": true completions body: its events (stream.h), or the error (kNotFound: unknown model, 404;
  // kInternal: 500; else 400) to answer before any event. Public for unit tests.
  Result<StreamedCompletion> stream_completion(const std::string& body);
  // The same for a chat completions body (chat.h): the chat.completion answer, or a "stream": true body's
  // chat.completion.chunk events. Public for unit tests.
  std::pair<int, nlohmann::json> chat(const std::string& body);
  Result<StreamedCompletion> stream_chat(const std::string& body);

 private:
  void routes(httplib::Server& s);
  Result<nlohmann::json> parse_request_object(const std::string& body) const;
  Result<CompletionRequest> parse_completion(const std::string& body) const;
  Result<std::pair<CompletionRequest, ChatPrompt>> parse_chat(const std::string& body) const;
  // The fields completions and chat share (temperature, stream, stream_options, return_token_ids, echo, n)
  // and the context length check.
  Status parse_common(const nlohmann::json& req, CompletionRequest& c) const;
  // Streams `events` to the client, the token delay before each token event.
  void send_stream(std::shared_ptr<StreamedCompletion> events, httplib::Response& res);
  Result<Generation> generate(const std::vector<int>& prompt, int max_tokens, int top);
  void block_if_hung() const;
  std::string model_name() const;

  ServeOptions m_options;
  std::unique_ptr<httplib::Server> m_server;
  std::thread m_listener;
  std::mutex m_done_mutex;
  std::condition_variable m_done_cv;
  bool m_listen_done = false;
  int m_port = 0;
  int m_adopted_fd = -1;  // adopt(); closed by stop() once nothing accepts on it
  std::unique_ptr<httplib::Server> m_probe;  // adopt_probe()
  std::thread m_probe_listener;
  bool m_probe_done = false;
  int m_probe_fd = -1;
  void stop_accepting();  // httplib's stop(), or for an adopted socket a stop that leaves it listening
  std::atomic<State> m_state{State::kLoading};
  TpGroup* m_tp = nullptr;
  int m_tp_size = 1;
  std::atomic<bool> m_hung{false};
  std::unique_ptr<LoadedModel> m_model;  // set once, before m_state becomes kReady
  double m_warmup_s = 0, m_ready_s = 0, m_startup_delay_s = 0;
  int m_worker_pid = 0;
  std::atomic<uint64_t> m_completions{0}, m_errors{0}, m_next_id{0};
  std::atomic<uint64_t> m_answered{0};  // completions whose response was written (the faults count these)
  std::atomic<int> m_in_flight{0};
  std::mutex m_gate_mutex;  // the snapshot pause: no generation runs while m_paused
  std::condition_variable m_gate_cv;
  bool m_paused = false;
  int m_generating = 0;
  std::chrono::steady_clock::time_point m_started = std::chrono::steady_clock::now();
};

const char* state_name(EngineServer::State s);

}  // namespace fr::te
