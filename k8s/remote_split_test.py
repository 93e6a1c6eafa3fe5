#!/usr/bin/env python3
"""Checks k8s/examples/remote-split (one worker whose layers span two pods).

Renders it with `kubectl kustomize` (offline) and checks:
  * everything manifests_test checks for an overlay (images, flags accepted by each
    binary with --only_check_args, exec probes, TLS + cluster key on Secret volumes,
    0.0.0.0, declared ports, resources, drain, policies, PDBs, HPAs), with the
    StatefulSet herd-compute checked like a Deployment;
  * each remote://HOST:PORT of the worker's --backend names a pod of a StatefulSet
    (<statefulset>-<ordinal>.<serviceName>, ordinal < replicas) whose headless Service
    exists, selects those pods and leads PORT to the compute container's --port;
    --tensor_split has one weight per listed backend; --remote_timeout_ms is set;
  * worker and compute server use the same TLS and cluster-key Secrets;
  * one worker per compute server: the worker Deployment has one replica, is replaced
    without a surge (Recreate) and its HPA's maxReplicas is 1;
  * the compute server's --max_buffer_bytes is below its memory limit;
  * NetworkPolicies admit the workers to the compute port and nothing else (no rule from
    anywhere, none from the gateway, loader or draft pods).
Skips (exit 0 with a message) when kubectl is not installed.
"""
import os
import re
import shutil
import sys
import tempfile

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import manifests_test as mt  # noqa: E402  (shared helpers: run, flags, expansion, check_overlay)

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg)


def matches(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", selector).items()) and all(
        (labels.get(e["key"]) in e.get("values", [])) == (e["operator"] == "In")
        for e in selector.get("matchExpressions", []))


def admitted(policies, pod_labels, port, from_labels):
    """Some NetworkPolicy admits TCP `port` into pods with pod_labels from pods with
    from_labels (same namespace); from_labels None = from anywhere (a rule without from)."""
    for p in policies:
        spec = p["spec"]
        if not matches(spec.get("podSelector", {}), pod_labels):
            continue
        for rule in spec.get("ingress", []):
            if port not in [pp.get("port") for pp in rule.get("ports", [])]:
                continue
            peers = rule.get("from")
            if peers is None:
                return True
            if from_labels is not None and any(
                    matches(f["podSelector"], from_labels) for f in peers
                    if "podSelector" in f and "namespaceSelector" not in f):
                return True
    return False


def secrets(tmpl, container):
    """mountPath -> (secretName, projected items) of the container's Secret volumes."""
    vols = {v["name"]: v.get("secret") for v in tmpl["spec"].get("volumes", [])}
    out = {}
    for vm in container.get("volumeMounts", []):
        sec = vols.get(vm["name"])
        if sec is not None:
            out[vm["mountPath"].rstrip("/")] = (sec["secretName"], tuple(i["key"] for i in sec.get("items", [])))
    return out


def mem_bytes(q):
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti)?", str(q))
    if not m:
        return None
    return int(m.group(1)) * {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40}[m.group(2)]


