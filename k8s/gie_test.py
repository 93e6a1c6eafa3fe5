#!/usr/bin/env python3
"""Checks k8s/examples/gie (herd workers behind the Gateway API Inference Extension).

Renders it with `kubectl kustomize` (offline) and checks:
  * every herd container's args (after $(VAR) expansion) are flags its binary lists and
    accepts together (--only_check_args), as manifests_test does for the overlays;
  * each worker pod's OpenAI sidecar (a herd gateway) routes to the worker container of
    its own pod (--workers=127.0.0.1:<the worker's --port>), serves HTTP on a declared
    port that is the InferencePool's target port, and drains within the pod's grace;
  * the InferencePool selects exactly the worker pods, its endpointPickerRef is a Service
    leading to the EPP Deployment, whose --pool-name / --pool-namespace name the pool;
  * every metric the EPP is told to scrape is one the worker binary exports, on the
    worker's --metrics_port;
  * NetworkPolicies admit the sidecar port, the EPP's gRPC port and the EPP's scrapes;
  * the HTTPRoute sends to the pool.
Skips (exit 0 with a message) when kubectl is not installed.
"""
import os
import shutil
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import manifests_test as mt  # noqa: E402  (shared helpers: run, flags, expansion)

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg)


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.items())


def allows(policies, pod_labels, port, from_labels=None):
    """Some NetworkPolicy admits TCP `port` into pods with pod_labels (from pods with
    from_labels, or from anywhere when that is None)."""
    for p in policies:
        spec = p["spec"]
        sel = spec.get("podSelector", {})
        if not matches(sel.get("matchLabels", {}), pod_labels):
            continue
        if any(pod_labels.get(e["key"]) not in e.get("values", []) for e in sel.get("matchExpressions", [])):
            continue
        for rule in spec.get("ingress", []):
            if port not in [pp.get("port") for pp in rule.get("ports", [])]:
                continue
            peers = rule.get("from")
            if peers is None:
                return True
            if from_labels is not None and any(
                    matches(f.get("podSelector", {}).get("matchLabels", {}), from_labels) for f in peers
                    if "podSelector" in f and "namespaceSelector" not in f):
                return True
    return False


