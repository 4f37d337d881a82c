// Autograd entry points that are not ATen operators: requires_grad, .grad, backward, the
// functional grad(), grad mode (the no_grad scope), and autocast's state (torch.autocast).
#include <ATen/autocast_mode.h>

#include "common.h"

namespace stitchlab {

static std::vector<at::Tensor> tensorList(Napi::Env env, const Napi::Value& v, const char* what) {
  std::vector<at::Tensor> out;
  if (v.IsNull() || v.IsUndefined()) return out;
  auto a = v.As<Napi::Array>();
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value x = a.Get(i);
    out.push_back(x.IsNull() || x.IsUndefined() ? at::Tensor() : unwrapTensor(env, x, what));
  }
  return out;
}

static Napi::Value RequiresGrad(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), unwrapTensor(info.Env(), info[0], "requiresGrad").requires_grad());
}

static Napi::Value SetRequiresGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  at::Tensor& t = unwrapTensor(env, info[0], "requiresGrad_");
  bool flag = info[1].ToBoolean().Value();
  return guarded(env, "requiresGrad_ (tensor " + shapeString(t) + ")", [&]() -> Napi::Value {
    t.set_requires_grad(flag);
    return env.Undefined();
  });
}

static Napi::Value IsLeaf(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), unwrapTensor(info.Env(), info[0], "isLeaf").is_leaf());
}

static Napi::Value GetGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return wrapTensor(env, unwrapTensor(env, info[0], "grad").grad());
}

static Napi::Value SetGrad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  at::Tensor& t = unwrapTensor(env, info[0], "grad");
  at::Tensor g = info[1].IsNull() || info[1].IsUndefined() ? at::Tensor() : unwrapTensor(env, info[1], "grad");
  return guarded(env, "setting .grad", [&]() -> Napi::Value {
    t.mutable_grad() = g;
    return env.Undefined();
  });
}

// backward(t, gradient|null, retainGraph, createGraph)
static Napi::Value Backward(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  at::Tensor& t = unwrapTensor(env, info[0], "backward");
  at::Tensor g = info[1].IsNull() || info[1].IsUndefined() ? at::Tensor() : unwrapTensor(env, info[1], "backward");
  bool retain = info[2].ToBoolean().Value();
  bool create = info[3].ToBoolean().Value();
  return guarded(env, "backward (output " + shapeString(t) + ")", [&]() -> Napi::Value {
    t.backward(g, retain, create);
    return env.Undefined();
  });
}

// grad(outputs[], inputs[], gradOutputs[]|null, retainGraph, createGraph, allowUnused) -> Tensor|null[]
static Napi::Value Grad(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto outputs = tensorList(env, info[0], "grad outputs");
  auto inputs = tensorList(env, info[1], "grad inputs");
  auto gradOutputs = tensorList(env, info[2], "grad gradOutputs");
  bool create = info[4].ToBoolean().Value();
  c10::optional<bool> retain;
  if (info[3].IsBoolean()) retain = info[3].As<Napi::Boolean>().Value();
  bool allowUnused = info[5].ToBoolean().Value();
  return guarded(env, "grad", [&]() -> Napi::Value {
    auto gs = torch::autograd::grad(outputs, inputs, gradOutputs, retain, create, allowUnused);
    auto a = Napi::Array::New(env, gs.size());
    for (size_t i = 0; i < gs.size(); ++i) a.Set(static_cast<uint32_t>(i), wrapTensor(env, gs[i]));
    return a;
  });
}

static Napi::Value IsGradEnabled(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), c10::GradMode::is_enabled());
}

static Napi::Value SetGradEnabled(const Napi::CallbackInfo& info) {
  c10::GradMode::set_enabled(info[0].ToBoolean().Value());
  return info.Env().Undefined();
}

// Autocast (mixed precision) is thread-local dispatcher state, like grad mode: while a device's
// flag is on, the AutocastCPU / Autocast (CUDA) dispatch keys cast the inputs of the ops on
// PyTorch's lists: conv, linear, matmul, ... to the lower precision, the fp32 list (losses such
// as cross_entropy_loss and mse_loss on the CPU) to float32. These are the primitives that
// torch.autocast's __enter__ / __exit__ call; torch/amp.ts composes them and always restores
// the previous state.
static bool isCuda(Napi::Env env, const Napi::Value& v, const char* what) {
  std::string d = v.As<Napi::String>().Utf8Value();
  if (d == "cuda") return true;
  if (d == "cpu") return false;
  throw Napi::TypeError::New(env, std::string(what) + ": device type must be 'cpu' or 'cuda', not '" + d + "'");
}

