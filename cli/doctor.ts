// `stitchlab doctor`: what libtorch this install runs on, how it was built, which device and
// BLAS it uses, how many threads (and so which layout convolutions run in), and a small matmul
// checked against float64.
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { repoRoot } from "../io/files.js";
import * as torch from "../torch/index.js";

export interface DoctorReport {
  libtorch: {
    version: string;
    source: string;
    libDir: string;
    cxx11abi: boolean;
    cudaBuild: boolean;
    /** CUDA graphs compiled in (a CUDA build that found the CUDA runtime headers; docs/gpu.md). */
    cudaGraphs: boolean;
  };
  build: { mkldnn: boolean; mkl: boolean; openmp: boolean; lapack: boolean; blas: string };
  device: { default: string; cudaAvailable: boolean; cudaDevices: number };
  /** layout: what convolutions run in on the CPU at this thread count (torch/layout.ts). */
  threads: { used: number; source: string; layout: torch.ConvLayout; onednnIsa: string };
  matmul: { n: number; maxRelError: number; ok: boolean; gflops: number };
}

/** The BLAS library this process actually loaded (libtorch picks libblas.so.3 at load time). */
function loadedBlas(): string {
  try {
    const maps = readFileSync("/proc/self/maps", "utf8");
    const hit = maps.split("\n").find((l) => /blas/i.test(l) && l.includes("/"));
    return hit ? hit.slice(hit.indexOf("/")) : "none loaded";
  } catch {
    return "unknown";
  }
}

function matmulCheck(n: number): DoctorReport["matmul"] {
  return torch.tidy(() => {
    torch.manualSeed(0);
    const a = torch.randn([n, n]);
    const b = torch.randn([n, n]);
    const got = a.matmul(b);
    const want = a.double().matmul(b.double());
    const maxRelError = got.double().sub(want).abs().max().item() / want.abs().max().item();
    a.matmul(b); // warm-up
    const reps = 5;
    const t0 = performance.now();
    for (let i = 0; i < reps; i++) a.matmul(b).dispose();
    const ms = (performance.now() - t0) / reps;
    return { n, maxRelError, ok: maxRelError < 1e-5, gflops: (2 * n ** 3) / (ms * 1e6) };
  });
}

export function doctor(): DoctorReport {
  const v = torch.buildInfo();
  const found = join(repoRoot, "native", "build", "libtorch.json");
  const lt = existsSync(found) ? JSON.parse(readFileSync(found, "utf8")) : { source: "unknown", libDir: "unknown" };
  const matmul = matmulCheck(512);
  const cudaAvailable = torch.cuda.isAvailable();
  return {
    libtorch: {
      version: v.torch,
      source: lt.source,
      libDir: lt.libDir,
      cxx11abi: v.cxx11abi,
      cudaBuild: v.builtWithCuda,
      cudaGraphs: torch.graphsUnavailable("cuda") === null,
    },
    build: { mkldnn: v.mkldnn, mkl: v.mkl, openmp: v.openmp, lapack: v.lapack, blas: loadedBlas() },
    device: { default: torch.DEFAULT_DEVICE, cudaAvailable, cudaDevices: cudaAvailable ? torch.cuda.deviceCount() : 0 },
    threads: {
      used: torch.getNumThreads(),
      source: process.env.STITCHLAB_THREADS
        ? "STITCHLAB_THREADS"
        : "all cores (set explicitly: libtorch may start with 1)",
      layout: torch.convLayout("cpu"),
      onednnIsa: torch.onednnIsa(),
    },
    matmul,
  };
}

/** Whether --device cuda can work here, and if not, which half is missing: the build or the GPU. */
function gpuLine(r: DoctorReport): string {
  if (r.device.cudaAvailable) return `cpu and cuda: ${r.device.cudaDevices} GPU(s) visible (--device cuda works)`;
  if (r.libtorch.cudaBuild)
    return "cpu only: a CUDA build of libtorch, but it sees no GPU (driver, CUDA_VISIBLE_DEVICES?)";
  return "cpu only: a CPU build of libtorch (build against a CUDA libtorch for --device cuda)";
}

export function formatDoctor(r: DoctorReport): string {
  const yes = (b: boolean) => (b ? "yes" : "no");
  return [
    `libtorch   ${r.libtorch.version} from ${r.libtorch.source} (${r.libtorch.libDir})`,
    `build      C++11 ABI ${yes(r.libtorch.cxx11abi)}, CUDA build ${yes(r.libtorch.cudaBuild)}${r.libtorch.cudaBuild ? ` (CUDA graphs ${yes(r.libtorch.cudaGraphs)})` : ""}, oneDNN ${yes(r.build.mkldnn)}, MKL ${yes(r.build.mkl)}, OpenMP ${yes(r.build.openmp)}, LAPACK ${yes(r.build.lapack)}`,
    `blas       ${r.build.blas}`,
    `device     ${gpuLine(r)}`,
    `threads    ${r.threads.used} (${r.threads.source}); convolutions ${r.threads.layout} (channels-last on one thread where oneDNN runs AVX-512; oneDNN: ${r.threads.onednnIsa})`,
    `matmul     ${r.matmul.n}x${r.matmul.n} float32: max relative error vs float64 ${r.matmul.maxRelError.toExponential(2)} ${r.matmul.ok ? "ok" : "FAILED"}, ${r.matmul.gflops.toFixed(1)} GFLOP/s`,
  ].join("\n");
}