def main():
    if shutil.which("kubectl") is None:
        print("SKIP: kubectl not found; k8s/examples/remote-split not rendered")
        return 0
    table = mt.image_table()
    work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    k8s = os.path.join(work, "k8s")
    shutil.copytree(os.path.join(mt.SRC, "k8s"), k8s, symlinks=False)
    out = mt.run(["kubectl", "kustomize", os.path.join(k8s, "examples", "remote-split")])
    if out.returncode != 0:
        fail(f"kubectl kustomize k8s/examples/remote-split: {out.stderr.strip()}")
        return 1
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    mt.check_overlay("remote-split", docs, table, mt.SRC)
    objs = {}
    for d in docs:
        objs.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    configmaps = {n: cm.get("data", {}) for n, cm in objs.get("ConfigMap", {}).items()}
    stss = objs.get("StatefulSet", {})
    services = objs.get("Service", {})
    policies = list(objs.get("NetworkPolicy", {}).values())

    def herd_container(tmpl, prefix):
        for c in tmpl["spec"]["containers"]:
            if c["image"].startswith(f"ghcr.io/herd/herd-{prefix}"):
                return c
        return None

    workers = {n: d for n, d in objs.get("Deployment", {}).items()
               if herd_container(d["spec"]["template"], "worker-") is not None}
    split_workers = []
    for wname, dep in workers.items():
        tmpl = dep["spec"]["template"]
        wc = herd_container(tmpl, "worker-")
        args = [mt.expand(a, mt.container_env(wc, configmaps)) for a in wc.get("args", [])]
        backend = mt.flag_value(args, "backend") or ""
        entries = backend.split(",")
        remotes = [e[len("remote://"):] for e in entries if e.startswith("remote://")]
        if not remotes:
            continue
        split_workers.append(wname)
        ts = mt.flag_value(args, "tensor_split")
        if ts is None or len(ts.split(",")) != len(entries):
            fail(f"{wname}: --tensor_split={ts} does not weigh each of the {len(entries)} backends of --backend")
        if not mt.flag_value(args, "remote_timeout_ms"):
            fail(f"{wname}: no --remote_timeout_ms (the deadline of a call to the compute server)")
        if dep["spec"].get("replicas") != 1 or dep["spec"].get("strategy", {}).get("type") != "Recreate":
            fail(f"{wname}: a compute server serves one worker: want replicas 1 and strategy Recreate, got "
                 f"{dep['spec'].get('replicas')} / {dep['spec'].get('strategy')}")
        for h in objs.get("HorizontalPodAutoscaler", {}).values():
            if h["spec"]["scaleTargetRef"]["name"] == wname and h["spec"].get("maxReplicas") != 1:
                fail(f"HPA {h['metadata']['name']} may scale {wname} to {h['spec'].get('maxReplicas')} workers "
                     f"over one compute server")
        wlabels = tmpl["metadata"].get("labels", {})
        for r in remotes:
            host, _, port = r.rpartition(":")
            labels = host.split(".")
            if len(labels) < 2:
                fail(f"{wname}: remote://{r}: not <pod>.<service> of a StatefulSet")
                continue
            pod, svc_name = labels[0], labels[1]
            svc = services.get(svc_name)
            if svc is None or svc["spec"].get("clusterIP") != "None":
                fail(f"{wname}: remote://{r}: no headless Service {svc_name} (pod DNS names need one)")
                continue
            owners = [(n, s) for n, s in stss.items()
                      if s["spec"].get("serviceName") == svc_name and pod.startswith(n + "-")
                      and pod[len(n) + 1:].isdigit()]
            if len(owners) != 1:
                fail(f"{wname}: remote://{r}: {pod} is the pod of no StatefulSet with serviceName {svc_name}")
                continue
            sname, sts = owners[0]
            if int(pod[len(sname) + 1:]) >= sts["spec"].get("replicas", 1):
                fail(f"{wname}: remote://{r}: {sname} has only {sts['spec'].get('replicas', 1)} replica(s)")
            stmpl = sts["spec"]["template"]
            plabels = stmpl["metadata"].get("labels", {})
            if not matches(svc["spec"]["selector"], plabels):
                fail(f"Service {svc_name} does not select the pods of {sname}")
            cc = herd_container(stmpl, "compute")
            if cc is None:
                fail(f"{sname}: no herd-compute container")
                continue
            cargs = [mt.expand(a, mt.container_env(cc, configmaps)) for a in cc.get("args", [])]
            sport = [p for p in svc["spec"]["ports"] if str(p["port"]) == port]
            if not sport:
                fail(f"{wname}: remote://{r}: Service {svc_name} has no port {port}")
                continue
            target = sport[0].get("targetPort", sport[0]["port"])
            cport = target if isinstance(target, int) else next(
                (p["containerPort"] for p in cc.get("ports", []) if p.get("name") == target), None)
            if cport is None or str(cport) != mt.flag_value(cargs, "port"):
                fail(f"{wname}: remote://{r}: Service port {port} -> {target} is not {sname}'s --port "
                     f"({mt.flag_value(cargs, 'port')})")
            # Same TLS and cluster-key Secrets on both sides.
            ws, cs = secrets(tmpl, wc), secrets(stmpl, cc)
            for f in ("tls_ca_file", "cluster_key_file"):
                wd = os.path.dirname(mt.flag_value(args, f) or "")
                cd = os.path.dirname(mt.flag_value(cargs, f) or "")
                if ws.get(wd, ("?",))[0] != cs.get(cd, ("!",))[0]:
                    fail(f"{wname} and {sname}: --{f} from different Secrets ({ws.get(wd)} vs {cs.get(cd)})")
            # Memory: the buffers fit under the limit.
            limit = mem_bytes(cc.get("resources", {}).get("limits", {}).get("memory"))
            mbb = mt.flag_value(cargs, "max_buffer_bytes")
            if limit is None or mbb is None or int(mbb) >= limit:
                fail(f"{sname}: --max_buffer_bytes={mbb} is not below its memory limit ({limit})")
            # Policies: workers in, nobody else.
            if not admitted(policies, plabels, int(cport), wlabels):
                fail(f"no NetworkPolicy admits {wname}'s pods to {sname}:{cport}")
            if admitted(policies, plabels, int(cport), None):
                fail(f"a NetworkPolicy opens {sname}:{cport} to anyone")
            for other in ("gateway", "loader", "draft"):
                if admitted(policies, plabels, int(cport), {"app.kubernetes.io/component": other}):
                    fail(f"a NetworkPolicy admits {other} pods to {sname}:{cport} (only workers)")
    if not split_workers:
        fail("no worker with a remote:// backend")
    if failures or mt.failures:
        print(f"{len(failures) + len(mt.failures)} failure(s)")
        return 1
    print(f"remote-split: {len(docs)} objects; {', '.join(split_workers)} -> "
          f"{', '.join(stss)}: flags, probes, DNS, ports, secrets, scaling, policies OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
