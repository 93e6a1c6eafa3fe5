"""Shared stanzas of herd's BUILD files: a unit-test macro and named dependency groups."""

GTEST_MAIN = "@system//:gtest_main"

# The services `herd up` (LocalCluster) starts from its runfiles, without the draft worker.
CLUSTER_SERVICES = [
    "//services/gateway",
    "//services/loader",
    "//services/worker",
]

# The same with the draft worker (speculative decoding clusters).
CLUSTER_SERVICES_WITH_DRAFT = ["//services/draft"] + CLUSTER_SERVICES

# The same with the remote compute server (layer-split clusters: herd up --remote-split).
CLUSTER_SERVICES_WITH_COMPUTE = ["//services/compute"] + CLUSTER_SERVICES

# Everything `herd up` may start (the herd CLI's runfiles).
CLUSTER_SERVICES_ALL = ["//services/compute", "//services/draft"] + CLUSTER_SERVICES

# What every gRPC service implementation (and the loader client) links: base, status
# macros, serving (security, ports) and gRPC status conversion.
GRPC_SERVING_DEPS = [
    "//libs/base",
    "//libs/base:status_macros",
    "//libs/serving",
    "//libs/serving:grpc_status",
    "@system//:absl",
    "@system//:grpc",
]

# What each service's main() links: flags, security flags and the shared service main.
SERVICE_MAIN_DEPS = [
    "//libs/base",
    "//libs/serving",
    "//libs/serving:security_flags",
    "//libs/serving:service_flags",
    "//libs/serving:service_main",
    "@system//:absl",
]

# Reading and writing GGUF files with quantized tensors (libs/quant, bench's model writer).
GGUF_QUANTS_DEPS = [
    "//libs/base",
    "//libs/base:status_macros",
    "//libs/gguf",
    "//libs/gguf:ggml_type",
    "//libs/tensor:quants",
    "@system//:absl",
]

# Running a model in process on the CPU: engine, generation, model, tokenizer and the
# shared data (../shared) the conformance and model tests read.
CPU_MODEL_TEST_DEPS = [
    "//tests:cpu_backend_for_tests",
    "//libs/engine",
    "//libs/engine:generate",
    "//libs/model",
    "//libs/tokenizer",
    "//tests:shared_data",
]

def herd_cc_test(name, deps = [], size = "small", srcs = None, **kwargs):
    """A cc_test of NAME.cc (or srcs) linked with gtest_main; size defaults to small."""
    native.cc_test(
        name = name,
        size = size,
        srcs = srcs if srcs != None else [name + ".cc"],
        deps = deps + [GTEST_MAIN],
        **kwargs
    )
