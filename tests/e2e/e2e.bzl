"""The end-to-end tests' stanzas: a cc_test or sh_test against real service processes."""

load("//tools:build_defs.bzl", "CLUSTER_SERVICES", "herd_cc_test")

# What a test talking to the gateway over gRPC and HTTP links.
GATEWAY_CLIENT_DEPS = [
    "//proto/herd/v1:gateway_cc",
    "@system//:absl",
    "@system//:grpc",
    "@system//:httplib",
]

def e2e_cc_test(name, deps = [], data = CLUSTER_SERVICES, size = "medium", **kwargs):
    """A cc_test of NAME.cc running DATA's services through LocalCluster (e2e_util, shared data)."""
    herd_cc_test(
        name = name,
        size = size,
        data = data,
        deps = [":e2e_util", "//tests:shared_data", "//tools/herd:cluster"] + deps,
        **kwargs
    )

def e2e_sh_test(name, data = CLUSTER_SERVICES, size = "medium", **kwargs):
    """An sh_test of NAME.sh with DATA's services and the herd CLI in its runfiles."""
    native.sh_test(name = name, size = size, srcs = [name + ".sh"], data = data + ["//tools/herd"], **kwargs)
