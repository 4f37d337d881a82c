// Shared pieces of the bridge: how a libtorch tensor lives inside a JavaScript value,
// how native bytes are reported to V8, and how C++ errors become JavaScript Errors.
#pragma once
#include <ATen/core/dispatch/Dispatcher.h>
#include <napi.h>
#include <torch/torch.h>

#include <string>
#include <vector>

namespace stitchlab {

// A tensor handle is a napi External owning one at::Tensor. The TypeScript Tensor class
// holds it; dispose() frees it early, the finaliser frees it otherwise.
struct TensorBox {
  // Marks a live box: a handle is checked by this word rather than by a napi type tag, which
  // costs a private-property write per tensor made and a read per argument (about 0.1 us per
  // small operator, issue 16). Handles reach the addon only from torch/'s Tensor class.
  static constexpr uint64_t kMagic = 0x5a17c41ab0e34d21ULL;
  uint64_t magic = kMagic;
  at::Tensor t;
  const void* storage = nullptr;  // the storage counted for this handle, if any
};

Napi::Value wrapTensor(Napi::Env env, at::Tensor t);
// Throws a JavaScript TypeError when v is not a live tensor handle.
at::Tensor& unwrapTensor(Napi::Env env, const Napi::Value& v, const char* what);
bool isTensorHandle(const Napi::Value& v);
void releaseTensor(Napi::BasicEnv env, TensorBox* box);

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

}  // namespace stitchlab
