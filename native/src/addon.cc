#include "common.h"

#include <climits>
#include <cstdlib>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

// glibc gives freed heap back to the OS when the top of the heap is free (trim) and serves
// blocks of 32 MiB and more with fresh mmaps. Python frees each intermediate tensor as soon
// as it is unused, so the heap top is rarely free; a tidy() scope frees a whole step's tensors
// at once, so glibc trimmed and re-faulted ~1.4 GB per IRI step of a full ResNet-18 (4x the
// page faults of PyTorch, ~20% slower). Keeping freed memory for reuse removes that. The
// MALLOC_TRIM_THRESHOLD_ / MALLOC_MMAP_THRESHOLD_ environment variables, when set, win.
static void keepFreedMemory() {
#if defined(__GLIBC__)
  if (!std::getenv("MALLOC_TRIM_THRESHOLD_")) mallopt(M_TRIM_THRESHOLD, INT_MAX);
  if (!std::getenv("MALLOC_MMAP_THRESHOLD_")) mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
#endif
}

static Napi::Object InitStitchlab(Napi::Env env, Napi::Object exports) {
  keepFreedMemory();
  stitchlab::initTensor(env, exports);
  stitchlab::initOps(env, exports);
  stitchlab::initAutograd(env, exports);
  stitchlab::initRuntime(env, exports);
  stitchlab::initFast(env, exports);
  stitchlab::initGraphs(env, exports);
  stitchlab::initBatchNorm(env, exports);
  return exports;
}

NODE_API_MODULE(NODE_GYP_MODULE_NAME, InitStitchlab)
