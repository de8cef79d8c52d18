// Identity: the codec round-trips, and a difference in any field is named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "snapshot/identity.h"
#include "support/harness.h"

namespace fr::snapshot {
namespace {

Identity sample() {
  Identity id;
  id.kernel_release = "6.18.44";
  id.criu_version = "4.2.1";
  id.cuda = true;
  id.gpu = {"13000", "GPU-12345678-1234-1234-1234-123456789abc", "NVIDIA H200"};
  id.executable = "/usr/bin/fastrestart-tinyengine";
  id.executable_hash = "0123456789abcdef";
  id.files.push_back(FileIdentity{"/m/model.safetensors", 1, 2, 3, 4, 5});
  id.args = {"serve", "/m", "--port", "8000"};
  id.env = {{"CUDA_VISIBLE_DEVICES", "0"}, {"UV_USE_IO_URING", "0"}};
  return id;
}

TEST(Identity, RoundTripsThroughJson) {
  auto back = identity_from_json(to_json(sample()), "identity");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_FALSE(first_difference(sample(), *back).has_value());
}

TEST(Identity, EqualIdentitiesHaveNoDifference) { EXPECT_EQ(first_difference(sample(), sample()), std::nullopt); }

struct Change {
  const char* field;
  void (*apply)(Identity&);
};

class IdentityField : public ::testing::TestWithParam<Change> {};

TEST_P(IdentityField, IsNamedWhenItDiffers) {
  Identity now = sample();
  GetParam().apply(now);
  auto d = first_difference(sample(), now);
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->find(std::string("identity.") + GetParam().field + ":"), std::string::npos) << *d;
  EXPECT_NE(d->find("recorded"), std::string::npos) << *d;
}

INSTANTIATE_TEST_SUITE_P(
    Fields, IdentityField,
    ::testing::Values(Change{"kernel_release", [](Identity& i) { i.kernel_release = "6.1.0"; }},
                      Change{"criu_version", [](Identity& i) { i.criu_version = "4.1"; }},
                      Change{"gpu.driver_version", [](Identity& i) { i.gpu.driver_version = "12080"; }},
                      Change{"gpu.uuid", [](Identity& i) { i.gpu.uuid = "GPU-00000000-0000-0000-0000-000000000000"; }},
                      Change{"gpu.name", [](Identity& i) { i.gpu.name = "NVIDIA H100"; }},
                      Change{"executable_hash", [](Identity& i) { i.executable_hash = "ffff"; }},
                      Change{"files[0].inode", [](Identity& i) { i.files[0].ino = 99; }},
                      Change{"files[0].size", [](Identity& i) { i.files[0].size = 99; }},
                      Change{"files[0].ctime_ns", [](Identity& i) { i.files[0].ctime_ns = 99; }},
                      Change{"files", [](Identity& i) { i.files.clear(); }},
                      Change{"args[3]", [](Identity& i) { i.args[3] = "8001"; }},
                      Change{"env.UV_USE_IO_URING", [](Identity& i) { i.env.erase("UV_USE_IO_URING"); }},
                      Change{"env.EXTRA", [](Identity& i) { i.env["EXTRA"] = "1"; }}),
    [](const auto& p) {
      std::string n = p.param.field;
      for (char& c : n)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      return n;
    });

TEST(Identity, GpuFieldsDoNotMatterForACpuEngine) {
  Identity a = sample(), b = sample();
  a.cuda = b.cuda = false;
  b.gpu = {};
  EXPECT_EQ(first_difference(a, b), std::nullopt);
}

TEST(Identity, CollectHashesTheExecutableAndStatsTheFiles) {
  test::TempDir dir;
  std::ofstream(dir / "engine") << "#!/bin/sh\n";
  std::ofstream(dir / "w.safetensors") << "weights";
  EngineSpec spec;
  spec.argv = {dir / "engine", "serve"};
  spec.files = {dir / "w.safetensors"};
  spec.env = {{"A", "1"}};
  auto id = collect_identity(spec, "4.2.1");
  ASSERT_TRUE(id.ok()) << id.error().message;
  EXPECT_EQ(id->args, std::vector<std::string>{"serve"});
  EXPECT_EQ(id->files.at(0).size, 7u);
  EXPECT_EQ(id->executable_hash.size(), 16u);
  // Rewriting the engine binary changes its hash.
  std::ofstream(dir / "engine") << "#!/bin/sh\nexit 1\n";
  auto again = collect_identity(spec, "4.2.1");
  ASSERT_TRUE(again.ok());
  auto d = first_difference(*id, *again);
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->find("identity.executable_hash"), std::string::npos) << *d;
}

