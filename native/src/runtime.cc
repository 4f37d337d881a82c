// Process-wide settings and facts: versions and build, threads, seed, CUDA, and writing
// torch.save's format (through libtorch's own pickler; reading is io/pickle.ts).
#include <dlfcn.h>
#include <torch/serialize.h>
#include <cstring>
#include <torch/version.h>

#include "common.h"

namespace stitchlab {

static Napi::Value Version(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto o = Napi::Object::New(env);
  o.Set("torch", TORCH_VERSION);
  o.Set("cxx11abi", Napi::Boolean::New(env, _GLIBCXX_USE_CXX11_ABI == 1));
  o.Set("builtWithCuda", Napi::Boolean::New(env, STITCHLAB_CUDA == 1));
  o.Set("mkldnn", Napi::Boolean::New(env, at::hasMKLDNN()));
  o.Set("mkl", Napi::Boolean::New(env, at::hasMKL()));
  o.Set("openmp", Napi::Boolean::New(env, at::hasOpenMP()));
  o.Set("lapack", Napi::Boolean::New(env, at::hasLAPACK()));
#if defined(__SANITIZE_ADDRESS__)
  o.Set("addressSanitizer", Napi::Boolean::New(env, true));
#else
  o.Set("addressSanitizer", Napi::Boolean::New(env, false));
#endif
  o.Set("parallelInfo", at::get_parallel_info());
  o.Set("config", at::show_config());
  return o;
}

static Napi::Value SetNumThreads(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int n = info[0].As<Napi::Number>().Int32Value();
  if (n < 1) throw Napi::RangeError::New(env, "setNumThreads: need at least 1 thread");
  at::set_num_threads(n);
  return env.Undefined();
}

static Napi::Value GetNumThreads(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), at::get_num_threads());
}

// The instruction set oneDNN's CPU kernels run with (dnnl_cpu_isa_t: a bit mask, so a value
// with 0x20 set is AVX-512 core or better; DNNL_MAX_CPU_ISA caps it). torch/layout.ts chooses
// the convolution layout by it, because oneDNN 2.6's AVX2 channels-last convolutions corrupt the
// heap at small channel counts. Looked up at run time, not linked: Debian's libtorch loads
// libdnnl.so.2 with its symbols exported, a PyTorch wheel's libtorch hides them, and then this
// says -1 (unknown) and torch/isa.ts decides from the CPU's flags and the cap. Asking fixes the ISA for the
// process, as oneDNN's first kernel would.
static Napi::Value OnednnIsa(const Napi::CallbackInfo& info) {
  using GetIsa = int (*)();
  void* sym = dlsym(RTLD_DEFAULT, "dnnl_get_effective_cpu_isa");
  // Node opens addons without RTLD_GLOBAL, so libtorch's own dependencies are looked up by name.
  for (const char* lib : {"libdnnl.so.2", "libdnnl.so.3"}) {
    if (sym) break;
    if (void* h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD)) sym = dlsym(h, "dnnl_get_effective_cpu_isa");
  }
  auto get = reinterpret_cast<GetIsa>(sym);
  return Napi::Number::New(info.Env(), get ? get() : -1);
}

static Napi::Value ManualSeed(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool lossless;
  uint64_t seed = info[0].IsBigInt() ? info[0].As<Napi::BigInt>().Uint64Value(&lossless)
                                     : static_cast<uint64_t>(info[0].As<Napi::Number>().Int64Value());
  torch::manual_seed(seed);
  return env.Undefined();
}

static Napi::Value CudaIsAvailable(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), torch::cuda::is_available());
}

static Napi::Value CudaDeviceCount(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(torch::cuda::device_count()));
}

static Napi::Value CudaSynchronize(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, "cuda.synchronize", [&]() -> Napi::Value {
    if (torch::cuda::is_available()) torch::cuda::synchronize();
    return env.Undefined();
  });
}

