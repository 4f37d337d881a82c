// JavaScript <-> IValue conversion, driven by the operator schema's argument types, so one
// generic call path serves every ATen operator.
#include "common.h"

namespace stitchlab {

[[noreturn]] static void typeError(Napi::Env env, const Where& where, const std::string& expected) {
  throw Napi::TypeError::New(env, where.str() + ": expected " + expected);
}

// A tensor argument; the message (naming the operator and argument) is built only on error.
static at::Tensor& tensorArg(Napi::Env env, const Napi::Value& v, const Where& where) {
  if (at::Tensor* t = liveTensor(env, v)) return *t;
  return unwrapTensor(env, v, where.str().c_str());
}

// A handle is a number too (common.h), so a Tensor passed where a number belongs is told apart
// here: handles are below -2^26, so one comparison clears every usual number.
static void rejectHandle(Napi::Env env, double d, const Where& where) {
  if (d <= -67108864.0 && decodeHandle(d).live) typeError(env, where, "a number, got a Tensor");
}

static int64_t toInt(Napi::Env env, const Napi::Value& v, const Where& where) {
  if (v.IsNumber()) {
    double d = v.As<Napi::Number>().DoubleValue();
    rejectHandle(env, d, where);
    if (d != static_cast<double>(static_cast<int64_t>(d))) typeError(env, where, "an integer, got " + std::to_string(d));
    return static_cast<int64_t>(d);
  }
  if (v.IsBigInt()) {
    bool lossless;
    return v.As<Napi::BigInt>().Int64Value(&lossless);
  }
  if (v.IsBoolean()) return v.As<Napi::Boolean>().Value() ? 1 : 0;
  typeError(env, where, "an integer");
}

static double toDouble(Napi::Env env, const Napi::Value& v, const Where& where) {
  if (v.IsNumber()) {
    double d = v.As<Napi::Number>().DoubleValue();
    rejectHandle(env, d, where);
    return d;
  }
  if (v.IsBigInt()) {
    bool lossless;
    return static_cast<double>(v.As<Napi::BigInt>().Int64Value(&lossless));
  }
  typeError(env, where, "a number");
}

// A JavaScript number becomes an integer Scalar when it is integral, otherwise a double:
// PyTorch does the same with Python ints and floats, and type promotion then matches.
// Callers who need a float Scalar for an integral value pass {float: x}.
c10::Scalar toScalar(Napi::Env env, const Napi::Value& v, const Where& where) {
  // Numbers first, in one napi call (it fails on anything else): the common case on hot paths.
  double d;
  if (napi_get_value_double(env, v, &d) == napi_ok) {
    rejectHandle(env, d, where);
    if (std::isfinite(d) && d == static_cast<double>(static_cast<int64_t>(d)) && std::abs(d) < 9.0e15)
      return c10::Scalar(static_cast<int64_t>(d));
    return c10::Scalar(d);
  }
  if (v.IsBoolean()) return c10::Scalar(v.As<Napi::Boolean>().Value());
  if (v.IsBigInt()) return c10::Scalar(toInt(env, v, where));
  if (v.IsNumber()) {
    double d = v.As<Napi::Number>().DoubleValue();
    if (std::isfinite(d) && d == static_cast<double>(static_cast<int64_t>(d)) && std::abs(d) < 9.0e15)
      return c10::Scalar(static_cast<int64_t>(d));
    return c10::Scalar(d);
  }
  if (v.IsObject() && v.As<Napi::Object>().Has("float"))
    return c10::Scalar(toDouble(env, v.As<Napi::Object>().Get("float"), where));
  typeError(env, where, "a number or boolean");
}

static c10::IValue toList(Napi::Env env, const Napi::Value& v, const c10::ListType& lt, c10::optional<int32_t> n,
                          const Where& where) {
  const c10::TypePtr& el = lt.getElementType();
  auto kind = el->kind();
  // `int[2] stride=2` style: a single number stands for a list of N copies.
  if ((kind == c10::TypeKind::IntType || kind == c10::TypeKind::SymIntType) && !v.IsArray()) {
    int64_t x = toInt(env, v, where);
    return c10::IValue(std::vector<int64_t>(n.value_or(1), x));
  }
  if (kind == c10::TypeKind::FloatType && !v.IsArray()) {
    return c10::IValue(std::vector<double>(n.value_or(1), toDouble(env, v, where)));
  }
  if (!v.IsArray()) typeError(env, where, "an array");
  auto a = v.As<Napi::Array>();
  uint32_t len = a.Length();
  switch (kind) {
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType: {
      std::vector<int64_t> out(len);
      for (uint32_t i = 0; i < len; ++i) out[i] = toInt(env, a.Get(i), where);
      return c10::IValue(out);
    }
    case c10::TypeKind::FloatType: {
      std::vector<double> out(len);
      for (uint32_t i = 0; i < len; ++i) out[i] = toDouble(env, a.Get(i), where);
      return c10::IValue(out);
    }
    case c10::TypeKind::BoolType: {
      c10::List<bool> out;
      for (uint32_t i = 0; i < len; ++i) out.push_back(a.Get(i).ToBoolean().Value());
      return c10::IValue(out);
    }
    case c10::TypeKind::TensorType: {
      c10::List<at::Tensor> out;
      out.reserve(len);
      for (uint32_t i = 0; i < len; ++i) out.push_back(tensorArg(env, a.Get(i), where));
      return c10::IValue(out);
    }
    case c10::TypeKind::OptionalType: {
      c10::List<c10::optional<at::Tensor>> out;
      for (uint32_t i = 0; i < len; ++i) {
        Napi::Value x = a.Get(i);
        if (x.IsNull() || x.IsUndefined())
          out.push_back(c10::nullopt);
        else
          out.push_back(tensorArg(env, x, where));
      }
      return c10::IValue(out);
    }
    default:
      typeError(env, where, "a list of a supported type (got schema type " + lt.str() + ")");
  }
}

c10::IValue toIValue(Napi::Env env, const Napi::Value& v, const c10::TypePtr& type, c10::optional<int32_t> n,
                     const Where& where) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
      return tensorArg(env, v, where);
    case c10::TypeKind::OptionalType:
      if (v.IsNull() || v.IsUndefined()) return c10::IValue();
      return toIValue(env, v, type->expectRef<c10::OptionalType>().getElementType(), n, where);
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      return toInt(env, v, where);
    case c10::TypeKind::FloatType:
      return toDouble(env, v, where);
    case c10::TypeKind::BoolType:
      if (!v.IsBoolean()) typeError(env, where, "a boolean");
      return v.As<Napi::Boolean>().Value();
    case c10::TypeKind::NumberType:
      return toScalar(env, v, where);
    case c10::TypeKind::StringType:
      if (!v.IsString()) typeError(env, where, "a string");
      return v.As<Napi::String>().Utf8Value();
    case c10::TypeKind::DeviceObjType:
      if (!v.IsString()) typeError(env, where, "a device string such as 'cpu' or 'cuda:0'");
      return c10::Device(v.As<Napi::String>().Utf8Value());
    case c10::TypeKind::ListType:
      return toList(env, v, type->expectRef<c10::ListType>(), n, where);
    default:
      typeError(env, where, "a value of unsupported schema type " + type->str());
  }
}

