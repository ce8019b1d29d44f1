{
  "targets": [
    {
      "target_name": "torl_blas",
      "sources": ["src/addon.cc", "src/gemm.cc", "src/adamw.cc", "src/log-prob.cc", "src/rms-norm.cc", "src/swiglu.cc", "src/decode-attention.cc", "src/matmul-bf16.cc", "src/amx-bf16.cc", "src/vector.cc", "src/map-file.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags_cc": ["-O3", "-std=c++17", "-fno-math-errno", "-fno-trapping-math", "-fopenmp-simd", "-ffp-contract=off"],
      "libraries": ["-lopenblas"]
    }
  ]
}
