// Tensor handles: the slot table they name, creation from and copies to JavaScript memory,
// disposal, finalisers, metadata, and the accounting that tells V8 how many native bytes the
// collectable handles keep alive (so the garbage collector runs when native memory, not only
// the JS heap, grows).
#include <cstring>
#include <memory>
#include <unordered_map>

#include "common.h"

namespace stitchlab {

// The slot table. A slot holds one handle's tensor; its generation changes each time the slot
// is freed, so a handle kept past its tensor's end no longer matches. Slots sit in fixed chunks
// so that a reference to a slot's tensor stays valid while other handles are made.
namespace {
struct Slot {
  at::Tensor t;
  const void* storage = nullptr;  // the storage counted for this handle, if any
  int64_t gen = 1;
  // The finaliser a JavaScript Tensor carries for this slot, if any. Ours to delete: a disposed
  // tensor's finaliser is deleted at once, since a pending one per disposed tensor (until its
  // object is collected) grew a loop that disposes by hand by ~20 MB.
  napi_ref finalizer = nullptr;
};
constexpr uint32_t kChunk = 4096;
// Never destroyed: at exit, libtorch's own statics may be gone before ours would be.
auto& chunks = *new std::vector<std::unique_ptr<Slot[]>>();
auto& freeSlots = *new std::vector<uint32_t>();
uint32_t slotCount = 0;

Slot& slotAt(uint32_t i) { return chunks[i / kChunk][i % kChunk]; }

// A handle is the number -(gen * 2^26 + slot + 1/4): never an integer and never above -2^26, so
// no integer (nor any number a caller would plausibly pass) is taken for a tensor, and the check
// that keeps a handle from passing for a number costs one comparison on the common path. Numbers, not napi
// Externals: an External carries a weak reference that the garbage collector walks, which cost
// more than libtorch's own work on a small operator (issue 16). 26 + 24 bits keep the quarter
// exact in a double.
constexpr int64_t kSlots = int64_t{1} << 26;
constexpr int64_t kMaxGen = int64_t{1} << 24;
double handleOf(uint32_t index, int64_t gen) { return -(static_cast<double>(gen * kSlots + index) + 0.25); }
}  // namespace

Decoded decodeHandle(double d) {
  if (!(d <= -static_cast<double>(kSlots)) || d < -static_cast<double>(kSlots * kMaxGen)) return {nullptr, 0, false};
  auto code = static_cast<int64_t>(-d);  // truncates the quarter
  if (-d - static_cast<double>(code) != 0.25) return {nullptr, 0, false};
  auto index = static_cast<uint32_t>(code % kSlots);
  if (index >= slotCount) return {nullptr, 0, false};
  Slot& s = slotAt(index);
  return {&s.t, index, s.gen == code / kSlots && s.t.defined()};
}

namespace {
// The native bytes of the tensors the garbage collector may free (those with a finaliser) are
// reported to V8, so that it collects when they grow. Tensors in a scope are not: the collector
// cannot free them, and counting them cost a hash-table entry and a V8 call per small operator.
// Several handles can share one storage (views); count the storage's bytes once, while at
// least one such handle refers to it.
struct StorageUse {
  int64_t handles;
  int64_t bytes;
};
auto& storageUses = *new std::unordered_map<const void*, StorageUse>();
int64_t liveHandles = 0;
int64_t accountedBytes = 0;
// Handles freed by the garbage collector's finaliser rather than by dispose(): tests use the
// count to find tensors that code left to the collector (a leak on some path).
int64_t collectedHandles = 0;
}  // namespace

// V8 is told of every storage's bytes as they come and go. (Telling it in 1 MiB steps was tried
// for speed: V8 20's external-memory pressure path then hit a fatal check in CppHeap marking.)
static void adjustExternal(Napi::BasicEnv env, int64_t delta) {
  Napi::MemoryManagement::AdjustExternalMemory(env, delta);
}

static const void* storageKey(const at::Tensor& t) {
  if (!t.defined() || !t.has_storage() || !t.device().is_cpu()) return nullptr;
  return t.storage().unsafeGetStorageImpl();
}

static void account(Napi::Env env, Slot& slot) {
  const void* key = storageKey(slot.t);
  if (!key) return;
  auto& use = storageUses[key];
  if (use.handles++ == 0) {
    use.bytes = static_cast<int64_t>(slot.t.storage().nbytes());
    accountedBytes += use.bytes;
    adjustExternal(env, use.bytes);
  }
  slot.storage = key;
}

static void unaccount(Napi::BasicEnv env, Slot& slot) {
  if (!slot.storage) return;
  auto it = storageUses.find(slot.storage);
  slot.storage = nullptr;
  if (it == storageUses.end()) return;
  if (--it->second.handles == 0) {
    accountedBytes -= it->second.bytes;
    adjustExternal(env, -it->second.bytes);
    storageUses.erase(it);
  }
}

// Finalisers of tensors the collector freed: deleted at the next call that may touch the heap
// (a basic finaliser, which runs inside the collection, may not).
static auto& collectedFinalizers = *new std::vector<napi_ref>();
static void deleteCollectedFinalizers(napi_env env) {
  for (napi_ref r : collectedFinalizers) napi_delete_reference(env, r);
  collectedFinalizers.clear();
}

// Frees a live slot: its tensor, its bytes' account, its finaliser, and the slot itself for
// reuse. `env` is null inside a collection: the finaliser is then deleted later.
static void releaseSlot(Napi::BasicEnv basic, napi_env env, uint32_t index) {
  Slot& slot = slotAt(index);
  unaccount(basic, slot);
  slot.t = at::Tensor();
  slot.gen = slot.gen + 1 < kMaxGen ? slot.gen + 1 : 1;
  if (slot.finalizer) {
    if (env) napi_delete_reference(env, slot.finalizer);
    else collectedFinalizers.push_back(slot.finalizer);
    slot.finalizer = nullptr;
  }
  freeSlots.push_back(index);
  --liveHandles;
}

Napi::Value wrapTensor(Napi::Env env, at::Tensor t) {
  if (!t.defined()) return env.Null();
  uint32_t index;
  if (!freeSlots.empty()) {
    index = freeSlots.back();
    freeSlots.pop_back();
  } else {
    if (slotCount == kSlots) throw Napi::RangeError::New(env, "more than 2^26 tensors are live");
    if (slotCount % kChunk == 0) chunks.emplace_back(new Slot[kChunk]);
    index = slotCount++;
  }
  Slot& slot = slotAt(index);
  slot.t = std::move(t);
  ++liveHandles;
  return Napi::Number::New(env, handleOf(index, slot.gen));
}

// What a value is as a handle (one napi call: it fails on anything but a number).
static Decoded lookup(Napi::Env env, const Napi::Value& v) {
  double d;
  if (napi_get_value_double(env, v, &d) != napi_ok) return {nullptr, 0, false};
  return decodeHandle(d);
}

at::Tensor* liveTensor(Napi::Env env, const Napi::Value& v) {
  Decoded d = lookup(env, v);
  return d.live ? d.tensor : nullptr;
}

at::Tensor& unwrapTensor(Napi::Env env, const Napi::Value& v, const char* what) {
  Decoded d = lookup(env, v);
  if (!d.tensor) throw Napi::TypeError::New(env, std::string(what) + ": expected a Tensor");
  if (!d.live) throw Napi::Error::New(env, std::string(what) + ": the tensor has been disposed");
  return *d.tensor;
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

// Frees a handle's tensor if it is live (freeing twice is not an error). Throws on a value that
// is no handle.
static void freeDecoded(Napi::Env env, Decoded d, const char* what) {
  if (!d.tensor) throw Napi::TypeError::New(env, std::string(what) + ": expected a Tensor");
  if (d.live) releaseSlot(env, env, d.index);
}

static Napi::Value Free(const Napi::CallbackInfo& info) {
  freeDecoded(info.Env(), lookup(info.Env(), info[0]), "free");
  return info.Env().Undefined();
}

// The buffer torch/memory.ts writes a closing scope's handles into (setFreeBuffer), so that
// freeBuffered(n) reads them as doubles rather than one napi call per array element.
static napi_ref freeBufferRef = nullptr;
static const double* freeBuffer = nullptr;
static uint32_t freeBufferLength = 0;

static Napi::Value SetFreeBuffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsTypedArray() || info[0].As<Napi::TypedArray>().TypedArrayType() != napi_float64_array)
    throw Napi::TypeError::New(env, "setFreeBuffer: expected a Float64Array");
  auto a = info[0].As<Napi::Float64Array>();
  if (freeBufferRef) napi_delete_reference(env, freeBufferRef);
  NAPI_THROW_IF_FAILED(env, napi_create_reference(env, a, 1, &freeBufferRef), Napi::Value());
  freeBuffer = a.Data();
  freeBufferLength = static_cast<uint32_t>(a.ElementLength());
  return env.Undefined();
}

