// Checks the Kubernetes manifests of deploy/kubernetes (docs/kubernetes.md), without a cluster:
//   1. every YAML document parses and validates against the Kubernetes API schemas of the pinned version
//      (kubernetes-models 4.5.1 = Kubernetes v1.33.0, package.json beside this file); a LeaderWorkerSet
//      against the vendored schema of its CRD (deploy/kubernetes/schemas/), its pod templates against
//      core/v1 PodTemplateSpec;
//   2. every container that runs fastrestartd (`--config /etc/fastrestart/<name>.toml`) against the config it
//      mounts from a ConfigMap: http.listen is reachable by the kubelet and its port is the probes' port;
//      startupProbe and livenessProbe ask /health, readinessProbe /ready; terminationGracePeriodSeconds
//      >= engine.stop_grace_s + the weight daemons' 30 s stop grace (docs/systemd.md, TimeoutStopSec); the
//      nvidia.com/gpu limit covers `gpus` (indexes inside the pod, not UUIDs); control.state_dir is on a
//      volume; and, with --fastrestartd BIN, `fastrestartd --check --syntax-only` accepts the config (the
//      host checks need the node: its model directory and engine).
// Usage: node check-manifests.mjs DIR [--fastrestartd BIN]. Exit 0: all good; 1: the errors are printed,
// each naming the file, the document and the field.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { execFileSync } from "node:child_process";
import YAML from "yaml";
import { parse as parseToml } from "smol-toml";
import Ajv from "ajv";

const kDaemonStopGraceS = 30;  // fastrestartd's grace for the weight daemons (src/supervisor/supervisor.cc)
const args = process.argv.slice(2);
const dir = args[0];
const fastrestartd = args.indexOf("--fastrestartd") >= 0 ? args[args.indexOf("--fastrestartd") + 1] : "";
if (!dir) {
  console.error("usage: node check-manifests.mjs DIR [--fastrestartd BIN]");
  process.exit(2);
}
const errors = [];
const err = (where, msg) => errors.push(`${where}: ${msg}`);

// ---- 1. parse and validate against the schemas
const files = [];
(function walk(d) {
  for (const e of fs.readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const p = path.join(d, e.name);
    if (e.isDirectory()) { if (e.name !== "schemas") walk(p); }
    else if (/\.ya?ml$/.test(e.name)) files.push(p);
  }
})(dir);
if (files.length === 0) err(dir, "no manifests (*.yaml)");

const docs = [];  // {obj, where}
for (const f of files) {
  const text = fs.readFileSync(f, "utf8");
  const rel = path.relative(path.dirname(path.resolve(dir)), f);
  YAML.parseAllDocuments(text, { prettyErrors: true }).forEach((doc, i) => {
    for (const e of doc.errors) err(`${rel}:${e.linePos?.[0]?.line ?? "?"}`, `YAML: ${e.message.split("\n")[0]}`);
    if (doc.errors.length) return;
    const obj = doc.toJS();
    if (obj == null) return;
    const line = text.slice(0, doc.range[0]).split("\n").length;
    docs.push({ obj, where: `${rel}:${line} (${obj.kind ?? "?"} ${obj.metadata?.name ?? "?"})` });
  });
}

async function modelClass(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  const mod = `kubernetes-models/${group ? group + "/" : ""}${version}/${kind}`;
  try {
    return (await import(mod))[kind];
  } catch {
    return null;
  }
}
const { PodTemplateSpec } = await import("kubernetes-models/v1/PodTemplateSpec");
const schemaErrors = (e) => (e.errors ?? [{ instancePath: "", message: e.message }])
  .map((x) => `${x.instancePath || "/"} ${x.message}${x.params?.additionalProperty ? ` ('${x.params.additionalProperty}')` : ""}${x.params?.allowedValues ? ` (${x.params.allowedValues.join(", ")})` : ""}`);

const ajv = new Ajv({ allErrors: true, strict: false });
ajv.addFormat("int32", { type: "number", validate: (x) => Number.isInteger(x) && x >= -(2 ** 31) && x < 2 ** 31 });
ajv.addKeyword({
  keyword: "x-fastrestart-pod-template-spec",
  errors: true,
  validate: function podTemplate(_schema, data, _parent, ctx) {
    try {
      new PodTemplateSpec(data).validate();
      return true;
    } catch (e) {
      podTemplate.errors = schemaErrors(e).map((m) => ({ instancePath: ctx?.instancePath ?? "", message: `(core/v1 PodTemplateSpec) ${m}` }));
      return false;
    }
  },
});
const lwsSchema = YAML.parse(fs.readFileSync(path.join(dir, "schemas", "leaderworkerset.x-k8s.io_v1.schema.yaml"), "utf8"));
const validateLws = ajv.compile(lwsSchema);

