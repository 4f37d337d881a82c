// CUDA graphs (at::cuda::CUDAGraph): a step whose shapes never change (an IRI descent step, a
// stitching step) is recorded once and then replayed as one launch, so the host's cost per
// operator stops mattering on the GPU (issue 16). torch/graphs.ts drives it; the recipe is
// PyTorch's own for whole-step capture: warm up on a side stream, capture on that stream with
// the device synchronised around it, replay on the current stream.
//
// Compiled in only where the libtorch found has CUDA and the CUDA runtime's headers were found
// at build time (native/find-libtorch.mjs sets STITCHLAB_CUDA_GRAPHS). Elsewhere the functions
// exist and say why there are no graphs; graphsBuilt() tells torch/ to run steps eagerly.
#include "common.h"

#if STITCHLAB_CUDA_GRAPHS
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <memory>
#include <unordered_map>
#endif

namespace stitchlab {

#if STITCHLAB_CUDA_GRAPHS
namespace {
struct Graph {
  at::cuda::CUDAGraph graph;
  c10::cuda::CUDAStream stream;  // the side stream its warm-up and capture run on
  bool captured = false;
  explicit Graph(c10::cuda::CUDAStream s) : stream(s) {}
};
auto& graphs = *new std::unordered_map<uint32_t, std::unique_ptr<Graph>>();
uint32_t nextGraph = 1;

Graph& graphOf(Napi::Env env, const Napi::Value& v) {
  auto it = graphs.find(v.As<Napi::Number>().Uint32Value());
  if (it == graphs.end()) throw Napi::Error::New(env, "CUDA graph: no such graph (disposed?)");
  return *it->second;
}
}  // namespace

// graphCreate(deviceIndex) -> id
static Napi::Value GraphCreate(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto device = static_cast<c10::DeviceIndex>(info[0].As<Napi::Number>().Int32Value());
  return guarded(env, "CUDA graph", [&]() -> Napi::Value {
    uint32_t id = nextGraph++;
    graphs.emplace(id, std::make_unique<Graph>(c10::cuda::getStreamFromPool(false, device)));
    return Napi::Number::New(env, id);
  });
}

// graphRun(id, fn, capture): runs fn on the graph's side stream, recording it when capture is
// true (fn's kernels then do not run). The device is synchronised before and after, so the side
// stream sees every earlier write and later work sees fn's.
static Napi::Value GraphRun(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Graph& g = graphOf(env, info[0]);
  auto fn = info[1].As<Napi::Function>();
  bool capture = info[2].ToBoolean().Value();
  if (capture && g.captured) throw Napi::Error::New(env, "CUDA graph: already captured");
  return guarded(env, capture ? "CUDA graph capture" : "CUDA graph warm-up", [&]() -> Napi::Value {
    torch::cuda::synchronize();
    {
      c10::cuda::CUDAStreamGuard onSide(g.stream);
      if (capture) g.graph.capture_begin();
      try {
        fn.Call({});
      } catch (...) {
        // End the capture so the stream is usable again, then report fn's own error.
        if (capture) {
          try {
            g.graph.capture_end();
          } catch (...) {
          }
          g.graph.reset();
        }
        throw;
      }
      if (capture) {
        g.graph.capture_end();
        g.captured = true;
      }
    }
    torch::cuda::synchronize();
    return env.Undefined();
  });
}

// graphReplay(id): one replay on the current stream.
static Napi::Value GraphReplay(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Graph& g = graphOf(env, info[0]);
  if (!g.captured) throw Napi::Error::New(env, "CUDA graph: replay before capture");
  return guarded(env, "CUDA graph replay", [&]() -> Napi::Value {
    g.graph.replay();
    return env.Undefined();
  });
}

// graphFree(id): releases the graph and its memory pool. Idempotent.
static Napi::Value GraphFree(const Napi::CallbackInfo& info) {
  graphs.erase(info[0].As<Napi::Number>().Uint32Value());
  return info.Env().Undefined();
}
#else
[[noreturn]] static void noGraphs(Napi::Env env) {
  throw Napi::Error::New(env,
                         STITCHLAB_CUDA ? "CUDA graphs: this build found no CUDA runtime headers (cuda_runtime_api.h); "
                                          "set CUDA_HOME and rebuild with `npm run build:native -- --force`"
                                        : "CUDA graphs: this build of stitchlab has no CUDA (its libtorch is CPU-only)");
}
static Napi::Value GraphCreate(const Napi::CallbackInfo& info) { noGraphs(info.Env()); }
static Napi::Value GraphRun(const Napi::CallbackInfo& info) { noGraphs(info.Env()); }
static Napi::Value GraphReplay(const Napi::CallbackInfo& info) { noGraphs(info.Env()); }
static Napi::Value GraphFree(const Napi::CallbackInfo& info) { return info.Env().Undefined(); }
#endif

static Napi::Value GraphsBuilt(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), STITCHLAB_CUDA_GRAPHS == 1);
}

void initGraphs(Napi::Env env, Napi::Object exports) {
  exports.Set("graphsBuilt", Napi::Function::New(env, GraphsBuilt));
  exports.Set("graphCreate", Napi::Function::New(env, GraphCreate));
  exports.Set("graphRun", Napi::Function::New(env, GraphRun));
  exports.Set("graphReplay", Napi::Function::New(env, GraphReplay));
  exports.Set("graphFree", Napi::Function::New(env, GraphFree));
}

}  // namespace stitchlab