// cuDNN's TF32 switch for float32 convolutions on Ampere and later GPUs (PyTorch's
// torch.backends.cudnn.allow_tf32, on by default in both): read it, or set it with a boolean.
// A CPU build keeps the flag and nothing reads it.
// Guarded: libtorch 2.9 checks there that the legacy flag is not mixed with its newer
// fp32-precision settings, and an error must reach JavaScript, not end the process.
static Napi::Value CudnnAllowTF32(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  return guarded(env, "cudnn.allowTF32", [&]() -> Napi::Value {
    if (info.Length() > 0 && info[0].IsBoolean()) at::globalContext().setAllowTF32CuDNN(info[0].As<Napi::Boolean>().Value());
    return Napi::Boolean::New(env, at::globalContext().allowTF32CuDNN());
  });
}

// JavaScript value -> IValue for pickleSave: tensors, numbers, strings, booleans, null, arrays
// (as lists) and plain objects (as dicts with string keys).
static const char* kTensorKey = "__stitchlab_tensor__";
static c10::IValue anyToIValue(Napi::Env env, const Napi::Value& v, int depth) {
  if (depth > 64) throw Napi::RangeError::New(env, "torch.save: value nested too deeply");
  // torch/serialize.ts passes each tensor as {tensor: handle}: a bare number is a number here.
  if (v.IsObject() && !v.IsArray()) {
    auto o = v.As<Napi::Object>();
    if (o.Has(kTensorKey)) return unwrapTensor(env, o.Get(kTensorKey), "torch.save");
  }
  if (v.IsNull() || v.IsUndefined()) return c10::IValue();
  if (v.IsBoolean()) return v.As<Napi::Boolean>().Value();
  if (v.IsString()) return v.As<Napi::String>().Utf8Value();
  if (v.IsNumber()) {
    double d = v.As<Napi::Number>().DoubleValue();
    if (std::isfinite(d) && d == static_cast<double>(static_cast<int64_t>(d))) return static_cast<int64_t>(d);
    return d;
  }
  if (v.IsArray()) {
    auto a = v.As<Napi::Array>();
    c10::impl::GenericList l(c10::AnyType::get());
    for (uint32_t i = 0; i < a.Length(); ++i) l.push_back(anyToIValue(env, a.Get(i), depth + 1));
    return l;
  }
  if (v.IsObject()) {
    auto o = v.As<Napi::Object>();
    c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
    auto keys = o.GetPropertyNames();
    for (uint32_t i = 0; i < keys.Length(); ++i) {
      Napi::Value k = keys.Get(i);
      d.insert(k.ToString().Utf8Value(), anyToIValue(env, o.Get(k), depth + 1));
    }
    return d;
  }
  throw Napi::TypeError::New(env, "torch.save: cannot save this JavaScript value");
}

// pickleSave(value) -> bytes in torch.save's zip format, readable by Python's torch.load.
static Napi::Value PickleSave(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  c10::IValue v = anyToIValue(env, info[0], 0);
  return guarded(env, "torch.save", [&]() -> Napi::Value {
    std::vector<char> bytes = torch::pickle_save(v);
    auto ab = Napi::ArrayBuffer::New(env, bytes.size());
    if (!bytes.empty()) std::memcpy(ab.Data(), bytes.data(), bytes.size());
    return ab;
  });
}

void initRuntime(Napi::Env env, Napi::Object exports) {
  exports.Set("version", Napi::Function::New(env, Version));
  exports.Set("setNumThreads", Napi::Function::New(env, SetNumThreads));
  exports.Set("getNumThreads", Napi::Function::New(env, GetNumThreads));
  exports.Set("onednnIsa", Napi::Function::New(env, OnednnIsa));
  exports.Set("manualSeed", Napi::Function::New(env, ManualSeed));
  exports.Set("cudaIsAvailable", Napi::Function::New(env, CudaIsAvailable));
  exports.Set("cudaDeviceCount", Napi::Function::New(env, CudaDeviceCount));
  exports.Set("cudaSynchronize", Napi::Function::New(env, CudaSynchronize));
  exports.Set("cudnnAllowTF32", Napi::Function::New(env, CudnnAllowTF32));
  exports.Set("pickleSave", Napi::Function::New(env, PickleSave));
}

}  // namespace stitchlab
