#include "daemon/store.h"

#include <iterator>

namespace fr::daemon {

const char* entry_state_name(EntryState s) {
  static constexpr const char* kNames[] = {"loading", "ready", "failed"};  // in EntryState's order
  static_assert(std::size(kNames) == static_cast<size_t>(EntryState::kFailed) + 1, "a name per EntryState");
  return kNames[static_cast<int>(s)];
}

Store::~Store() { clear(); }

std::shared_ptr<Entry> Store::find(const std::string& fp) {
  auto it = m_entries.find(fp);
  return it == m_entries.end() ? nullptr : it->second;
}

std::shared_ptr<Entry> Store::closest(const proto::Key& key) {
  std::shared_ptr<Entry> best;
  int best_score = -1;
  for (auto& [fp, e] : m_entries) {
    int s = proto::key_similarity(key, e->key);
    if (s > best_score) best_score = s, best = e;
  }
  return best;
}

Status Store::insert(std::shared_ptr<Entry> e) {
  if (m_entries.count(e->fingerprint))
    return make_error(Errc::kBusy, "an entry with fingerprint " + e->fingerprint + " already exists");
  m_entries.emplace(e->fingerprint, std::move(e));
  return {};
}

std::shared_ptr<Entry> Store::remove(const std::string& fp) {
  auto it = m_entries.find(fp);
  if (it == m_entries.end()) return nullptr;
  auto e = std::move(it->second);
  m_entries.erase(it);
  e->cancel = true;
  m_changed.notify_all();
  return e;
}

std::vector<std::shared_ptr<Entry>> Store::all() const {
  std::vector<std::shared_ptr<Entry>> v;
  for (const auto& [fp, e] : m_entries) v.push_back(e);
  return v;
}

uint64_t Store::held_bytes() const {
  uint64_t n = 0;
  for (const auto& [fp, e] : m_entries)
    if (e->pool) n += e->pool->size();
  return n;
}

void retire(std::shared_ptr<Entry> e) {
  if (!e) return;
  e->cancel = true;
  if (e->loader.joinable() && e->loader.get_id() != std::this_thread::get_id()) e->loader.join();
}

void Store::clear() {
  std::vector<std::shared_ptr<Entry>> gone;
  {
    std::lock_guard lk(m_mu);
    for (auto& [fp, e] : m_entries) {
      e->cancel = true;
      gone.push_back(std::move(e));
    }
    m_entries.clear();
    m_changed.notify_all();
  }
  for (auto& e : gone) retire(std::move(e));
}

}  // namespace fr::daemon
