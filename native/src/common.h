// Shared pieces of the bridge: how a libtorch tensor lives inside a JavaScript value,
// how native bytes are reported to V8, and how C++ errors become JavaScript Errors.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <napi.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace stitchlab {

// A tensor handle is a JavaScript number that names a slot in the addon's table (tensor.cc) and
// the slot's generation; the at::Tensor lives in the slot. dispose() and scopes free a slot at
// once; a handle used after its slot was freed is caught by the generation. The garbage
// collector frees a slot only through a finaliser on its JavaScript Tensor object, which torch/
// attaches to the tensors that may be left to it (finalizeWhenCollected).
Napi::Value wrapTensor(Napi::Env env, at::Tensor t);
// Throws a JavaScript TypeError when v is not a tensor handle, an Error when it was freed.
at::Tensor& unwrapTensor(Napi::Env env, const Napi::Value& v, const char* what);
// The tensor of a live handle, or null (not a handle, or freed).
at::Tensor* liveTensor(Napi::Env env, const Napi::Value& v);
// What a number is as a handle. Every handle is a number below -2^26 whose fraction is 1/4.
struct Decoded {
  at::Tensor* tensor;  // null: not a handle
  uint32_t index;      // its slot
  bool live;           // the slot holds the handle's tensor (not freed since)
};
Decoded decodeHandle(double d);

// Where a converted value is (an operator's argument), for error messages only: the text is
// built when an error is thrown, never on the hot path of a call.
struct Where {
  const std::string& op;
  const std::string& arg;
  std::string str() const { return op + " argument '" + arg + "'"; }
};

// Converts between JavaScript values and libtorch IValues.
c10::IValue toIValue(Napi::Env env, const Napi::Value& v, const c10::TypePtr& type,
                     c10::optional<int32_t> n, const Where& where);
Napi::Value fromIValue(Napi::Env env, const c10::IValue& v);
// A JavaScript number as a Scalar: integral numbers become integers (as Python ints do).
c10::Scalar toScalar(Napi::Env env, const Napi::Value& v, const Where& where);

// An operator looked up by findOp: its dispatcher handle and its name for error messages.
struct OpEntry {
  c10::OperatorHandle handle;
  std::string name;  // "aten::conv2d" or "aten::add.Tensor"
};
// The operator with a findOp id; the id must be valid (callers check against opCount()).
const OpEntry& opEntry(uint32_t id);

std::string shapeString(const at::Tensor& t);

// Runs f, turning libtorch (c10::Error) and standard exceptions into a JavaScript Error whose
// message starts with `context`. Napi::Error passes through untouched.
template <typename F>
Napi::Value guarded(Napi::Env env, const std::string& context, F&& f) {
  try {
    return f();
  } catch (const Napi::Error&) {
    throw;
  } catch (const c10::Error& e) {
    throw Napi::Error::New(env, context + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, context + ": " + e.what());
  }
}

void initTensor(Napi::Env env, Napi::Object exports);
void initOps(Napi::Env env, Napi::Object exports);
void initAutograd(Napi::Env env, Napi::Object exports);
void initRuntime(Napi::Env env, Napi::Object exports);
void initFast(Napi::Env env, Napi::Object exports);
void initGraphs(Napi::Env env, Napi::Object exports);
void initBatchNorm(Napi::Env env, Napi::Object exports);

}  // namespace stitchlab
