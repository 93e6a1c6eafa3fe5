#!/usr/bin/env python3
"""clang-tidy-14 over libs/ with the compile commands Bazel itself uses (tools/clang_tidy.sh runs it).

Bazel 4.2.3 writes no compile_commands.json, so this asks it for one:
  1. bazel build --output_groups=compilation_prerequisites_INTERNAL_ //libs/...
     (only the generated headers the sources include: protoc's .pb.h, the Vulkan .spv.inc);
  2. bazel aquery 'mnemonic("CppCompile", //libs/...)' --output=jsonproto: every compile action's
     argv, relative to Bazel's execution root (-iquote external/system, bazel-out/..., the SIMD -m
     flags of libs/kernels/cpu), rewritten for clang (gcc-only flags, -Werror and the output
     files dropped) into $CACHE/compile_commands.json with "directory" the execution root.
clang-tidy then runs from the execution root, in parallel, on every non-test .cc that Bazel
compiles under libs/ (the .cu kernels are nvcc's, not CppCompile actions, so never listed), with
the checks of .clang-tidy. A file's result is cached under $HERD_TIDY_CACHE (default
${XDG_CACHE_HOME:-~/.cache}/herd/clang-tidy), keyed by the sha256 of: the clang-tidy version,
.clang-tidy, this script, the file's compile arguments, its content and the content of every
repository or generated file it includes, transitively (quoted #includes). A rerun checks only
what changed.

Prints each finding as FILE:LINE:CHECK: MESSAGE (a header's finding once, however many files
include it), then one summary line with the counts and the time taken; exits 1 when there is a
finding.
"""

import argparse
import concurrent.futures
import hashlib
import json
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIDY = os.environ.get("CLANG_TIDY", "clang-tidy-14")
BAZEL_FLAGS = ["--config=ci"]
SCOPE = "//libs/..."

# Files where readability-function-size does not apply: the SIMD micro-kernel tables (one long
# function per tile shape/quant type, unrolled on purpose; their .inc files are part of them).
FUNCTION_SIZE_EXEMPT = re.compile(r"^libs/kernels/cpu/kernels_avx(2|512|512_vnni)\.cc$")
# Test code is not checked.
SKIP = re.compile(r"(_test|_bench)\.cc$")

# gcc-only flags of Bazel's toolchain that clang rejects or warns about; -Werror is dropped so
# that a clang-only compiler warning is not mistaken for a finding (gcc's -Werror build owns those).
DROP_FLAGS = {
    "-fno-canonical-system-headers",
    "-Wno-free-nonheap-object",
    "-Wunused-but-set-parameter",
    "-Werror",
    "-MD",
}
DROP_WITH_VALUE = {"-MF", "-o"}

FINDING = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?P<col>\d+): (?P<sev>warning|error): "
                     r"(?P<msg>.*?) \[(?P<check>[\w.,-]+)\]$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def bazel(*args, capture=True):
    cmd = ["bazel", args[0]] + BAZEL_FLAGS + list(args[1:])
    res = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                         stderr=subprocess.PIPE, universal_newlines=True)
    if res.returncode != 0:
        sys.stderr.write(res.stderr[-4000:])
        sys.exit("clang_tidy: %s failed (rc %d)" % (" ".join(cmd), res.returncode))
    return res.stdout


def compile_commands(aquery):
    """One clang command per source under libs/ from the aquery jsonproto output."""
    cmds = {}
    for action in aquery.get("actions", []):
        args = action["arguments"]
        if "-c" not in args:
            continue
        src = args[args.index("-c") + 1]
        if src in cmds or not src.startswith("libs/") or not src.endswith(".cc") or SKIP.search(src):
            continue
        out = ["clang++"]
        skip_next = False
        for a in args[1:]:
            if skip_next:
                skip_next = False
                continue
            if a in DROP_WITH_VALUE:
                skip_next = True
                continue
            if a in DROP_FLAGS or a.startswith("-frandom-seed="):
                continue
            out.append(a)
        cmds[src] = out
    return cmds


class Hasher:
    """Content hashes of a file and, transitively, of the files it includes with quotes."""

    def __init__(self, execroot):
        self.dirs = [ROOT, os.path.join(execroot, "bazel-out/k8-opt/bin"), execroot]
        self.memo = {}

    def _content(self, path):
        if path not in self.memo:
            data = None
            for d in self.dirs:
                full = os.path.join(d, path)
                if os.path.isfile(full):
                    with open(full, "rb") as f:
                        data = f.read()
                    break
            self.memo[path] = data
        return self.memo[path]

    def closure(self, src):
        seen, todo, h = set(), [src], hashlib.sha256()
        while todo:
            path = todo.pop()
            if path in seen:
                continue
            seen.add(path)
            data = self._content(path)
            h.update(path.encode() + b"\0")
            if data is None:  # a system or external header (<...> or not ours): its name only
                continue
            h.update(hashlib.sha256(data).digest())
            if path.endswith((".h", ".cc", ".inc", ".hpp")):
                todo.extend(INCLUDE.findall(data.decode("utf-8", "replace")))
        return h.hexdigest()


