// Train-mode batch norm for channels-last (NHWC) float32 tensors on the CPU, forward and
// backward (torch/layout.ts says when activations are channels-last).
//
// Why our own: libtorch 1.13's channels-last batch norm loses precision when a channel's mean is
// large against its spread (ReLU outputs): at mean/sd 300 its output is 2.4e-4 off float64 where
// the contiguous kernel is 5.8e-6 off, and through a fresh width-1/8 ResNet-18 in train mode the
// input's gradient came out 10% off float64 (1e-6 in the contiguous layout), in Python PyTorch
// alike. It is also slow: 13 ms of a 68 ms PyTorch training step of the demo's model. Here the statistics take two passes (the
// mean, as deviations from a shift, then squared deviations from it), each summed in float over
// blocks of rows and in double across blocks; the backward sums likewise.
//
// Everything else (contiguous inputs, eval mode, other dtypes and devices) stays with libtorch: batchNormChannelsLast returns null and torch/functional.ts calls
// aten::batch_norm. Semantics are torch.nn.functional.batch_norm's: the output normalises with
// the biased batch variance, running_var is updated with the unbiased one, both running
// statistics with `momentum`; either may be absent (no update), and so may the weight (ones) and
// the bias (zeros).
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <vector>

#include "common.h"

namespace stitchlab {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows summed in float before the partial sum is added to the double total: short enough that
// float's rounding of summands near zero stays small, long enough to vectorise. Every sum is of
// terms near zero: deviations from a shift or from the mean, and gradients.
constexpr int64_t kBlock = 64;

// The kernels take the channel count as a template parameter CC for the zoo's widths (the
// inner loops then unroll into vector registers; 0: C at run time). Each per-channel sum adds
// kBlock rows in float, then the block's sum into a double total; Channels holds the block's
// float sums (on the stack when CC is fixed).
template <int64_t CC>
struct Channels {
  explicit Channels(int64_t c) : heap(CC > 0 ? 0 : c) {}
  alignas(64) float stack[CC > 0 ? CC : 1];
  std::vector<float> heap;
  float* part() { return CC > 0 ? stack : heap.data(); }
};

struct Stats {
  std::vector<double> mean, var;  // var: biased (sum of squares over R)
};

template <int64_t CC>
void forwardKernel(const float* __restrict x, float* __restrict y, int64_t R, int64_t Cdyn, const float* w,
                   const float* b, double eps, Stats& s, float* meanOut, float* invstdOut) {
  // meanOut: [2, C], the mean as float plus the float remainder (hi, lo): x - hi is exact for x
  // near the mean, and subtracting lo after it keeps the mean's double precision.
  Channels<CC> ch(Cdyn);
  const int64_t C = CC > 0 ? CC : Cdyn;
  float* __restrict part = ch.part();
  s.mean.assign(C, 0);
  s.var.assign(C, 0);
  // The mean sums deviations from a shift, the first block's mean (in double): summing the values
  // themselves in float would lose a channel far from zero to rounding (64 values of 300 carry
  // an error of about 1e-3), where the deviations are of the order of its spread.
  std::vector<float> shift(C);
  {
    const int64_t n = std::min(R, kBlock);
    std::vector<double> first(C, 0);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < C; ++c) first[c] += x[r * C + c];
    for (int64_t c = 0; c < C; ++c) shift[c] = static_cast<float>(first[c] / static_cast<double>(n));
  }
  const float* __restrict sh = shift.data();
  for (int64_t r0 = 0; r0 < R; r0 += kBlock) {
    const int64_t r1 = std::min(R, r0 + kBlock);
    for (int64_t c = 0; c < C; ++c) part[c] = 0.f;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < C; ++c) part[c] += x[r * C + c] - sh[c];
    for (int64_t c = 0; c < C; ++c) s.mean[c] += part[c];
  }
  for (int64_t c = 0; c < C; ++c) {
    s.mean[c] = sh[c] + s.mean[c] / static_cast<double>(R);
    meanOut[c] = static_cast<float>(s.mean[c]);
    meanOut[C + c] = static_cast<float>(s.mean[c] - meanOut[c]);
  }
  const float* __restrict mp = meanOut;
  const float* __restrict ml = meanOut + C;
  for (int64_t r0 = 0; r0 < R; r0 += kBlock) {
    const int64_t r1 = std::min(R, r0 + kBlock);
    for (int64_t c = 0; c < C; ++c) part[c] = 0.f;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const float d = (x[r * C + c] - mp[c]) - ml[c];
        part[c] += d * d;
      }
    for (int64_t c = 0; c < C; ++c) s.var[c] += part[c];
  }
  // y = (x - mean) * (invstd * w) + b: subtracting the mean first keeps a channel far from zero
  // exact, where folding it into one shift (x * scale + shift) would cancel in float.
  std::vector<float> scale(C);
  for (int64_t c = 0; c < C; ++c) {
    s.var[c] /= static_cast<double>(R);
    const double invstd = 1.0 / std::sqrt(s.var[c] + eps);
    invstdOut[c] = static_cast<float>(invstd);
    scale[c] = static_cast<float>(invstd * w[c]);
  }
  const float* __restrict sp = scale.data();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) y[r * C + c] = ((x[r * C + c] - mp[c]) - ml[c]) * sp[c] + b[c];
}