// freeBuffered(n): free() for the first n handles in the free buffer.
static Napi::Value FreeBuffered(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t n = info[0].As<Napi::Number>().Uint32Value();
  if (n > freeBufferLength) throw Napi::RangeError::New(env, "freeBuffered: more handles than the buffer holds");
  for (uint32_t i = 0; i < n; ++i) freeDecoded(env, decodeHandle(freeBuffer[i]), "freeBuffered");
  return env.Undefined();
}

static Napi::Value IsLive(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), lookup(info.Env(), info[0]).live);
}

// A basic finaliser (it touches no JavaScript) runs during garbage collection itself; an
// ordinary one would be deferred to the event loop, so a synchronous training loop that
// leaves tensors to the collector would never free them. A handle freed already is skipped.
static void collect(node_api_basic_env env, void* data, void*) {
  Decoded d = decodeHandle(-(static_cast<double>(reinterpret_cast<uintptr_t>(data)) + 0.25));
  if (!d.live) return;
  ++collectedHandles;
  releaseSlot(Napi::BasicEnv(env), nullptr, d.index);
}

// finalizeWhenCollected(tensor, handle): from now on the garbage collector frees the handle's
// tensor when the JavaScript Tensor object is collected. torch/ calls it for a tensor made
// outside every scope, and for one that leaves its scopes alive (keep(), the result of the
// outermost tidy); a tensor in a scope is freed by the scope and needs no weak reference.
static Napi::Value FinalizeWhenCollected(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsObject()) throw Napi::TypeError::New(env, "finalizeWhenCollected: expected a Tensor object");
  Decoded d = lookup(env, info[1]);
  if (!d.tensor) throw Napi::TypeError::New(env, "finalizeWhenCollected: expected a Tensor handle");
  Slot& slot = slotAt(d.index);
  if (!d.live || slot.finalizer) return env.Undefined();
  // The finaliser's datum is the handle's code (gen * 2^26 + slot), which names the slot and
  // generation.
  auto code = static_cast<uintptr_t>(-info[1].As<Napi::Number>().DoubleValue());  // truncates the quarter
  if (!collectedFinalizers.empty()) deleteCollectedFinalizers(env);
  NAPI_THROW_IF_FAILED(
      env, napi_add_finalizer(env, info[0], reinterpret_cast<void*>(code), collect, nullptr, &slot.finalizer),
      Napi::Value());
  account(env, slot);
  return env.Undefined();
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

