// Autograd entry points that are not ATen operators: requires_grad, .grad, backward, the
// functional grad(), and grad mode (the no_grad scope).
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
}

}  // namespace stitchlab