def normalize(path, execroot):
    for prefix in (execroot + "/", ROOT + "/"):
        if path.startswith(prefix):
            path = path[len(prefix):]
    while path.startswith("./"):
        path = path[2:]
    return path


def run_one(src, db_dir, execroot, extra):
    cmd = [TIDY, "-p", db_dir, "--quiet", "--config-file=" + os.path.join(ROOT, ".clang-tidy")] + extra + [src]
    res = subprocess.run(cmd, cwd=execroot, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True)
    findings = []
    for line in res.stdout.splitlines():
        m = FINDING.match(line)
        if m:
            # WarningsAsErrors turns "[check]" into "[check,-warnings-as-errors]".
            check = m["check"].split(",")[0]
            findings.append([normalize(m["file"], execroot), int(m["line"]), check, m["msg"]])
    return {"rc": res.returncode, "findings": findings, "output": res.stdout[-3000:]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", help="only these sources (libs/....cc); default: all")
    ap.add_argument("-j", "--jobs", type=int, default=int(os.environ.get("HERD_TIDY_JOBS", os.cpu_count() or 2)))
    ap.add_argument("--no-cache", action="store_true", help="ignore (but refresh) the cached results")
    opts = ap.parse_args()
    t0 = time.time()

    cache = os.environ.get("HERD_TIDY_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "herd", "clang-tidy")
    os.makedirs(cache, exist_ok=True)

    bazel("build", "--output_groups=compilation_prerequisites_INTERNAL_", SCOPE)
    execroot = bazel("info", "execution_root").strip()
    cmds = compile_commands(json.loads(bazel("aquery", 'mnemonic("CppCompile", %s)' % SCOPE, "--output=jsonproto")))
    if opts.files:
        wanted = [os.path.relpath(os.path.abspath(f), ROOT) for f in opts.files]
        missing = [f for f in wanted if f not in cmds]
        if missing:
            sys.exit("clang_tidy: not a non-test source Bazel compiles under libs/: " + " ".join(missing))
        cmds = {f: cmds[f] for f in wanted}

    # One compile_commands.json per worktree (the execution root differs).
    db_dir = os.path.join(cache, "db-" + hashlib.sha256(execroot.encode()).hexdigest()[:12])
    os.makedirs(db_dir, exist_ok=True)
    db = [{"directory": execroot, "file": src, "arguments": args} for src, args in sorted(cmds.items())]
    with open(os.path.join(db_dir, "compile_commands.json"), "w") as f:
        json.dump(db, f, indent=1)

    version = subprocess.run([TIDY, "--version"], stdout=subprocess.PIPE, universal_newlines=True).stdout
    common = hashlib.sha256()
    for part in (version, open(os.path.join(ROOT, ".clang-tidy")).read(), open(__file__).read()):
        common.update(part.encode() + b"\0")
    hasher = Hasher(execroot)

    results, todo = {}, []
    for src, args in sorted(cmds.items()):
        extra = ["--checks=-readability-function-size"] if FUNCTION_SIZE_EXEMPT.search(src) else []
        key = hashlib.sha256(common.digest() + json.dumps(args + extra).encode() +
                             hasher.closure(src).encode()).hexdigest()
        path = os.path.join(cache, key[:2], key + ".json")
        if not opts.no_cache and os.path.isfile(path):
            with open(path) as f:
                results[src] = json.load(f)
        else:
            todo.append((src, extra, path))

    def work(item):
        src, extra, path = item
        res = run_one(src, db_dir, execroot, extra)
        # A compiler error (a missing generated header, say) is not a stable result: don't keep it.
        broken = res["rc"] != 0 and (not res["findings"] or any(f[2] == "clang-diagnostic-error" for f in res["findings"]))
        if not broken:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "w") as f:
                json.dump(res, f)
            os.replace(path + ".tmp", path)
        return src, res

    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        for src, res in pool.map(work, todo):
            results[src] = res

    seen, failed_files = set(), []
    for src in sorted(results):
        res = results[src]
        for file, line, check, msg in res["findings"]:
            if (file, line, check) not in seen:
                seen.add((file, line, check))
                print("%s:%d:%s: %s" % (file, line, check, msg))
        if res["rc"] != 0 and not res["findings"]:
            failed_files.append(src)
            print("%s: clang-tidy exited %d:\n%s" % (src, res["rc"], res["output"]))
    print("clang-tidy: %d files (%d checked, %d cached), %d findings, %d s" %
          (len(results), len(todo), len(results) - len(todo), len(seen), round(time.time() - t0)))
    return 1 if seen or failed_files else 0


if __name__ == "__main__":
    sys.exit(main())