// The in-place version counter: bumped by every in-place write (an optimiser's step, copy_), so a
// cache derived from a tensor (models/onnx/blocked.ts's packed weights) knows when it is stale.
static Napi::Value Version(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(unwrapTensor(info.Env(), info[0], "version")._version()));
}

static Napi::Value IsMkldnn(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), unwrapTensor(info.Env(), info[0], "isMkldnn").is_mkldnn());
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
  exports.Set("isLive", Napi::Function::New(env, IsLive));
  exports.Set("setFreeBuffer", Napi::Function::New(env, SetFreeBuffer));
  exports.Set("freeBuffered", Napi::Function::New(env, FreeBuffered));
  exports.Set("finalizeWhenCollected", Napi::Function::New(env, FinalizeWhenCollected));
  exports.Set("shape", Napi::Function::New(env, Shape));
  exports.Set("strides", Napi::Function::New(env, Strides));
  exports.Set("isContiguous", Napi::Function::New(env, IsContiguous));
  exports.Set("tensorVersion", Napi::Function::New(env, Version));
  exports.Set("isMkldnn", Napi::Function::New(env, IsMkldnn));
  exports.Set("dtype", Napi::Function::New(env, Dtype));
  exports.Set("device", Napi::Function::New(env, Device));
  exports.Set("item", Napi::Function::New(env, Item));
  exports.Set("stats", Napi::Function::New(env, Stats));
}

}  // namespace stitchlab