TEST(Identity, CollectNamesAMissingFile) {
  EngineSpec spec;
  spec.argv = {"/nonexistent/engine"};
  auto id = collect_identity(spec, "4.2.1");
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.error().message.find("/nonexistent/engine"), std::string::npos) << id.error().message;
}

TEST(Identity, CollectKeepsTheFilesInOrderAndNamesAMissingOne) {
  test::TempDir dir;
  std::ofstream(dir / "engine") << "#!/bin/sh\n";
  std::ofstream(dir / "a.safetensors") << "a";
  std::ofstream(dir / "b.safetensors") << "bb";
  EngineSpec spec;
  spec.argv = {dir / "engine"};
  spec.files = {dir / "b.safetensors", dir / "a.safetensors"};
  auto id = collect_identity(spec, "4.2.1");
  ASSERT_TRUE(id.ok()) << id.error().message;
  ASSERT_EQ(id->files.size(), 2u);
  EXPECT_EQ(id->files[0].size, 2u);
  EXPECT_EQ(id->files[1].size, 1u);
  spec.files.push_back(dir / "gone.safetensors");
  auto missing = collect_identity(spec, "4.2.1");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("gone.safetensors"), std::string::npos) << missing.error().message;
}

TEST(Identity, AnInterpretedEnginesScriptAndConfigAreHashedButNotTheCheckpoint) {
  test::TempDir dir;
  std::ofstream(dir / "engine.py") << "print('v1')\n";
  std::ofstream(dir / "engine.toml") << "a = 1\n";
  std::ofstream(dir / "w.safetensors") << "weights";
  EngineSpec spec;
  spec.argv = {"/bin/sh", dir / "engine.py", "--config=" + (dir / "engine.toml"), dir.path(),
               dir / "w.safetensors", "relative.py", "--port", "8000"};
  spec.files = {dir / "w.safetensors"};
  auto id = collect_identity(spec, "4.2.1");
  ASSERT_TRUE(id.ok()) << id.error().message;
  // The script and the --flag=PATH config; not the directory, the checkpoint file or a relative path.
  ASSERT_EQ(id->arg_hashes.size(), 2u);
  EXPECT_TRUE(id->arg_hashes.count(dir / "engine.py"));
  EXPECT_TRUE(id->arg_hashes.count(dir / "engine.toml"));
  auto back = identity_from_json(to_json(*id), "identity");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->arg_hashes, id->arg_hashes);
  // The same interpreter with a changed script is another engine.
  std::ofstream(dir / "engine.py") << "print('v2')\n";
  auto now = collect_identity(spec, "4.2.1");
  ASSERT_TRUE(now.ok());
  auto d = first_difference(*id, *now);
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->rfind("identity.arg_hashes[" + (dir / "engine.py") + "]: recorded ", 0), 0u) << *d;
  EXPECT_NE(d->find("changed)"), std::string::npos) << *d;
  // A script that is gone is named too.
  ::unlink((dir / "engine.py").c_str());
  auto gone = collect_identity(spec, "4.2.1");
  ASSERT_TRUE(gone.ok());
  d = first_difference(*id, *gone);
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->find("(not a readable file)"), std::string::npos) << *d;
}

TEST(Identity, AManifestFromBeforeArgumentHashesStillDecodes) {
  auto j = to_json(sample());
  j.erase("arg_hashes");
  auto back = identity_from_json(j, "manifest.identity");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_TRUE(back->arg_hashes.empty());
  j["arg_hashes"] = {{"/x.py", 3}};
  auto bad = identity_from_json(j, "manifest.identity");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("manifest.identity.arg_hashes"), std::string::npos) << bad.error().message;
}

TEST(Identity, DecodingNamesABadFileEntry) {
  Identity id = sample();
  id.files.push_back(FileIdentity{"/m/model-2.safetensors", 1, 3, 3, 4, 5});
  auto j = to_json(id);
  j["files"][1]["ino"] = "3";
  auto bad = identity_from_json(j, "manifest.identity");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message.rfind("manifest.identity.files[1].ino: ", 0), 0u) << bad.error().message;
}

