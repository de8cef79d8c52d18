// /health and /ready as functions of the status (health/probes.h): they read it through the status codec,
// so a status that does not decode is down with the field at fault, never a guess.
#include "health/probes.h"

#include <gtest/gtest.h>

namespace fr::health {
namespace {

using nlohmann::json;

TEST(Probes, HealthIsOkWhileEveryDaemonRunsAndDownNamingTheOthers) {
  json s{{"state", "ready"}, {"daemons", {{{"gpu", "0"}, {"state", "ready"}}, {{"gpu", "1"}, {"state", "loading"}}}}};
  EXPECT_EQ(health_probe(s).code, 200);
  s["daemons"][1] = {{"gpu", "1"}, {"state", "dead"}, {"error", "exited unexpectedly: signal 9"}};
  auto a = health_probe(s);
  EXPECT_EQ(a.code, 503);
  EXPECT_EQ(a.body["down"], (json{"daemon 1: dead (exited unexpectedly: signal 9)"}));
  EXPECT_EQ(health_probe(json{{"state", "failed"}}).body["down"], (json{"supervisor: failed"}));
  EXPECT_EQ(health_probe(nullptr).body["down"], (json{"supervisor: not answering"}));
}

TEST(Probes, AStatusThatDoesNotDecodeIsDownNamingTheField) {
  auto a = health_probe(json{{"state", "ready"}, {"daemons", {{{"gpu", "0"}, {"state", 7}}}}});
  EXPECT_EQ(a.code, 503);
  EXPECT_EQ(a.body["down"], (json{"supervisor: unreadable status: status.daemons[0].state: not a string"}));
  auto r = ready_probe(json{{"state", "ready"}, {"reload_in_progress", "yes"}});
  EXPECT_EQ(r.code, 503);
  EXPECT_EQ(r.body["error"], "unreadable status: status.reload_in_progress: not a boolean");
}

TEST(Probes, ReadyReportsTheStateAsAnOperatorReadsIt) {
  EXPECT_EQ(ready_probe(json{{"state", "ready"}, {"status_text", "Ready (warm)"}}).code, 200);
  EXPECT_EQ(ready_probe(json{{"state", "ready"}, {"status_text", "Ready (warm)"}}).body["status_text"], "Ready (warm)");
  EXPECT_EQ(readiness_state(json{{"state", "draining"}}), "restarting");
  EXPECT_EQ(readiness_state(json{{"state", "starting"}, {"reload_in_progress", true}}), "reloading");
  EXPECT_EQ(readiness_state(json{{"state", "stopping"}, {"reload_in_progress", true}}), "stopping");
  EXPECT_EQ(readiness_state(json::object()), "unknown");
}

}  // namespace
}  // namespace fr::health