for (const { obj, where } of docs) {
  if (typeof obj.apiVersion !== "string" || typeof obj.kind !== "string") {
    err(where, "no apiVersion or kind");
    continue;
  }
  if (obj.apiVersion === "leaderworkerset.x-k8s.io/v1" && obj.kind === "LeaderWorkerSet") {
    if (!validateLws(obj)) for (const e of validateLws.errors) err(where, `schema (LeaderWorkerSet CRD): ${e.instancePath || "/"} ${e.message}${e.params?.additionalProperty ? ` ('${e.params.additionalProperty}')` : ""}${e.params?.allowedValues ? ` (${e.params.allowedValues.join(", ")})` : ""}`);
    continue;
  }
  const Cls = await modelClass(obj.apiVersion, obj.kind);
  if (!Cls) {
    err(where, `${obj.apiVersion} ${obj.kind} is not a Kubernetes v1.33 API type`);
    continue;
  }
  try {
    new Cls(obj).validate();
  } catch (e) {
    for (const m of schemaErrors(e)) err(where, `schema (Kubernetes v1.33.0 ${obj.apiVersion} ${obj.kind}): ${m}`);
  }
}

// ---- 2. fastrestartd's containers against the configs they mount
const configMaps = new Map(docs.filter((d) => d.obj.kind === "ConfigMap").map((d) => [d.obj.metadata?.name, d]));
const podTemplates = [];
for (const { obj, where } of docs) {
  if (["Deployment", "StatefulSet", "DaemonSet"].includes(obj.kind)) podTemplates.push({ tpl: obj.spec?.template, where, field: "spec.template" });
  if (obj.kind === "LeaderWorkerSet") {
    const t = obj.spec?.leaderWorkerTemplate ?? {};
    if (t.leaderTemplate) podTemplates.push({ tpl: t.leaderTemplate, where, field: "spec.leaderWorkerTemplate.leaderTemplate" });
    if (t.workerTemplate) podTemplates.push({ tpl: t.workerTemplate, where, field: "spec.leaderWorkerTemplate.workerTemplate" });
  }
}

function parseListen(listen) {
  if (listen === "none") return null;
  const m = /^(\[[^\]]+\]|[^:]+):(\d+)$/.exec(listen);
  return m ? { host: m[1].replace(/^\[|\]$/g, ""), port: Number(m[2]) } : undefined;
}

