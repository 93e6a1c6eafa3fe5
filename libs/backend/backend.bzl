"""What libs/backend and its device backends' BUILD files share (cuda, hip, vulkan)."""

# Layering (docs/ARCHITECTURE.md): visible to the services, tools, tests and benchmarks
# (//:top) and, of the libs, only to those above libs/backend: model, engine, quant.
BACKEND_VISIBILITY = [
    "//:top",
    "//libs/backend:__subpackages__",
    "//libs/engine:__subpackages__",
    "//libs/model:__pkg__",
    "//libs/quant:__pkg__",
]

# What a device backend's library needs besides its kernels.
BACKEND_DEPS = [
    "//libs/backend",
    "//libs/base",
    "//libs/gguf:ggml_type",
    "//libs/tensor",
    "@system//:absl",
]

def gpu_backend_library(name, srcs, hdrs, kernels, deps = [], **kwargs):
    """The CUDA or HIP backend: libs/backend/cuda/cuda_backend.cc over its kernel libraries.

    BLAS (cuBLAS) is opened at run time (dlopen: -ldl). The GPU runtime's and the kernels'
    objects are static archives, so the library is linked into each binary as an archive
    (linkstatic): a shared object of it would miss the runtime's symbols.

    kernels: the kernel libraries (cuda_library / hip_library); deps: what else it needs
      (the runtime's headers or library); kwargs: e.g. local_defines, alwayslink.
    """
    native.cc_library(
        name = name,
        srcs = srcs,
        hdrs = hdrs,
        linkopts = ["-ldl"],
        linkstatic = True,
        deps = kernels + BACKEND_DEPS + deps,
        **kwargs
    )