// dL/dx, dL/dw, dL/db from dL/dy (g), x, the batch mean (hi, lo as forwardKernel gives it) and
// invstd, w. gx may be null.
template <int64_t CC>
void backwardKernel(const float* __restrict g, const float* __restrict x, int64_t R, int64_t Cdyn,
                    const float* __restrict mean, const float* invstd, const float* w, float* __restrict gx,
                    float* gw, float* gb) {
  Channels<CC> a1(Cdyn), a2(Cdyn);
  const int64_t C = CC > 0 ? CC : Cdyn;
  float* __restrict p1 = a1.part();
  float* __restrict p2 = a2.part();
  const float* __restrict ml = mean + C;
  std::vector<double> sg(C, 0), sgx(C, 0);
  for (int64_t r0 = 0; r0 < R; r0 += kBlock) {
    const int64_t r1 = std::min(R, r0 + kBlock);
    for (int64_t c = 0; c < C; ++c) p1[c] = p2[c] = 0.f;
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t c = 0; c < C; ++c) {
        const float gv = g[r * C + c];
        p1[c] += gv;
        p2[c] += gv * ((x[r * C + c] - mean[c]) - ml[c]);
      }
    for (int64_t c = 0; c < C; ++c) {
      sg[c] += p1[c];
      sgx[c] += p2[c];
    }
  }
  std::vector<float> k1(C), k2(C), k3(C);
  for (int64_t c = 0; c < C; ++c) {
    const double is = invstd[c];
    if (gw) gw[c] = static_cast<float>(sgx[c] * is);
    if (gb) gb[c] = static_cast<float>(sg[c]);
    // gx = w*invstd * (g - mean(g) - (x - mean) * invstd^2 * mean(g * (x - mean)))
    //    = g*k1 + (x - mean)*k2 + k3 (the mean subtracted first, as in the forward)
    const double a = w[c] * is;
    k1[c] = static_cast<float>(a);
    k2[c] = static_cast<float>(-a * is * is * sgx[c] / static_cast<double>(R));
    k3[c] = static_cast<float>(-a * sg[c] / static_cast<double>(R));
  }
  if (!gx) return;
  const float* __restrict q1 = k1.data();
  const float* __restrict q2 = k2.data();
  const float* __restrict q3 = k3.data();
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c)
      gx[r * C + c] = g[r * C + c] * q1[c] + ((x[r * C + c] - mean[c]) - ml[c]) * q2[c] + q3[c];
}

// The channel counts of the zoo's CNNs get kernels with the count fixed at compile time.
template <typename F>
void byChannels(int64_t C, const F& f) {
  switch (C) {
    case 8: return f(std::integral_constant<int64_t, 8>{});
    case 16: return f(std::integral_constant<int64_t, 16>{});
    case 32: return f(std::integral_constant<int64_t, 32>{});
    case 64: return f(std::integral_constant<int64_t, 64>{});
    case 128: return f(std::integral_constant<int64_t, 128>{});
    case 256: return f(std::integral_constant<int64_t, 256>{});
    case 512: return f(std::integral_constant<int64_t, 512>{});
    default: return f(std::integral_constant<int64_t, 0>{});
  }
}

void updateRunning(const c10::optional<at::Tensor>& running, const std::vector<double>& batch, double momentum) {
  if (!running) return;
  at::NoGradGuard g;
  auto cpu = at::tensor(batch, at::kDouble).to(running->scalar_type());
  running->mul_(1 - momentum).add_(cpu, momentum);
}

