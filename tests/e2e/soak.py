#!/usr/bin/env python3
"""Soak: N concurrent streaming clients for M minutes against `herd up`.

Every streamed completion (greedy) must equal the same prompt's solo, non-streamed
completion; the gateway's and worker's RSS and open descriptors are sampled throughout
and must stay flat. Prints the figures; exits 1 on any error, mismatch or growth.

  python3 tests/e2e/soak.py --herd bazel-bin/tools/herd/herd --models ../shared/models \
      --streams 9 --minutes 3
"""
import argparse
import http.client
import json
import os
import re
import subprocess
import sys
import threading
import time

PROMPTS = ["Once upon a time", "The little dog", "Lily wanted to", "One day, a big", "Tom and Sue were",
           "The sun was", "A small bird", "Mom said", "In the park"]


def children(pid):
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit():
            continue
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(p))
        except OSError:
            pass
    return out


def proc_stats(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            rss = int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        return rss, fds
    except (OSError, AttributeError):
        return None


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def request(host, port, body, stream):
    c = http.client.HTTPConnection(host, port, timeout=120)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise RuntimeError(f"HTTP {r.status}: {r.read()[:200]!r}")
    if not stream:
        j = json.loads(r.read())
        return j["choices"][0]["text"], j["usage"]["completion_tokens"]
    text, n = "", 0
    for line in r:
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        j = json.loads(data)
        if "error" in j:
            raise RuntimeError(f"stream error: {j['error']}")
        for ch in j.get("choices", []):
            text += ch.get("text", "")
            if ch.get("text"):
                n += 1
    c.close()
    return text, n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--herd", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--model", default="stories260K")
    ap.add_argument("--streams", type=int, default=9)
    ap.add_argument("--minutes", type=float, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    a = ap.parse_args()

    log = open(os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "soak-up.log"), "w+")
    up = subprocess.Popen([a.herd, "up", "--models", a.models, "--model", a.model], stdout=log, stderr=log)
    try:
        http_addr = None
        for _ in range(1200):
            log.seek(0)
            m = re.search(r"^gateway  (\S+) \(HTTP", log.read(), re.M)
            if m:
                http_addr = m.group(1)
                break
            if up.poll() is not None:
                break
            time.sleep(0.1)
        if not http_addr:
            log.seek(0)
            print(log.read())
            print("FAIL: herd up did not come up")
            return 1
        host, port = http_addr.rsplit(":", 1)
        port = int(port)
        procs = {}
        for c in children(up.pid):
            cl = cmdline(c)
            for name in ("gateway", "worker", "loader"):
                if f"/{name} " in cl or cl.split(" ")[0].endswith("/" + name):
                    procs[name] = c

        def body(p, stream):
            return {"model": a.model, "prompt": p, "max_tokens": a.max_tokens, "temperature": 0, "stream": stream}

        solo = {p: request(host, port, body(p, False), False)[0] for p in PROMPTS}
        samples = {k: [] for k in procs}
        stop = time.time() + a.minutes * 60
        lock = threading.Lock()
        counts = {"requests": 0, "tokens": 0, "errors": 0, "mismatches": 0}
        errors = []

        def client(i):
            k = i
            while time.time() < stop:
                p = PROMPTS[k % len(PROMPTS)]
                k += 1
                try:
                    text, n = request(host, port, body(p, True), True)
                    with lock:
                        counts["requests"] += 1
                        counts["tokens"] += n
                        if text != solo[p]:
                            counts["mismatches"] += 1
                            errors.append(f"mismatch for {p!r}: {text[:60]!r} vs {solo[p][:60]!r}")
                except Exception as e:  # noqa: BLE001 - every failure is counted and shown
                    with lock:
                        counts["errors"] += 1
                        errors.append(str(e))

        t0 = time.time()
        threads = [threading.Thread(target=client, args=(i,)) for i in range(a.streams)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            for k, pid in procs.items():
                s = proc_stats(pid)
                if s:
                    samples[k].append(s)
            time.sleep(5)
        for t in threads:
            t.join()
        dt = time.time() - t0
        for k, pid in procs.items():
            s = proc_stats(pid)
            if s:
                samples[k].append(s)

        print(f"soak: {a.streams} streams x {a.minutes:g} min on {a.model}: {counts['requests']} requests, "
              f"{counts['tokens']} tokens, {counts['tokens'] / dt:.1f} tok/s, {counts['errors']} errors, "
              f"{counts['mismatches']} outputs different from solo")
        ok = counts["errors"] == 0 and counts["mismatches"] == 0 and counts["requests"] > 0
        for k, ss in samples.items():
            if len(ss) < 2:
                continue
            # Compare the second sample (warm) with the last: steady state must be flat.
            first, last = ss[1] if len(ss) > 2 else ss[0], ss[-1]
            peak = max(s[0] for s in ss)
            print(f"  {k:8s} RSS {first[0] / 1024:.1f} -> {last[0] / 1024:.1f} MiB (peak {peak / 1024:.1f}), "
                  f"fds {first[1]} -> {last[1]}")
            if last[0] > first[0] * 1.25 + 8 * 1024 or last[1] > first[1] + 16:
                print(f"FAIL: {k} grew")
                ok = False
        for e in errors[:10]:
            print("  " + e)
        print("PASS soak" if ok else "FAIL soak")
        return 0 if ok else 1
    finally:
        up.send_signal(2)
        try:
            up.wait(timeout=20)
        except subprocess.TimeoutExpired:
            up.kill()


if __name__ == "__main__":
    sys.exit(main())
