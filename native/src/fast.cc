// Typed calls for the hottest operator signatures (issue 16). The generic callOp builds a JS
// array, converts each argument to an IValue by walking the schema, and calls the operator
// boxed; for a small tensor that host work costs more than the kernel. Here an operator whose
// schema has one of a few common signatures is bound once to libtorch's typed handle
// (TypedOperatorHandle, the same entry at::add uses), and each call takes its arguments
// directly: no array, no IValue stack, no boxing. Dispatch (autograd, device, autocast) is
// still libtorch's own, so results are those of callOp (tested against it).
#include <ATen/core/dispatch/Dispatcher.h>

#include "common.h"

namespace stitchlab {

using T = at::Tensor;
using S = at::Scalar;

// The signatures served, by kind (the names JavaScript passes to bindTyped).
using UnarySig = T(const T&);                            // relu, neg, exp, ...
using BinarySig = T(const T&, const T&);                 // mul.Tensor, div.Tensor, matmul, eq.Tensor, ...
using AlphaSig = T(const T&, const T&, const S&);        // add.Tensor, sub.Tensor (alpha)
using ScalarSig = T(const T&, const S&);                 // mul.Scalar, div.Scalar, eq.Scalar, ...
using ScalarAlphaSig = T(const T&, const S&, const S&);  // add.Scalar, sub.Scalar (alpha)
using InplaceAlphaSig = T&(T&, const T&, const S&);      // add_.Tensor, sub_.Tensor
using InplaceSig = T&(T&, const T&);                     // mul_.Tensor, div_.Tensor
using InplaceScalarSig = T&(T&, const S&);               // mul_.Scalar, div_.Scalar
using ReduceSig = T(const T&, c10::optional<at::ScalarType>);  // sum, mean (dtype=None)

template <typename Sig>
struct Bound {
  std::vector<c10::TypedOperatorHandle<Sig>> handles;
  std::vector<uint32_t> ids;  // the generic id of each bound operator (for its name and schema)
};

static Bound<UnarySig> unary;
static Bound<BinarySig> binary;
static Bound<AlphaSig> alpha;
static Bound<ScalarSig> scalar;
static Bound<ScalarAlphaSig> scalarAlpha;
static Bound<InplaceAlphaSig> inplaceAlpha;
static Bound<InplaceSig> inplace;
static Bound<InplaceScalarSig> inplaceScalar;
static Bound<ReduceSig> reduce;

template <typename Sig>
static uint32_t bind(Bound<Sig>& b, uint32_t id) {
  // typed() checks the C++ signature against the schema and throws on a mismatch.
  b.handles.push_back(opEntry(id).handle.template typed<Sig>());
  b.ids.push_back(id);
  return static_cast<uint32_t>(b.handles.size() - 1);
}

// bindTyped(id, kind) -> the operator's index among those of its kind; throws when its schema
// does not have that kind's signature.
static Napi::Value BindTyped(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t id = info[0].As<Napi::Number>().Uint32Value();
  std::string kind = info[1].As<Napi::String>().Utf8Value();
  return guarded(env, "bindTyped(" + opEntry(id).name + ", " + kind + ")", [&]() -> Napi::Value {
    uint32_t i;
    if (kind == "unary") i = bind(unary, id);
    else if (kind == "binary") i = bind(binary, id);
    else if (kind == "alpha") i = bind(alpha, id);
    else if (kind == "scalar") i = bind(scalar, id);
    else if (kind == "scalarAlpha") i = bind(scalarAlpha, id);
    else if (kind == "inplaceAlpha") i = bind(inplaceAlpha, id);
    else if (kind == "inplace") i = bind(inplace, id);
    else if (kind == "inplaceScalar") i = bind(inplaceScalar, id);
    else if (kind == "reduce") i = bind(reduce, id);
    else throw Napi::Error::New(env, "bindTyped: unknown kind '" + kind + "'");
    return Napi::Number::New(env, static_cast<double>(i));
  });
}

// An argument for the error message: its name in the schema and its shape or value.
static std::string describeArgs(uint32_t id, std::initializer_list<const T*> tensors, size_t scalars) {
  const auto& op = opEntry(id);
  const auto& formals = op.handle.schema().arguments();
  std::string s = op.name + "(";
  size_t i = 0;
  for (const T* t : tensors) {
    if (i) s += ", ";
    s += (i < formals.size() ? formals[i].name() : "?") + "=" + (t->defined() ? shapeString(*t) : "undefined");
    ++i;
  }
  for (size_t k = 0; k < scalars; ++k, ++i) s += ", " + (i < formals.size() ? formals[i].name() : "?") + "=<scalar>";
  return s + ")";
}

// Runs one typed call; a libtorch error names the operator and its arguments, as callOp's do.
template <typename F>
static Napi::Value run(Napi::Env env, F&& f, uint32_t id, std::initializer_list<const T*> tensors, size_t scalars) {
  try {
    return f();
  } catch (const Napi::Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw Napi::Error::New(env, describeArgs(id, tensors, scalars) + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, describeArgs(id, tensors, scalars) + ": " + e.what());
  }
}

template <typename Sig>
static uint32_t index(Napi::Env env, const Bound<Sig>& b, const Napi::Value& v) {
  uint32_t i = v.As<Napi::Number>().Uint32Value();
  if (i >= b.handles.size()) throw Napi::RangeError::New(env, "typed call: unknown operator index");
  return i;
}

static Napi::Value Unary(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t i = index(env, unary, info[0]);
  const T& a = unwrapTensor(env, info[1], "self");
  return run(env, [&] { return wrapTensor(env, unary.handles[i].call(a)); }, unary.ids[i], {&a}, 0);
}

static Napi::Value Binary(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t i = index(env, binary, info[0]);
  const T& a = unwrapTensor(env, info[1], "self");
  const T& b = unwrapTensor(env, info[2], "other");
  return run(env, [&] { return wrapTensor(env, binary.handles[i].call(a, b)); }, binary.ids[i], {&a, &b}, 0);
}

static Napi::Value Alpha(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t i = index(env, alpha, info[0]);
  const T& a = unwrapTensor(env, info[1], "self");
  const T& b = unwrapTensor(env, info[2], "other");
  const std::string& name = opEntry(alpha.ids[i]).name;
  S s = toScalar(env, info[3], Where{name, "alpha"});
  return run(env, [&] { return wrapTensor(env, alpha.handles[i].call(a, b, s)); }, alpha.ids[i], {&a, &b}, 1);
}

static Napi::Value Scalar(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t i = index(env, scalar, info[0]);
  const T& a = unwrapTensor(env, info[1], "self");
  S s = toScalar(env, info[2], Where{opEntry(scalar.ids[i]).name, "other"});
  return run(env, [&] { return wrapTensor(env, scalar.handles[i].call(a, s)); }, scalar.ids[i], {&a}, 1);
}

static Napi::Value ScalarAlpha(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t i = index(env, scalarAlpha, info[0]);
  const T& a = unwrapTensor(env, info[1], "self");
  const std::string& name = opEntry(scalarAlpha.ids[i]).name;
  S s = toScalar(env, info[2], Where{name, "other"});
  S al = toScalar(env, info[3], Where{name, "alpha"});
  return run(env, [&] { return wrapTensor(env, scalarAlpha.handles[i].call(a, s, al)); }, scalarAlpha.ids[i], {&a},
             2);
}

// In-place operators return nothing to JavaScript: the result is `self`, which the caller holds.
static Napi::Value InplaceAlpha(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t i = index(env, inplaceAlpha, info[0]);
  T& a = unwrapTensor(env, info[1], "self");
  const T& b = unwrapTensor(env, info[2], "other");
  S s = toScalar(env, info[3], Where{opEntry(inplaceAlpha.ids[i]).name, "alpha"});
  return run(
      env,
      [&]() -> Napi::Value {
        inplaceAlpha.handles[i].call(a, b, s);
        return env.Undefined();
      },
      inplaceAlpha.ids[i], {&a, &b}, 1);
}

static Napi::Value Inplace(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t i = index(env, inplace, info[0]);
  T& a = unwrapTensor(env, info[1], "self");
  const T& b = unwrapTensor(env, info[2], "other");
  return run(
      env,
      [&]() -> Napi::Value {
        inplace.handles[i].call(a, b);
        return env.Undefined();
      },
      inplace.ids[i], {&a, &b}, 0);
}

static Napi::Value InplaceScalar(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t i = index(env, inplaceScalar, info[0]);
  T& a = unwrapTensor(env, info[1], "self");
  S s = toScalar(env, info[2], Where{opEntry(inplaceScalar.ids[i]).name, "other"});
  return run(
      env,
      [&]() -> Napi::Value {
        inplaceScalar.handles[i].call(a, s);
        return env.Undefined();
      },
      inplaceScalar.ids[i], {&a}, 1);
}

static Napi::Value Reduce(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t i = index(env, reduce, info[0]);
  const T& a = unwrapTensor(env, info[1], "self");
  return run(env, [&] { return wrapTensor(env, reduce.handles[i].call(a, c10::nullopt)); }, reduce.ids[i], {&a}, 0);
}

void initFast(Napi::Env env, Napi::Object exports) {
  exports.Set("bindTyped", Napi::Function::New(env, BindTyped));
  exports.Set("unaryOp", Napi::Function::New(env, Unary));
  exports.Set("binaryOp", Napi::Function::New(env, Binary));
  exports.Set("alphaOp", Napi::Function::New(env, Alpha));
  exports.Set("scalarOp", Napi::Function::New(env, Scalar));
  exports.Set("scalarAlphaOp", Napi::Function::New(env, ScalarAlpha));
  exports.Set("inplaceAlphaOp", Napi::Function::New(env, InplaceAlpha));
  exports.Set("inplaceOp", Napi::Function::New(env, Inplace));
  exports.Set("inplaceScalarOp", Napi::Function::New(env, InplaceScalar));
  exports.Set("reduceOp", Napi::Function::New(env, Reduce));
}

}  // namespace stitchlab