let checkedContainers = 0;
for (const { tpl, where, field } of podTemplates) {
  const spec = tpl?.spec ?? {};
  for (const [ci, c] of (spec.containers ?? []).entries()) {
    const cw = `${where} ${field}.spec.containers[${ci}] (${c.name})`;
    const argv = [...(c.command ?? []), ...(c.args ?? [])];
    const at = argv.findIndex((a) => a === "--config" || a === "-c");
    if (at < 0) continue;  // not fastrestartd
    checkedContainers++;
    const cfgPath = argv[at + 1] ?? "";
    if (!/^\/etc\/fastrestart\/[A-Za-z0-9._-]+\.toml$/.test(cfgPath)) {
      err(cw, `--config ${cfgPath}: the image expects /etc/fastrestart/<name>.toml`);
      continue;
    }
    // The ConfigMap volume mounted at /etc/fastrestart (or the file itself with subPath).
    const mount = (c.volumeMounts ?? []).find((m) => m.mountPath === path.dirname(cfgPath) || m.mountPath === cfgPath);
    const vol = mount && (spec.volumes ?? []).find((v) => v.name === mount.name);
    if (!vol?.configMap) {
      err(cw, `${cfgPath} is not mounted from a ConfigMap (volumeMounts at ${path.dirname(cfgPath)})`);
      continue;
    }
    const cm = configMaps.get(vol.configMap.name);
    if (!cm) {
      err(cw, `volume ${vol.name}: ConfigMap ${vol.configMap.name} is not among the manifests`);
      continue;
    }
    const file = mount.mountPath === cfgPath ? mount.subPath : path.basename(cfgPath);
    const item = (vol.configMap.items ?? []).find((it) => it.path === file);
    const key = vol.configMap.items ? item?.key : file;
    const text = key !== undefined ? cm.obj.data?.[key] : undefined;
    if (text === undefined) {
      err(cw, `${cfgPath}: ConfigMap ${vol.configMap.name} has no key for ${file}${vol.configMap.items ? " in the volume's items" : ""}`);
      continue;
    }
    const tw = `${cm.where} data["${key}"]`;
    let cfg;
    try {
      cfg = parseToml(text);
    } catch (e) {
      err(tw, `TOML: ${e.message.split("\n")[0]}`);
      continue;
    }
    if (fastrestartd) {
      const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "fr-k8s-"));
      const f = path.join(tmp, path.basename(cfgPath));
      fs.writeFileSync(f, text);
      try {
        execFileSync(fastrestartd, ["--check", "--syntax-only", "--config", f], { stdio: "pipe" });
      } catch (e) {
        err(tw, `fastrestartd --check: ${(e.stdout + e.stderr).toString().trim().replaceAll(f, path.basename(cfgPath))}`);
      }
      fs.rmSync(tmp, { recursive: true });
    }

    // The HTTP listener the probes ask.
    const listen = parseListen(cfg.http?.listen ?? "127.0.0.1:9400");
    if (listen === undefined) { err(tw, `http.listen "${cfg.http.listen}" does not parse`); continue; }
    if (listen === null) { err(tw, `http.listen = "none": the probes need fastrestartd's HTTP listener`); continue; }
    if (/^(127\.|::1$|localhost$)/.test(listen.host))
      err(tw, `http.listen "${cfg.http?.listen ?? "127.0.0.1:9400"}" is loopback: the kubelet probes the pod's IP; use "0.0.0.0:${listen.port}"`);
    const portOf = (p) => (typeof p === "string" ? (c.ports ?? []).find((x) => x.name === p)?.containerPort : p);
    for (const [probe, want] of [["startupProbe", "/health"], ["livenessProbe", "/health"], ["readinessProbe", "/ready"]]) {
      const pr = c[probe];
      if (!pr) { err(cw, `no ${probe} (${want} on port ${listen.port})`); continue; }
      if (!pr.httpGet) { err(cw, `${probe}: not an httpGet probe (want ${want} on port ${listen.port})`); continue; }
      if (pr.httpGet.path !== want) err(cw, `${probe}.httpGet.path ${pr.httpGet.path}: want ${want} (docs/health.md)`);
      const port = portOf(pr.httpGet.port);
      if (port !== listen.port)
        err(cw, `${probe}.httpGet.port ${pr.httpGet.port}${port !== pr.httpGet.port ? ` (= ${port})` : ""} is not http.listen's port ${listen.port} (${cm.obj.metadata.name}: ${key})`);
    }

    // The stop: engine first, then the daemons, inside the kubelet's grace.
    const engineGrace = cfg.engine?.stop_grace_s ?? 30;
    const mode = cfg.weights?.mode ?? "zero_copy";
    const daemon = cfg.weights?.daemon ?? "native";
    const daemonGrace = mode !== "off" && daemon !== "none" ? kDaemonStopGraceS : 0;
    const grace = spec.terminationGracePeriodSeconds ?? 30;
    if (grace < engineGrace + daemonGrace)
      err(`${where} ${field}.spec`, `terminationGracePeriodSeconds ${grace}${spec.terminationGracePeriodSeconds === undefined ? " (the default)" : ""} < engine.stop_grace_s ${engineGrace} + the weight daemons' ${daemonGrace} s (${cm.obj.metadata.name}: ${key}): the kubelet would SIGKILL before the ordered stop ends`);

    // The GPUs: indexes inside the pod, covered by the device plugin's grant.
    const gpus = cfg.gpus ?? [];
    const backend = cfg.weights?.backend ?? "cuda";
    const limit = Number(c.resources?.limits?.["nvidia.com/gpu"] ?? 0);
    if (gpus.length > 0 || (backend === "cuda" && mode !== "off")) {
      if (limit !== gpus.length) err(cw, `resources.limits["nvidia.com/gpu"] ${limit} != the ${gpus.length} GPU(s) of gpus in ${key}`);
      for (const g of gpus)
        if (String(g).startsWith("GPU-")) err(tw, `gpus: ${g}: a UUID names one node's GPU; inside a pod use indexes 0..${limit - 1}`);
        else if (Number(g) >= limit) err(tw, `gpus: ${g} is not among the pod's ${limit} GPU(s) (indexes 0..${limit - 1})`);
    }

    // The state dir on a volume, not in the container's writable layer.
    const name = cfg.model?.name ?? path.basename(cfgPath, ".toml");
    const stateDir = cfg.control?.state_dir || `/var/lib/fastrestart/${name}`;
    if (!(c.volumeMounts ?? []).some((m) => stateDir === m.mountPath || stateDir.startsWith(m.mountPath.replace(/\/$/, "") + "/")))
      err(cw, `control.state_dir ${stateDir} is on no volume (pushed flags would be lost with the container)`);
  }
}
if (podTemplates.length > 0 && checkedContainers === 0) err(dir, "no container runs fastrestartd --config");

if (errors.length) {
  for (const e of errors) console.log(`error: ${e}`);
  console.log(`check-manifests: ${errors.length} error(s) in ${docs.length} documents`);
  process.exit(1);
}
console.log(`check-manifests: ${docs.length} documents valid (Kubernetes v1.33.0; LeaderWorkerSet v1 CRD); ${checkedContainers} fastrestartd containers match their configs`);
