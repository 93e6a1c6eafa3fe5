// Validates Kubernetes manifests (multi-document YAML on stdin, e.g. the output of
// `kubectl kustomize`) against the API schemas shipped in the kubernetes-models
// package, offline. Exit status 1 on the first invalid or unknown object.
//   kubectl kustomize k8s/overlays/cpu | node tools/k8s-validate/validate.mjs
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";

const text = readFileSync(0, "utf8");
const docs = parseAllDocuments(text);
let n = 0;
let failed = false;
for (const doc of docs) {
  if (doc.errors.length) {
    console.error(`YAML error: ${doc.errors[0].message}`);
    process.exit(1);
  }
  const obj = doc.toJSON();
  if (obj == null) continue;
  const { apiVersion, kind } = obj;
  const name = obj.metadata?.name ?? "?";
  // "apps/v1" -> kubernetes-models/apps/v1/Kind; "v1" -> kubernetes-models/v1/Kind;
  // prometheus-operator's CRDs (PrometheusRule) from @kubernetes-models/prometheus-operator.
  const pkg = apiVersion.startsWith("monitoring.coreos.com/")
    ? "@kubernetes-models/prometheus-operator"
    : "kubernetes-models";
  const module = `${pkg}/${apiVersion}/${kind}`;
  let cls;
  try {
    cls = (await import(module))[kind];
  } catch (e) {
    console.error(`${kind}/${name}: no schema for ${apiVersion} ${kind} (${e.message})`);
    failed = true;
    continue;
  }
  try {
    new cls(obj).validate();
    n++;
  } catch (e) {
    console.error(`${kind}/${name}: ${e.message}`);
    failed = true;
  }
}
if (failed) process.exit(1);
console.log(`${n} objects valid`);