TEST(EngineSpec, RoundTripsAndNamesBadFields) {
  EngineSpec s;
  s.argv = {"/bin/engine", "--port", "8000"};
  s.port = 8000;
  auto back = spec_from_json(to_json(s), "spec");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->argv, s.argv);
  auto j = to_json(s);
  j["port"] = "8000";
  auto bad = spec_from_json(j, "spec.json: spec");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message, "spec.json: spec.port: expected an integer");
}

// A rotated key (a flag or a variable of engine.env) is a difference, shown as two digests and never as
// the keys: the text goes to the status, STATUS= and the log.
TEST(Identity, ARotatedSecretDiffersWithoutShowingEitherValue) {
  Identity a = sample(), b = sample();
  a.args = {"serve", "/m", "--api-key", "sk-old-value", "--port", "8000"};
  b.args = {"serve", "/m", "--api-key", "sk-new-value", "--port", "8000"};
  auto d = first_difference(a, b);
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->find("identity.args[3]"), std::string::npos) << *d;
  EXPECT_NE(d->find("<secret xxh64:"), std::string::npos) << *d;
  EXPECT_EQ(d->find("sk-old-value"), std::string::npos) << *d;
  EXPECT_EQ(d->find("sk-new-value"), std::string::npos) << *d;

  a = sample(), b = sample();
  a.env["HF_TOKEN"] = "hf_old_token";
  b.env["HF_TOKEN"] = "hf_new_token";
  d = first_difference(a, b);
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->find("identity.env.HF_TOKEN"), std::string::npos) << *d;
  EXPECT_EQ(d->find("hf_old_token"), std::string::npos) << *d;
  EXPECT_EQ(d->find("hf_new_token"), std::string::npos) << *d;
  // A public variable and an ordinary flag are still shown.
  d = first_difference(sample(), [] { auto i = sample(); i.env["UV_USE_IO_URING"] = "1"; return i; }(), {}, {"UV_USE_IO_URING"});
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->find("recorded \"0\", now \"1\""), std::string::npos) << *d;
  d = first_difference(sample(), [] { auto i = sample(); i.args[3] = "8001"; return i; }());
  ASSERT_TRUE(d.has_value());
  EXPECT_NE(d->find("now \"8001\""), std::string::npos) << *d;
  // A flag the config marks secret.
  a = sample(), b = sample();
  a.args.insert(a.args.end(), {"--custom-opt", "old-custom"});
  b.args.insert(b.args.end(), {"--custom-opt", "new-custom"});
  d = first_difference(a, b, {"--custom-opt"});
  ASSERT_TRUE(d.has_value());
  EXPECT_EQ(d->find("old-custom"), std::string::npos) << *d;
  EXPECT_EQ(d->find("new-custom"), std::string::npos) << *d;
}

TEST(Identity, TheManifestRecordsSecretsAsDigestsAndStillMatches) {
  test::TempDir dir;
  std::ofstream(dir / "engine") << "#!/bin/sh\n";
  EngineSpec spec;
  spec.argv = {dir / "engine", "serve", "--api-key", "sk-in-manifest", "--x=1", "--custom-opt=c-in-manifest"};
  spec.env = {{"HF_TOKEN", "hf_in_manifest"}, {"VISIBLE", "shown-value"}};
  spec.secret_flags = {"--custom-opt"};
  spec.public_env = {"VISIBLE"};
  spec.port = 8000;
  auto back = spec_from_json(to_json(spec), "spec");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(back->secret_flags, spec.secret_flags);
  EXPECT_EQ(back->public_env, spec.public_env);
  auto id = collect_identity(*back, "4.2.1");
  ASSERT_TRUE(id.ok()) << id.error().message;
  const std::string manifest = to_json(*id).dump();
  for (const char* secret : {"sk-in-manifest", "c-in-manifest", "hf_in_manifest"})
    EXPECT_EQ(manifest.find(secret), std::string::npos) << secret << " in " << manifest;
  EXPECT_NE(manifest.find("shown-value"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find("--x=1"), std::string::npos) << manifest;
  // The same engine matches its manifest; so does a manifest written before secrets were hidden.
  auto again = collect_identity(*back, "4.2.1");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(first_difference(*id, *again, spec.secret_flags, spec.public_env), std::nullopt);
  Identity old = *id;
  old.args = {"serve", "--api-key", "sk-in-manifest", "--x=1", "--custom-opt=c-in-manifest"};
  old.env = spec.env;
  EXPECT_EQ(first_difference(old, *again, spec.secret_flags, spec.public_env), std::nullopt);
}

}  // namespace
}  // namespace fr::snapshot