def main():
    if shutil.which("kubectl") is None:
        print("SKIP: kubectl not found; k8s/examples/gie not rendered")
        return 0
    work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    k8s = os.path.join(work, "k8s")
    shutil.copytree(os.path.join(mt.SRC, "k8s"), k8s, symlinks=False)
    out = mt.run(["kubectl", "kustomize", os.path.join(k8s, "examples", "gie")])
    if out.returncode != 0:
        fail(f"kubectl kustomize k8s/examples/gie: {out.stderr.strip()}")
        return 1
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    objs = {}
    for d in docs:
        objs.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    configmaps = {n: cm.get("data", {}) for n, cm in objs.get("ConfigMap", {}).items()}
    table = mt.image_table()
    bin_dir = mt.SRC

    # Every herd container: args its binary accepts.
    containers = {}  # (deployment, container) -> (image name or None, args, container)
    for dname, dep in objs.get("Deployment", {}).items():
        for c in dep["spec"]["template"]["spec"]["containers"]:
            args = [mt.expand(a, mt.container_env(c, configmaps)) for a in c.get("args", [])]
            image = c["image"]
            name = None
            if image.startswith("ghcr.io/herd/herd-"):
                name = image[len("ghcr.io/herd/herd-"):].split(":")[0]
                binary = os.path.join(bin_dir, table[name])
                flags = mt.accepted_flags(binary)
                for a in args:
                    if a[2:].split("=", 1)[0] not in flags:
                        fail(f"{dname}/{c['name']}: {table[name]} does not accept {a}")
                chk = mt.run([binary] + args + ["--only_check_args"])
                if chk.returncode != 0:
                    fail(f"{dname}/{c['name']}: {table[name]} rejects its args: {(chk.stderr or chk.stdout).strip()}")
            containers[(dname, c["name"])] = (name, args, c)

    # The worker pods and their OpenAI sidecars.
    worker_deps = [d for d, dep in objs.get("Deployment", {}).items()
                   if any((containers[(d, c["name"])][0] or "").startswith("worker-")
                          for c in dep["spec"]["template"]["spec"]["containers"])]
    if not worker_deps:
        fail("no worker Deployment")
    pools = objs.get("InferencePool", {})
    if len(pools) != 1:
        fail(f"expected one InferencePool, found {sorted(pools)}")
        return 1
    pool_name, pool = next(iter(pools.items()))
    target = pool["spec"]["targetPorts"][0]["number"]
    worker_metrics_ports = set()
    for d in worker_deps:
        tmpl = objs["Deployment"][d]["spec"]["template"]
        cs = tmpl["spec"]["containers"]
        worker = [c for c in cs if (containers[(d, c["name"])][0] or "").startswith("worker-")][0]
        wargs = containers[(d, worker["name"])][1]
        worker_metrics_ports.add(int(mt.flag_value(wargs, "metrics_port")))
        sidecars = [c for c in cs if containers[(d, c["name"])][0] == "gateway"]
        if len(sidecars) != 1:
            fail(f"{d}: expected one herd gateway sidecar, found {len(sidecars)}")
            continue
        s = sidecars[0]
        sargs = containers[(d, s["name"])][1]
        if mt.flag_value(sargs, "workers") != f"127.0.0.1:{mt.flag_value(wargs, 'port')}":
            fail(f"{d}/{s['name']}: --workers={mt.flag_value(sargs, 'workers')} is not its own worker "
                 f"(127.0.0.1:{mt.flag_value(wargs, 'port')})")
        ports = {p["containerPort"] for p in s.get("ports", [])}
        http = int(mt.flag_value(sargs, "http_port") or -1)
        if http not in ports or http != target:
            fail(f"{d}/{s['name']}: --http_port={http}: declared {sorted(ports)}, pool target port {target}")
        pre = ((s.get("lifecycle") or {}).get("preStop") or {}).get("sleep", {}).get("seconds")
        grace = mt.flag_value(sargs, "grace_ms")
        tgps = tmpl["spec"].get("terminationGracePeriodSeconds", 30)
        if pre is None or grace is None or tgps < int(pre) + int(grace) / 1000 + 5:
            fail(f"{d}/{s['name']}: preStop {pre} s + --grace_ms {grace} + 5 s exceed the pod's grace {tgps} s")
        if not matches(pool["spec"]["selector"]["matchLabels"], tmpl["metadata"].get("labels", {})):
            fail(f"InferencePool {pool_name} does not select the pods of {d}")
    for d, dep in objs.get("Deployment", {}).items():
        if d not in worker_deps and matches(pool["spec"]["selector"]["matchLabels"],
                                            dep["spec"]["template"]["metadata"].get("labels", {})):
            fail(f"InferencePool {pool_name} also selects {d}, which is not a worker")

    # The endpoint picker.
    ref = pool["spec"]["endpointPickerRef"]
    svc = objs.get("Service", {}).get(ref["name"])
    epp_deps = []
    if svc is None:
        fail(f"endpointPickerRef {ref['name']}: no such Service")
    else:
        if ref["port"]["number"] not in [p["port"] for p in svc["spec"]["ports"]]:
            fail(f"Service {ref['name']} has no port {ref['port']['number']}")
        epp_deps = [d for d, dep in objs.get("Deployment", {}).items()
                    if matches(svc["spec"]["selector"], dep["spec"]["template"]["metadata"].get("labels", {}))]
        if len(epp_deps) != 1:
            fail(f"Service {ref['name']} selects {epp_deps}, expected one EPP Deployment")
    worker_bin = open(os.path.join(bin_dir, table["worker-cpu"]), "rb").read()
    for d in epp_deps:
        tmpl = objs["Deployment"][d]["spec"]["template"]
        c = tmpl["spec"]["containers"][0]
        args = containers[(d, c["name"])][1]
        if mt.flag_value(args, "pool-name") != pool_name:
            fail(f"{d}: --pool-name={mt.flag_value(args, 'pool-name')}, the pool is {pool_name}")
        if mt.flag_value(args, "pool-namespace") != pool["metadata"].get("namespace"):
            fail(f"{d}: --pool-namespace={mt.flag_value(args, 'pool-namespace')}, "
                 f"the pool is in {pool['metadata'].get('namespace')}")
        if int(mt.flag_value(args, "grpc-port") or -1) != ref["port"]["number"]:
            fail(f"{d}: --grpc-port is not the endpointPickerRef port {ref['port']['number']}")
        if int(mt.flag_value(args, "model-server-metrics-port") or -1) not in worker_metrics_ports:
            fail(f"{d}: --model-server-metrics-port is not a worker --metrics_port {sorted(worker_metrics_ports)}")
        for f in ("total-queued-requests-metric", "total-running-requests-metric",
                  "kv-cache-usage-percentage-metric", "cache-info-metric"):
            metric = mt.flag_value(args, f)
            if not metric or metric.encode() not in worker_bin:
                fail(f"{d}: --{f}={metric}: the worker exports no such metric")
        epp_labels = tmpl["metadata"].get("labels", {})
        policies = list(objs.get("NetworkPolicy", {}).values())
        if not allows(policies, epp_labels, ref["port"]["number"]):
            fail(f"no NetworkPolicy admits the EPP's port {ref['port']['number']}")
        for wd in worker_deps:
            wl = objs["Deployment"][wd]["spec"]["template"]["metadata"].get("labels", {})
            if not allows(policies, wl, target):
                fail(f"no NetworkPolicy admits {wd}'s OpenAI port {target}")
            for mp in worker_metrics_ports:
                if not allows(policies, wl, mp, epp_labels):
                    fail(f"no NetworkPolicy admits the EPP's scrapes of {wd}:{mp}")

    routes = [r for r in objs.get("HTTPRoute", {}).values()
              if any(b.get("kind") == "InferencePool" and b.get("name") == pool_name
                     for rule in r["spec"].get("rules", []) for b in rule.get("backendRefs", []))]
    if not routes:
        fail(f"no HTTPRoute sends to InferencePool {pool_name}")
    if failures or mt.failures:
        print(f"{len(failures) + len(mt.failures)} failure(s)")
        return 1
    print(f"gie: {len(docs)} objects; sidecars, pool, endpoint picker, metrics, policies, route OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