// A plain number in a result is boxed as {number: x}, since a bare number is a tensor handle.
static Napi::Value boxedNumber(Napi::Env env, double x) {
  auto o = Napi::Object::New(env);
  o.Set("number", Napi::Number::New(env, x));
  return o;
}

Napi::Value fromIValue(Napi::Env env, const c10::IValue& v) {
  if (v.isTensor()) return wrapTensor(env, v.toTensor());
  if (v.isNone()) return env.Null();
  if (v.isInt()) return boxedNumber(env, static_cast<double>(v.toInt()));
  if (v.isDouble()) return boxedNumber(env, v.toDouble());
  if (v.isBool()) return Napi::Boolean::New(env, v.toBool());
  if (v.isString()) return Napi::String::New(env, v.toStringRef());
  if (v.isDevice()) return Napi::String::New(env, v.toDevice().str());
  if (v.isTensorList()) {
    auto l = v.toTensorList();
    auto a = Napi::Array::New(env, l.size());
    for (size_t i = 0; i < l.size(); ++i) a.Set(static_cast<uint32_t>(i), wrapTensor(env, l.get(i)));
    return a;
  }
  if (v.isList()) {
    auto l = v.toListRef();
    auto a = Napi::Array::New(env, l.size());
    for (size_t i = 0; i < l.size(); ++i) a.Set(static_cast<uint32_t>(i), fromIValue(env, l[i]));
    return a;
  }
  if (v.isTuple()) {
    const auto& el = v.toTupleRef().elements();
    auto a = Napi::Array::New(env, el.size());
    for (size_t i = 0; i < el.size(); ++i) a.Set(static_cast<uint32_t>(i), fromIValue(env, el[i]));
    return a;
  }
  if (v.isScalar()) return boxedNumber(env, v.toScalar().toDouble());
  throw Napi::TypeError::New(env, std::string("cannot convert a value of type ") + v.tagKind() + " to JavaScript");
}

}  // namespace stitchlab
