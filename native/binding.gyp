{
  "includes": ["libtorch.gypi"],
  "targets": [
    {
      "target_name": "stitchlab",
      "sources": ["src/addon.cc", "src/convert.cc", "src/ops.cc", "src/tensor.cc", "src/autograd.cc", "src/runtime.cc", "src/fast.cc", "src/graphs.cc", "src/batchnorm.cc"],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")", "<@(libtorch_include_dirs)", "<@(cuda_include_dirs)"],
      "defines": ["NAPI_EXPERIMENTAL", "NAPI_CPP_EXCEPTIONS", "_GLIBCXX_USE_CXX11_ABI=<(libtorch_abi)", "STITCHLAB_CUDA=<(libtorch_cuda)", "STITCHLAB_CUDA_GRAPHS=<(cuda_graphs)"],
      "cflags!": ["-fno-exceptions"],
      "cflags_cc!": ["-fno-exceptions", "-fno-rtti", "-std=gnu++14", "-std=gnu++17"],
      "cflags_cc": ["-std=c++17", "-O2", "-Wno-unused-parameter", "-Wno-deprecated-declarations"],
      "libraries": ["-L<(libtorch_lib_dir)", "-Wl,-rpath,<(libtorch_lib_dir)", "<@(libtorch_libs)"]
    }
  ]
}
