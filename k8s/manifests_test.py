#!/usr/bin/env python3
"""Cross-checks the rendered Kubernetes manifests against what the repo builds.

For every overlay in k8s/overlays (rendered with `kubectl kustomize`, offline):
  * every image is ghcr.io/herd/herd-NAME:TAG with NAME an image tools/images.sh builds
    (`tools/images.sh --list`), whose stage NAME in images/Containerfile has the binary as its
    entrypoint and runs as a non-root user;
  * every container's args, with $(VAR) expanded the way the kubelet does from the
    ConfigMap and env, are flags its binary accepts: each is listed by the binary's
    --helpfull, and the whole argument vector parses (--only_check_args);
  * every exec probe runs a program in the image (/usr/local/bin/herd) with arguments
    it accepts, on a port the container declares;
  * the gateway reaches the loader, the target workers (--workers_dns) and the draft
    workers (--draft_workers_dns): NAME:PORT is a Service of the render (headless for
    worker pools) whose port leads to a container port on which the selected pods'
    binary listens (--port);
  * the gateway and the workers drain gracefully: a preStop sleep, then --grace_ms, both
    within terminationGracePeriodSeconds (+5 s to exit);
  * workers take --n_ctx / --max_sequences from the ConfigMap, every service binds
    0.0.0.0, every container has resource requests, NetworkPolicies leave only the
    gateway reachable from outside, PDBs and HPAs select/scale what exists.
Skips (exit 0 with a message) when kubectl is not installed.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

SRC = os.path.join(os.environ.get("TEST_SRCDIR", ""), os.environ.get("TEST_WORKSPACE", "herd"))
if not os.path.isdir(os.path.join(SRC, "k8s")):
    SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL " + msg)


def run(argv, **kw):
    return subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=60, **kw)


def image_table():
    """tools/images.sh --list -> {name: binary path relative to the workspace}."""
    out = run(["bash", os.path.join(SRC, "tools/images.sh"), "--list"])
    if out.returncode != 0:
        sys.exit("tools/images.sh --list failed: " + out.stderr)
    table = dict(line.split() for line in out.stdout.splitlines() if line.strip())
    if not table:
        sys.exit("tools/images.sh --list printed no images")
    return table


def containerfile_stage(text, name):
    """The lines of stage `name` (from its 'FROM ... AS name' line up to the next FROM)."""
    m = re.search(rf"^FROM \S+ AS {re.escape(name)}\n(.*?)(?=^FROM |\Z)", text, re.M | re.S)
    return m.group(1) if m else None


def check_containerfiles(table):
    path = os.path.join(SRC, "images", "Containerfile")
    if not os.path.isfile(path):
        fail("images/Containerfile missing")
        return
    text = open(path).read()
    for name, binary in table.items():
        final = containerfile_stage(text, name)
        if final is None or not text.count(f"FROM scratch AS {name}\n"):
            fail(f"images/Containerfile: no final stage 'FROM scratch AS {name}'")
            continue
        entry = f'ENTRYPOINT ["/usr/local/bin/{os.path.basename(binary)}"]'
        if entry not in final:
            fail(f"images/Containerfile: stage {name} lacks {entry}")
        if not re.search(r"^USER [1-9][0-9]*", final, re.M):
            fail(f"images/Containerfile: stage {name} does not set a non-root USER")
        if f"COPY --from=rootfs-{name} /rootfs/ /" not in final:
            fail(f"images/Containerfile: stage {name} does not copy its rootfs-{name} stage")
        rootfs = containerfile_stage(text, f"rootfs-{name}") or ""
        if f"images/rootfs.sh /rootfs /out/{binary} /out/tools/herd/herd" not in rootfs:
            fail(f"images/Containerfile: stage rootfs-{name} does not stage {binary} + herd")


_help_cache = {}


def accepted_flags(binary):
    """Flag names the binary lists in --helpfull (Abseil: '    --name (help); default: ...')."""
    if binary not in _help_cache:
        out = run([binary, "--helpfull"])
        flags = set(re.findall(r"^\s+--([A-Za-z0-9_]+) ", out.stdout + out.stderr, re.M))
        if not flags:
            fail(f"{binary} --helpfull lists no flags (rc {out.returncode})")
        _help_cache[binary] = flags
    return _help_cache[binary]


def expand(s, env):
    """The kubelet's $(VAR) expansion of command/args ($$ escapes a dollar)."""
    def sub(m):
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)", sub, s)