struct BatchNormChannelsLastFn : public torch::autograd::Function<BatchNormChannelsLastFn> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, const at::Tensor& b,
                            // Optional, not Tensor: autograd takes every Tensor argument for an input.
                            c10::optional<at::Tensor> runningMean, c10::optional<at::Tensor> runningVar,
                            double momentum, double eps) {
    const int64_t C = x.size(1);
    const int64_t R = x.numel() / C;
    at::Tensor y = at::empty_like(x, at::MemoryFormat::ChannelsLast);
    at::Tensor mean = at::empty({2, C}, x.options());
    at::Tensor invstd = at::empty({C}, x.options());
    at::Tensor wc = w.contiguous(), bc = b.contiguous();
    Stats s;
    byChannels(C, [&](auto cc) {
      forwardKernel<decltype(cc)::value>(x.data_ptr<float>(), y.data_ptr<float>(), R, C, wc.data_ptr<float>(),
                                         bc.data_ptr<float>(), eps, s, mean.data_ptr<float>(),
                                         invstd.data_ptr<float>());
    });
    updateRunning(runningMean, s.mean, momentum);
    std::vector<double> unbiased(C);
    for (int64_t c = 0; c < C; ++c) unbiased[c] = s.var[c] * R / (R - 1);
    updateRunning(runningVar, unbiased, momentum);
    ctx->save_for_backward({x, wc, mean, invstd});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    // The kernels below are not differentiable; a second derivative would be silently zero.
    TORCH_CHECK(!at::GradMode::is_enabled(),
                "stitchlab's channels-last batch norm has no second derivative (create_graph through a "
                "train-mode batch norm); run with setConvLayout('contiguous')");
    auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& w = saved[1];
    const at::Tensor& mean = saved[2];
    const at::Tensor& invstd = saved[3];
    const int64_t C = x.size(1);
    const int64_t R = x.numel() / C;
    at::Tensor g = grads[0].contiguous(at::MemoryFormat::ChannelsLast);
    at::Tensor gx = ctx->needs_input_grad(0) ? at::empty_like(x, at::MemoryFormat::ChannelsLast) : at::Tensor();
    at::Tensor gw = at::empty({C}, x.options());
    at::Tensor gb = at::empty({C}, x.options());
    byChannels(C, [&](auto cc) {
      backwardKernel<decltype(cc)::value>(g.data_ptr<float>(), x.data_ptr<float>(), R, C, mean.data_ptr<float>(),
                                          invstd.data_ptr<float>(), w.data_ptr<float>(),
                                          gx.defined() ? gx.data_ptr<float>() : nullptr, gw.data_ptr<float>(),
                                          gb.data_ptr<float>());
    });
    // One entry per argument of forward, tensors or not.
    return {gx,          ctx->needs_input_grad(1) ? gw : at::Tensor(), ctx->needs_input_grad(2) ? gb : at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

bool applies(const at::Tensor& x, const at::Tensor* w, const at::Tensor* b) {
  if (!x.defined() || x.dim() != 4 || !x.device().is_cpu() || x.scalar_type() != at::kFloat) return false;
  if ((w && w->scalar_type() != at::kFloat) || (b && b->scalar_type() != at::kFloat)) return false;
  if (x.size(1) < 1 || x.numel() / x.size(1) < 2) return false;  // aten names the error
  return x.is_contiguous(at::MemoryFormat::ChannelsLast) && !x.is_contiguous();
}

// batchNormChannelsLast(x, weight|null, bias|null, runningMean|null, runningVar|null, momentum, eps)
//   -> the output, or null when libtorch's batch_norm should run instead.
Napi::Value BatchNormChannelsLast(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  at::Tensor* x = liveTensor(env, info[0]);
  at::Tensor* w = liveTensor(env, info[1]);
  at::Tensor* b = liveTensor(env, info[2]);
  if (!x || !applies(*x, w, b)) return env.Null();
  at::Tensor* rm = liveTensor(env, info[3]);
  at::Tensor* rv = liveTensor(env, info[4]);
  const double momentum = info[5].As<Napi::Number>().DoubleValue();
  const double eps = info[6].As<Napi::Number>().DoubleValue();
  return guarded(env, "batch_norm (channels-last, " + shapeString(*x) + ")", [&]() -> Napi::Value {
    c10::optional<at::Tensor> runningMean, runningVar;
    if (rm) runningMean = *rm;
    if (rv) runningVar = *rv;
    // No weight or bias: the affine identity, constants that need no gradient.
    const int64_t C = x->size(1);
    const at::Tensor weight = w ? *w : at::ones({C}, x->options());
    const at::Tensor bias = b ? *b : at::zeros({C}, x->options());
    return wrapTensor(env, BatchNormChannelsLastFn::apply(*x, weight, bias, runningMean, runningVar, momentum, eps));
  });
}

}  // namespace

void initBatchNorm(Napi::Env env, Napi::Object exports) {
  exports.Set("batchNormChannelsLast", Napi::Function::New(env, BatchNormChannelsLast));
}

}  // namespace stitchlab
