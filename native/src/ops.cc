// The generic operator call: look an ATen operator up once by schema name, then call it boxed
// through libtorch's dispatcher. Autograd, device dispatch and kernels are libtorch's own.
#include <ATen/core/dispatch/Dispatcher.h>

#include <deque>

#include "common.h"

namespace stitchlab {

// Entries are only appended, and a deque never moves them: references stay valid.
static std::deque<OpEntry> ops;

const OpEntry& opEntry(uint32_t id) {
  if (id >= ops.size()) throw std::out_of_range("unknown operator id " + std::to_string(id));
  return ops[id];
}

// findOp(name, overload) -> integer id. Throws if libtorch has no such operator.
static Napi::Value FindOp(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string name = info[0].As<Napi::String>().Utf8Value();
  std::string overload = info.Length() > 1 && info[1].IsString() ? info[1].As<Napi::String>().Utf8Value() : "";
  auto h = c10::Dispatcher::singleton().findSchema({name, overload});
  std::string full = overload.empty() ? name : name + "." + overload;
  if (!h.has_value()) throw Napi::Error::New(env, "libtorch has no operator " + full);
  ops.push_back({*h, full});
  return Napi::Number::New(env, static_cast<double>(ops.size() - 1));
}

// Names the operator and describes its tensor arguments, for an error message.
static std::string describeCall(const OpEntry& op, const std::vector<c10::IValue>& stack, size_t nargs) {
  std::string s = op.name + "(";
  const auto& args = op.handle.schema().arguments();
  for (size_t i = 0; i < nargs && i < stack.size(); ++i) {
    if (i) s += ", ";
    s += args[i].name() + "=";
    const auto& v = stack[i];
    if (v.isTensor()) {
      s += v.toTensor().defined() ? shapeString(v.toTensor()) : "undefined";
    } else if (v.isTensorList()) {
      s += "[";
      auto l = v.toTensorList();
      for (size_t j = 0; j < l.size(); ++j) s += (j ? ", " : "") + shapeString(l.get(j));
      s += "]";
    } else {
      std::ostringstream o;
      o << v;
      s += o.str();
    }
  }
  return s + ")";
}

// callOp(id, args[]) -> result. `undefined` (or a missing trailing argument) takes the schema's
// default; a libtorch error becomes an Error naming the operator and its argument shapes.
static Napi::Value CallOp(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t id = info[0].As<Napi::Number>().Uint32Value();
  if (id >= ops.size()) throw Napi::RangeError::New(env, "callOp: unknown operator id");
  const OpEntry& op = ops[id];
  const auto& schema = op.handle.schema();
  const auto& formals = schema.arguments();
  Napi::Array args = info[1].As<Napi::Array>();
  uint32_t given = args.Length();
  if (given > formals.size())
    throw Napi::TypeError::New(env, op.name + ": takes " + std::to_string(formals.size()) + " arguments, got " +
                                        std::to_string(given));
  std::vector<c10::IValue> stack;
  stack.reserve(formals.size());
  for (size_t i = 0; i < formals.size(); ++i) {
    const auto& f = formals[i];
    Napi::Value v = i < given ? args.Get(static_cast<uint32_t>(i)) : env.Undefined();
    if (v.IsUndefined() && f.default_value().has_value()) {
      stack.push_back(*f.default_value());
    } else if (v.IsUndefined() && f.type()->kind() != c10::TypeKind::OptionalType) {
      throw Napi::TypeError::New(env, op.name + ": missing argument '" + f.name() + "'");
    } else {
      stack.push_back(toIValue(env, v, f.type(), f.N(), Where{op.name, f.name()}));
    }
  }
  size_t nargs = stack.size();
  try {
    op.handle.callBoxed(stack);
  } catch (const c10::Error& e) {
    throw Napi::Error::New(env, describeCall(op, stack, nargs) + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, describeCall(op, stack, nargs) + ": " + e.what());
  }
  if (stack.size() == 1) return fromIValue(env, stack[0]);
  if (stack.empty()) return env.Undefined();
  auto out = Napi::Array::New(env, stack.size());
  for (size_t i = 0; i < stack.size(); ++i) out.Set(static_cast<uint32_t>(i), fromIValue(env, stack[i]));
  return out;
}

// opSchema(id) -> the schema string, for documentation and debugging.
static Napi::Value OpSchema(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t id = info[0].As<Napi::Number>().Uint32Value();
  if (id >= ops.size()) throw Napi::RangeError::New(env, "opSchema: unknown operator id");
  std::ostringstream o;
  o << ops[id].handle.schema();
  return Napi::String::New(env, o.str());
}

void initOps(Napi::Env env, Napi::Object exports) {
  exports.Set("findOp", Napi::Function::New(env, FindOp));
  exports.Set("callOp", Napi::Function::New(env, CallOp));
  exports.Set("opSchema", Napi::Function::New(env, OpSchema));
}

}  // namespace stitchlab
