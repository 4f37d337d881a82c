#include "common.h"

static Napi::Object InitStitchlab(Napi::Env env, Napi::Object exports) {
  stitchlab::initTensor(env, exports);
  stitchlab::initOps(env, exports);
  stitchlab::initAutograd(env, exports);
  stitchlab::initRuntime(env, exports);
  return exports;
}

NODE_API_MODULE(NODE_GYP_MODULE_NAME, InitStitchlab)