def container_env(c, configmaps):
    env = {}
    for ef in c.get("envFrom", []):
        ref = ef.get("configMapRef", {}).get("name")
        if ref is not None:
            if ref not in configmaps:
                fail(f"container {c['name']}: envFrom ConfigMap {ref} is not in the render")
            env.update(configmaps.get(ref, {}))
    for e in c.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(e["value"], env)
        elif "configMapKeyRef" in e.get("valueFrom", {}):
            ref = e["valueFrom"]["configMapKeyRef"]
            if ref["key"] not in configmaps.get(ref["name"], {}):
                fail(f"container {c['name']}: env {e['name']}: {ref['name']}.{ref['key']} does not exist")
            env[e["name"]] = configmaps.get(ref["name"], {}).get(ref["key"], "")
    return env


def flag_value(args, name):
    for a in args:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def check_overlay(overlay, docs, table, bin_dir):
    objs = {}
    for d in docs:
        objs.setdefault(d["kind"], {})[d["metadata"]["name"]] = d
    configmaps = {n: cm.get("data", {}) for n, cm in objs.get("ConfigMap", {}).items()}
    deployments = objs.get("Deployment", {})
    # StatefulSets (k8s/examples/remote-split's herd-compute) are checked like Deployments.
    workloads = {**deployments, **objs.get("StatefulSet", {})}
    services = objs.get("Service", {})
    herd_bin = os.path.join(bin_dir, "tools/herd/herd")
    # Deployment (or StatefulSet) name -> (image name, expanded args, container ports, pod labels, container)
    pods = {}
    for dname, dep in workloads.items():
        tmpl = dep["spec"]["template"]
        sel = dep["spec"]["selector"]["matchLabels"]
        if any(tmpl["metadata"].get("labels", {}).get(k) != v for k, v in sel.items()):
            fail(f"[{overlay}] {dep['kind']} {dname}: selector does not match its pod labels")
        psc = tmpl["spec"].get("securityContext", {})
        if not psc.get("runAsNonRoot"):
            fail(f"[{overlay}] {dep['kind']} {dname}: pods do not set runAsNonRoot")
        for c in tmpl["spec"]["containers"]:
            where = f"[{overlay}] {dname}/{c['name']}"
            m = re.fullmatch(r"ghcr\.io/herd/herd-([a-z0-9-]+):([A-Za-z0-9_.-]+)", c["image"])
            if not m:
                fail(f"{where}: image {c['image']} is not ghcr.io/herd/herd-NAME:TAG")
                continue
            name = m.group(1)
            if name not in table:
                fail(f"{where}: image herd-{name} is not built by tools/images.sh (it builds {sorted(table)})")
                continue
            binary = os.path.join(bin_dir, table[name])
            if "command" in c:
                fail(f"{where}: overrides the image's entrypoint (command:)")
            env = container_env(c, configmaps)
            raw = c.get("args", [])
            args = [expand(a, env) for a in raw]
            for r, a in zip(raw, args):
                if re.search(r"\$\([A-Za-z_][A-Za-z0-9_]*\)", a):
                    fail(f"{where}: {r}: variable not defined in the container's env / ConfigMap")
            flags = accepted_flags(binary)
            for a in args:
                if not a.startswith("--"):
                    fail(f"{where}: argument {a!r} is not a --flag")
                    continue
                f = a[2:].split("=", 1)[0]
                if f not in flags:
                    fail(f"{where}: {table[name]} does not accept --{f} (not in its --helpfull)")
            out = run([binary] + args + ["--only_check_args"])
            if out.returncode != 0:
                fail(f"{where}: {table[name]} rejects its args {args}: {(out.stderr or out.stdout).strip()}")
            # Security (issue #14): every service serves TLS, verifies peers and requires or sends
            # the cluster key; each file a flag or probe names lies on a mounted Secret volume.
            for f in ("tls_cert_file", "tls_key_file", "tls_ca_file", "cluster_key_file"):
                if not flag_value(args, f):
                    fail(f"{where}: does not pass --{f} (k8s/README.md, security)")
            volumes = {v["name"]: v for v in tmpl["spec"].get("volumes", [])}
            secret_dirs = {}
            for vm in c.get("volumeMounts", []):
                sec = volumes.get(vm["name"], {}).get("secret")
                if sec is not None:
                    items = [i["path"] for i in sec.get("items", [])] or None
                    secret_dirs[vm["mountPath"].rstrip("/")] = items
            probe_files = []
            for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
                pc = (c.get(kind) or {}).get("exec", {}).get("command", [])
                probe_files += [pc[i + 1] for i, a in enumerate(pc[:-1]) if a.endswith("-file")]
            for path in [a.split("=", 1)[1] for a in args if re.match(r"--\w+_file=", a)] + probe_files:
                d, base = os.path.dirname(path), os.path.basename(path)
                if d not in secret_dirs:
                    fail(f"{where}: {path} is not on a mounted Secret volume ({sorted(secret_dirs)})")
                elif secret_dirs[d] is not None and base not in secret_dirs[d]:
                    fail(f"{where}: {path}: the Secret volume at {d} projects only {secret_dirs[d]}")
            if flag_value(args, "host") != "0.0.0.0":
                fail(f"{where}: does not pass --host=0.0.0.0 (reachable in-cluster)")
            ports = {p["containerPort"]: p.get("name") for p in c.get("ports", [])}
            port = flag_value(args, "port")
            if port is None or int(port) not in ports:
                fail(f"{where}: --port={port} is not a declared containerPort {sorted(ports)}")
            mport = flag_value(args, "metrics_port")
            ann = tmpl["metadata"].get("annotations", {}).get("prometheus.io/port")
            if mport is None or int(mport) not in ports or ann != mport:
                fail(f"{where}: --metrics_port={mport} vs containerPorts {sorted(ports)} / prometheus.io/port {ann}")
            if not c.get("resources", {}).get("requests", {}).get("memory") or \
                    not c.get("resources", {}).get("requests", {}).get("cpu"):
                fail(f"{where}: no cpu/memory requests")
            for kind in ("startupProbe", "livenessProbe", "readinessProbe"):
                probe = c.get(kind)
                if probe is None:
                    if kind != "startupProbe":
                        fail(f"{where}: no {kind}")
                    continue
                cmd = probe.get("exec", {}).get("command")
                if not cmd:
                    fail(f"{where}: {kind} is not an exec probe (the image's herd health)")
                    continue
                if cmd[0] != "/usr/local/bin/herd":
                    fail(f"{where}: {kind} runs {cmd[0]}, which is not in the image (/usr/local/bin/herd)")
                    continue
                if re.search(r"\$\(|\bHERD_[A-Z_]+\b", " ".join(cmd)):
                    fail(f"{where}: {kind} command has an unexpanded variable: {cmd}")
                if cmd[1] == "health":
                    addr = cmd[2]
                elif cmd[1] == "generate":
                    addr = cmd[cmd.index("--gateway") + 1]
                else:
                    fail(f"{where}: {kind}: herd {cmd[1]} is not a probe command")
                    continue
                if not addr.startswith("127.0.0.1:") or int(addr.split(":")[1]) != int(port):
                    fail(f"{where}: {kind} probes {addr}, not this container's gRPC port {port}")
                # Same arguments against a closed port: "not serving" (1), never a usage error (2).
                probe_args = [("127.0.0.1:1" if a == addr else a) for a in cmd[1:]]
                if "--timeout" in probe_args:
                    probe_args[probe_args.index("--timeout") + 1] = "2"
                out = run([herd_bin] + probe_args)
                if out.returncode != 1:
                    fail(f"{where}: {kind}: herd {' '.join(cmd[1:])}: exit {out.returncode} against a closed port "
                         f"(want 1): {out.stderr.strip()}")
            # Graceful drain (issue 39): the gateway and the workers first sleep in preStop while
            # the pod leaves its Service's endpoints and DNS (clients and routers stop picking
            # it), then drain on SIGTERM for up to --grace_ms; the pod's grace period covers both
            # and a margin to exit, or the kubelet's SIGKILL would cut streams in flight.
            if name == "gateway" or name.startswith("worker-"):
                grace_ms = flag_value(args, "grace_ms")
                pre = ((c.get("lifecycle") or {}).get("preStop") or {}).get("sleep", {}).get("seconds")
                tgps = tmpl["spec"].get("terminationGracePeriodSeconds", 30)
                if grace_ms is None:
                    fail(f"{where}: no --grace_ms (how long in-flight streams may finish after SIGTERM)")
                elif pre is None:
                    fail(f"{where}: no lifecycle.preStop.sleep (traffic keeps arriving while endpoints update)")
                elif tgps < int(pre) + int(grace_ms) / 1000 + 5:
                    fail(f"{where}: terminationGracePeriodSeconds {tgps} < preStop {pre} s + --grace_ms "
                         f"{grace_ms} + 5 s margin")
            pods[dname] = (name, args, ports, tmpl["metadata"].get("labels", {}), c)

    def pods_of(selector):
        return [d for d, p in pods.items() if all(p[3].get(k) == v for k, v in selector.items())]

    def reach(src, flag, want_headless, want_image):
        """src's --flag=NAME:PORT leads to pods running want_image (or, for a tuple, any of
        those images) that listen there."""
        want_images = want_image if isinstance(want_image, tuple) else (want_image,)
        value = flag_value(pods[src][1], flag) if src in pods else None
        if value is None:
            fail(f"[{overlay}] {src} does not pass --{flag}")
            return
        host, _, port = value.rpartition(":")
        svc = services.get(host.split(".")[0])
        if svc is None:
            fail(f"[{overlay}] {src} --{flag}={value}: no Service named {host.split('.')[0]}")
            return
        if want_headless and svc["spec"].get("clusterIP") != "None":
            fail(f"[{overlay}] {src} --{flag}={value}: Service {host} is not headless (DNS must list every pod)")
        sport = [p for p in svc["spec"]["ports"] if p["port"] == int(port)]
        if not sport:
            fail(f"[{overlay}] {src} --{flag}={value}: Service {host} has no port {port}")
            return
        target = sport[0].get("targetPort", sport[0]["port"])
        backends = pods_of(svc["spec"]["selector"])
        if not backends:
            fail(f"[{overlay}] {src} --{flag}={value}: Service {host} selects no Deployment's pods")
        for b in backends:
            name, args, ports, _, _ = pods[b]
            if name not in want_images:
                fail(f"[{overlay}] Service {host} selects {b} (herd-{name}), expected "
                     f"{' or '.join('herd-' + w for w in want_images)} pods")
            cport = target if isinstance(target, int) else next((p for p, n in ports.items() if n == target), None)
            if cport is None or str(cport) != flag_value(args, "port"):
                fail(f"[{overlay}] {src} --{flag}={value}: Service port {port} -> targetPort {target} is not the "
                     f"--port ({flag_value(args, 'port')}) of {b}")

    # The model of the workers and of the gateway's readiness probe is the ConfigMap's.
    models = {cm["HERD_MODEL"] for cm in configmaps.values() if "HERD_MODEL" in cm}
    for d, (name, args, _, _, c) in pods.items():
        if name.startswith("worker-") and {flag_value(args, "model")} != models:
            fail(f"[{overlay}] {d}: --model={flag_value(args, 'model')}, the ConfigMap says {models}")
        cmd = c.get("readinessProbe", {}).get("exec", {}).get("command", [])
        if "generate" in cmd and (not models or cmd[cmd.index("-m") + 1] not in models):
            fail(f"[{overlay}] {d}: readiness probe generates from {cmd[cmd.index('-m') + 1]}, the ConfigMap "
                 f"says {models} (replacements missing in the overlay?)")

    gateways = [d for d, p in pods.items() if p[0] == "gateway"]
    if not gateways:
        fail(f"[{overlay}] no gateway Deployment")
    for gw in gateways:
        reach(gw, "loader", False, "loader")
        # Target workers of every backend (worker-cpu, worker-vulkan, ...) behind one Service.
        reach(gw, "workers_dns", True, tuple(n for n, *_ in pods.values() if n.startswith("worker-")) or "worker-cpu")
        reach(gw, "draft_workers_dns", True, "draft")
        if flag_value(pods[gw][1], "spec_type") in (None, "none"):
            fail(f"[{overlay}] {gw}: --spec_type none: the draft workers are never asked")
    for d, (name, args, _, _, c) in pods.items():
        if name.startswith("worker-"):
            reach(d, "loader", False, "loader")
            raw = " ".join(c.get("args", []))
            for f in ("n_ctx", "max_sequences"):
                if not re.search(rf"--{f}=\$\(HERD_[A-Z_]+\)", raw):
                    fail(f"[{overlay}] {d}: --{f} does not come from the ConfigMap")
            n_ctx, n_seq = flag_value(args, "n_ctx"), flag_value(args, "max_sequences")
            if n_ctx and n_seq and int(n_ctx) // int(n_seq) < 1024:
                fail(f"[{overlay}] {d}: {n_ctx} KV cells / {n_seq} sequences leaves each sequence < 1024 tokens")

    # NetworkPolicies: default deny; only gateway pods take traffic from anywhere.
    nps = objs.get("NetworkPolicy", {}).values()
    if not any(np["spec"].get("podSelector") == {} and "Ingress" in np["spec"].get("policyTypes", [])
               and not np["spec"].get("ingress") for np in nps):
        fail(f"[{overlay}] no default-deny ingress NetworkPolicy")
    for np in nps:
        for rule in np["spec"].get("ingress", []):
            if rule.get("from"):
                continue
            sel = np["spec"]["podSelector"]
            opened = [d for d in pods if pods[d][0] != "gateway" and
                      all(pods[d][3].get(k) == v for k, v in sel.get("matchLabels", {}).items()) and
                      all((pods[d][3].get(e["key"]) in e["values"]) == (e["operator"] == "In")
                          for e in sel.get("matchExpressions", []))]
            if opened or sel == {}:
                fail(f"[{overlay}] NetworkPolicy {np['metadata']['name']} opens {opened or 'every pod'} to anyone")
    # PDBs and HPAs refer to what exists.
    for pdb in objs.get("PodDisruptionBudget", {}).values():
        if not pods_of(pdb["spec"]["selector"]["matchLabels"]):
            fail(f"[{overlay}] PodDisruptionBudget {pdb['metadata']['name']} selects no pods")
    for want in ("gateway", "worker", "draft"):
        if not any(any(pods[d][3].get("app.kubernetes.io/component") == want
                       for d in pods_of(p["spec"]["selector"]["matchLabels"]))
                   for p in objs.get("PodDisruptionBudget", {}).values()):
            fail(f"[{overlay}] no PodDisruptionBudget covers the {want} pods")
    for hpa in objs.get("HorizontalPodAutoscaler", {}).values():
        ref = hpa["spec"]["scaleTargetRef"]["name"]
        if ref not in deployments:
            fail(f"[{overlay}] HPA {hpa['metadata']['name']} scales {ref}, which is not in the render")
            continue
        name = pods[ref][0]
        want = "herd_worker_" if name.startswith("worker-") else f"herd_{name}_"
        custom = [m["pods"]["metric"]["name"] for m in hpa["spec"]["metrics"] if m["type"] == "Pods"]
        if not custom or not all(n.startswith(want) for n in custom):
            fail(f"[{overlay}] HPA {hpa['metadata']['name']}: custom metrics {custom} are not {want}* (its own load)")
    for want in [d for d in pods if pods[d][0].startswith("worker-") or pods[d][0] == "draft"]:
        if not any(h["spec"]["scaleTargetRef"]["name"] == want for h in objs.get("HorizontalPodAutoscaler", {}).values()):
            fail(f"[{overlay}] no HPA scales {want}")


