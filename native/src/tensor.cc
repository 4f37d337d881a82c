// Tensor handles: creation from and copies to JavaScript memory, disposal, metadata, and the
// accounting that tells V8 how many native bytes its handles keep alive (so the garbage
// collector runs when native memory, not only JS heap, grows).
#include <cstring>
#include <unordered_map>

#include "common.h"

namespace stitchlab {


// Several handles can share one storage (views); count the storage's bytes once, while at
// least one handle refers to it.
struct StorageUse {
  int64_t handles;
  int64_t bytes;
};
static std::unordered_map<const void*, StorageUse> storageUses;
static int64_t liveHandles = 0;
static int64_t accountedBytes = 0;
// Handles freed by the garbage collector's finaliser rather than by dispose(): tests use the
// count to find tensors that code left to the collector (a leak on some path).
static int64_t collectedHandles = 0;
// V8 is told of every storage's bytes as they come and go. (Telling it in 1 MiB steps was tried
// for speed: V8 20's external-memory pressure path then hit a fatal check in CppHeap marking.)
static void adjustExternal(Napi::BasicEnv env, int64_t delta) {
  Napi::MemoryManagement::AdjustExternalMemory(env, delta);
}

static const void* storageKey(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage() || !t.device().is_cpu()) return nullptr;
  return t.storage().unsafeGetStorageImpl();
}

static void account(Napi::Env env, TensorBox* box) {
  const void* key = storageKey(box->t);
  if (!key) return;
  auto& use = storageUses[key];
  if (use.handles++ == 0) {
    use.bytes = static_cast<int64_t>(box->t.storage().nbytes());
    accountedBytes += use.bytes;
    adjustExternal(env, use.bytes);
  }
  box->storage = key;
}

static void unaccount(Napi::BasicEnv env, TensorBox* box) {
  if (!box->storage) return;
  auto it = storageUses.find(box->storage);
  box->storage = nullptr;
  if (it == storageUses.end()) return;
  if (--it->second.handles == 0) {
    accountedBytes -= it->second.bytes;
    adjustExternal(env, -it->second.bytes);
    storageUses.erase(it);
  }
}

void releaseTensor(Napi::BasicEnv env, TensorBox* box) {
  if (!box->t.defined()) return;
  unaccount(env, box);
  box->t = at::Tensor();
  --liveHandles;
}

Napi::Value wrapTensor(Napi::Env env, at::Tensor t) {
  if (!t.defined()) return env.Null();
  auto* box = new TensorBox();
  box->t = std::move(t);
  // A basic finaliser (it touches no JavaScript) runs during garbage collection itself; an
  // ordinary one would be deferred to the event loop, so a synchronous training loop that
  // leaves tensors to the collector would never free them.
  auto ext = Napi::External<TensorBox>::New(env, box, [](Napi::BasicEnv env, TensorBox* b) {
    if (b->t.defined()) ++collectedHandles;
    releaseTensor(env, b);
    b->magic = 0;
    delete b;
  });
  ++liveHandles;
  account(env, box);
  return ext;
}

// The box of a tensor handle, or null. One napi call: napi_get_value_external fails on anything
// that is not an External, so no separate type check is needed (each call costs ~15 ns, and a
// binary operator unwraps two handles).
static TensorBox* boxOf(Napi::Env env, const Napi::Value& v) {
  void* data = nullptr;
  if (napi_get_value_external(env, v, &data) != napi_ok || data == nullptr) return nullptr;
  auto* box = static_cast<TensorBox*>(data);
  return box->magic == TensorBox::kMagic ? box : nullptr;
}

bool isTensorHandle(const Napi::Value& v) { return boxOf(v.Env(), v) != nullptr; }

at::Tensor& unwrapTensor(Napi::Env env, const Napi::Value& v, const char* what) {
  TensorBox* box = boxOf(env, v);
  if (!box) throw Napi::TypeError::New(env, std::string(what) + ": expected a Tensor");
  if (!box->t.defined())
    throw Napi::Error::New(env, std::string(what) + ": the tensor has been disposed");
  return box->t;
}

std::string shapeString(const at::Tensor& t) {
  std::string s = "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "] " + std::string(c10::toString(t.scalar_type()));
}

static std::vector<int64_t> toShape(Napi::Env env, const Napi::Value& v) {
  if (!v.IsArray()) throw Napi::TypeError::New(env, "shape must be an array of integers");
  auto a = v.As<Napi::Array>();
  std::vector<int64_t> shape(a.Length());
  for (uint32_t i = 0; i < a.Length(); ++i) {
    Napi::Value d = a.Get(i);
    if (!d.IsNumber() || d.As<Napi::Number>().DoubleValue() < 0)
      throw Napi::TypeError::New(env, "shape must be an array of non-negative integers");
    shape[i] = d.As<Napi::Number>().Int64Value();
  }
  return shape;
}