// isAutocastEnabled(deviceType) (torch.is_autocast_enabled / torch.is_autocast_cpu_enabled)
static Napi::Value IsAutocastEnabled(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool cuda = isCuda(env, info[0], "isAutocastEnabled");
  return Napi::Boolean::New(env, cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled());
}

static Napi::Value SetAutocastEnabled(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool cuda = isCuda(env, info[0], "setAutocastEnabled");
  bool flag = info[1].ToBoolean().Value();
  if (cuda)
    at::autocast::set_enabled(flag);
  else
    at::autocast::set_cpu_enabled(flag);
  return env.Undefined();
}

// getAutocastDtype(deviceType) -> scalar type code (torch.get_autocast_gpu_dtype / _cpu_dtype)
static Napi::Value GetAutocastDtype(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool cuda = isCuda(env, info[0], "getAutocastDtype");
  auto t = cuda ? at::autocast::get_autocast_gpu_dtype() : at::autocast::get_autocast_cpu_dtype();
  return Napi::Number::New(env, static_cast<int>(t));
}

static Napi::Value SetAutocastDtype(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool cuda = isCuda(env, info[0], "setAutocastDtype");
  auto t = static_cast<at::ScalarType>(info[1].As<Napi::Number>().Int32Value());
  if (t != at::kBFloat16 && t != at::kHalf)
    throw Napi::TypeError::New(env, "setAutocastDtype: autocast lowers to bfloat16 or float16 only");
  if (cuda)
    at::autocast::set_autocast_gpu_dtype(t);
  else
    at::autocast::set_autocast_cpu_dtype(t);
  return env.Undefined();
}

// Nesting depth of autocast regions (all devices share it): the cache of casts is cleared when
// the outermost region is left (torch.autocast_increment_nesting / _decrement_nesting).
static Napi::Value AutocastIncrementNesting(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), at::autocast::increment_nesting());
}

static Napi::Value AutocastDecrementNesting(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), at::autocast::decrement_nesting());
}

static Napi::Value ClearAutocastCache(const Napi::CallbackInfo& info) {
  at::autocast::clear_cache();
  return info.Env().Undefined();
}

static Napi::Value IsAutocastCacheEnabled(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), at::autocast::is_autocast_cache_enabled());
}

static Napi::Value SetAutocastCacheEnabled(const Napi::CallbackInfo& info) {
  at::autocast::set_autocast_cache_enabled(info[0].ToBoolean().Value());
  return info.Env().Undefined();
}

void initAutograd(Napi::Env env, Napi::Object exports) {
  exports.Set("requiresGrad", Napi::Function::New(env, RequiresGrad));
  exports.Set("setRequiresGrad", Napi::Function::New(env, SetRequiresGrad));
  exports.Set("isLeaf", Napi::Function::New(env, IsLeaf));
  exports.Set("getGrad", Napi::Function::New(env, GetGrad));
  exports.Set("setGrad", Napi::Function::New(env, SetGrad));
  exports.Set("backward", Napi::Function::New(env, Backward));
  exports.Set("grad", Napi::Function::New(env, Grad));
  exports.Set("isGradEnabled", Napi::Function::New(env, IsGradEnabled));
  exports.Set("setGradEnabled", Napi::Function::New(env, SetGradEnabled));
  exports.Set("isAutocastEnabled", Napi::Function::New(env, IsAutocastEnabled));
  exports.Set("setAutocastEnabled", Napi::Function::New(env, SetAutocastEnabled));
  exports.Set("getAutocastDtype", Napi::Function::New(env, GetAutocastDtype));
  exports.Set("setAutocastDtype", Napi::Function::New(env, SetAutocastDtype));
  exports.Set("autocastIncrementNesting", Napi::Function::New(env, AutocastIncrementNesting));
  exports.Set("autocastDecrementNesting", Napi::Function::New(env, AutocastDecrementNesting));
  exports.Set("clearAutocastCache", Napi::Function::New(env, ClearAutocastCache));
  exports.Set("isAutocastCacheEnabled", Napi::Function::New(env, IsAutocastCacheEnabled));
  exports.Set("setAutocastCacheEnabled", Napi::Function::New(env, SetAutocastCacheEnabled));
}

}  // namespace stitchlab