def main():
    if shutil.which("kubectl") is None:
        print("SKIP: kubectl not found; k8s manifests not rendered")
        return 0
    bin_dir = SRC
    table = image_table()
    check_containerfiles(table)
    for name, binary in table.items():
        if not os.access(os.path.join(bin_dir, binary), os.X_OK):
            sys.exit(f"{binary} (image {name}) is not in the test's runfiles: add it to k8s/BUILD data")
    work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
    k8s = os.path.join(work, "k8s")
    shutil.copytree(os.path.join(SRC, "k8s"), k8s, symlinks=False)  # real files: kustomize refuses some symlinks
    overlays = sorted(os.listdir(os.path.join(k8s, "overlays")))
    if not overlays:
        fail("no overlays in k8s/overlays")
    for o in overlays:
        out = run(["kubectl", "kustomize", os.path.join(k8s, "overlays", o)])
        if out.returncode != 0:
            fail(f"[{o}] kubectl kustomize: {out.stderr.strip()}")
            continue
        docs = [d for d in yaml.safe_load_all(out.stdout) if d]
        check_overlay(o, docs, table, bin_dir)
        print(f"[{o}] {len(docs)} objects checked")
    if failures:
        print(f"{len(failures)} failure(s)")
        return 1
    print("manifests: images, flags, probes, service wiring, policies OK for overlays " + ", ".join(overlays))
    return 0


if __name__ == "__main__":
    sys.exit(main())