// fromBuffer(bytes: ArrayBufferView | ArrayBuffer, dtype: number, shape: number[]): copies.
static Napi::Value FromBuffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const uint8_t* data;
  size_t length;
  if (info[0].IsTypedArray()) {
    auto ta = info[0].As<Napi::TypedArray>();
    data = static_cast<const uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset();
    length = ta.ByteLength();
  } else if (info[0].IsDataView()) {
    auto dv = info[0].As<Napi::DataView>();
    data = static_cast<const uint8_t*>(dv.ArrayBuffer().Data()) + dv.ByteOffset();
    length = dv.ByteLength();
  } else if (info[0].IsArrayBuffer()) {
    auto ab = info[0].As<Napi::ArrayBuffer>();
    data = static_cast<const uint8_t*>(ab.Data());
    length = ab.ByteLength();
  } else {
    throw Napi::TypeError::New(env, "fromBuffer: expected a typed array or ArrayBuffer");
  }
  auto dtype = static_cast<at::ScalarType>(info[1].As<Napi::Number>().Int32Value());
  auto shape = toShape(env, info[2]);
  return guarded(env, "fromBuffer", [&]() -> Napi::Value {
    at::Tensor t = at::empty(shape, at::TensorOptions().dtype(dtype));
    size_t expected = t.numel() * t.element_size();
    if (expected != length)
      throw Napi::RangeError::New(env, "fromBuffer: shape " + shapeString(t) + " needs " +
                                           std::to_string(expected) + " bytes, got " +
                                           std::to_string(length));
    if (length) std::memcpy(t.data_ptr(), data, length);
    return wrapTensor(env, std::move(t));
  });
}

// toBuffer(t): a fresh ArrayBuffer with the tensor's elements, row-major, on the CPU.
static Napi::Value ToBuffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  at::Tensor& t = unwrapTensor(env, info[0], "toBuffer");
  return guarded(env, "toBuffer", [&]() -> Napi::Value {
    at::Tensor c = t.detach().to(at::kCPU).contiguous();
    size_t n = c.numel() * c.element_size();
    auto ab = Napi::ArrayBuffer::New(env, n);
    if (n) std::memcpy(ab.Data(), c.data_ptr(), n);
    return ab;
  });
}

static Napi::Value Free(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  TensorBox* box = boxOf(env, info[0]);
  if (!box) throw Napi::TypeError::New(env, "free: expected a Tensor");
  releaseTensor(env, box);
  return env.Undefined();
}

// freeMany(handles[]): free() for a scope's tensors in one call (tidy, torch/memory.ts).
static Napi::Value FreeMany(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArray()) throw Napi::TypeError::New(env, "freeMany: expected an array of Tensors");
  auto a = info[0].As<Napi::Array>();
  for (uint32_t i = 0, n = a.Length(); i < n; ++i) {
    TensorBox* box = boxOf(env, a.Get(i));
    if (!box) throw Napi::TypeError::New(env, "freeMany: expected an array of Tensors");
    releaseTensor(env, box);
  }
  return env.Undefined();
}

static Napi::Value IsLive(const Napi::CallbackInfo& info) {
  TensorBox* box = boxOf(info.Env(), info[0]);
  return Napi::Boolean::New(info.Env(), box && box->t.defined());
}

static Napi::Value Shape(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  at::Tensor& t = unwrapTensor(env, info[0], "shape");
  auto a = Napi::Array::New(env, t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) a.Set(static_cast<uint32_t>(i), Napi::Number::New(env, static_cast<double>(t.size(i))));
  return a;
}

static Napi::Value Strides(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  at::Tensor& t = unwrapTensor(env, info[0], "stride");
  auto a = Napi::Array::New(env, t.dim());
  for (int64_t i = 0; i < t.dim(); ++i) a.Set(static_cast<uint32_t>(i), Napi::Number::New(env, static_cast<double>(t.stride(i))));
  return a;
}

static Napi::Value IsContiguous(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), unwrapTensor(info.Env(), info[0], "isContiguous").is_contiguous());
}

static Napi::Value Dtype(const Napi::CallbackInfo& info) {
  at::Tensor& t = unwrapTensor(info.Env(), info[0], "dtype");
  return Napi::Number::New(info.Env(), static_cast<int>(t.scalar_type()));
}

static Napi::Value Device(const Napi::CallbackInfo& info) {
  at::Tensor& t = unwrapTensor(info.Env(), info[0], "device");
  return Napi::String::New(info.Env(), t.device().str());
}

static Napi::Value Item(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  at::Tensor& t = unwrapTensor(env, info[0], "item");
  return guarded(env, "item (tensor " + shapeString(t) + ")", [&]() -> Napi::Value {
    if (t.numel() != 1)
      throw Napi::RangeError::New(env, "item: the tensor has " + std::to_string(t.numel()) +
                                           " elements (" + shapeString(t) + "), not 1");
    at::Scalar s = t.item();
    if (s.isBoolean()) return Napi::Boolean::New(env, s.toBool());
    if (s.isIntegral(false)) return Napi::Number::New(env, static_cast<double>(s.toLong()));
    return Napi::Number::New(env, s.toDouble());
  });
}

static Napi::Value Stats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto o = Napi::Object::New(env);
  o.Set("liveHandles", Napi::Number::New(env, static_cast<double>(liveHandles)));
  o.Set("accountedBytes", Napi::Number::New(env, static_cast<double>(accountedBytes)));
  o.Set("collectedHandles", Napi::Number::New(env, static_cast<double>(collectedHandles)));
  return o;
}

void initTensor(Napi::Env env, Napi::Object exports) {
  exports.Set("fromBuffer", Napi::Function::New(env, FromBuffer));
  exports.Set("toBuffer", Napi::Function::New(env, ToBuffer));
  exports.Set("free", Napi::Function::New(env, Free));
  exports.Set("freeMany", Napi::Function::New(env, FreeMany));
  exports.Set("isLive", Napi::Function::New(env, IsLive));
  exports.Set("shape", Napi::Function::New(env, Shape));
  exports.Set("strides", Napi::Function::New(env, Strides));
  exports.Set("isContiguous", Napi::Function::New(env, IsContiguous));
  exports.Set("dtype", Napi::Function::New(env, Dtype));
  exports.Set("device", Napi::Function::New(env, Device));
  exports.Set("item", Napi::Function::New(env, Item));
  exports.Set("stats", Napi::Function::New(env, Stats));
}

}  // namespace stitchlab
