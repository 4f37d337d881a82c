// Which instruction set oneDNN's CPU kernels run with here, and what follows from it. oneDNN
// picks the best the CPU has, capped by DNNL_MAX_CPU_ISA (or ONEDNN_MAX_CPU_ISA); it is asked of
// oneDNN itself (native/src/runtime.cc), so the cap is seen. torch/layout.ts chooses the
// convolution layout by it; autocast refuses bf16 where PyTorch 1.13 would send convolutions to
// oneDNN kernels that the cap removed.
import { existsSync, readFileSync } from "node:fs";
import { native } from "./native.js";

/**
 * oneDNN's CPU instruction sets (dnnl_cpu_isa_t in oneDNN 2.x's dnnl_types.h; hexadecimal there:
 * 0x7 avx2, 0x27 avx512_core, ...). The values are bit masks: each includes the bits of the sets
 * it extends.
 */
const ONEDNN_ISAS: Record<number, string> = {
  1: "sse41",
  3: "avx",
  7: "avx2",
  1031: "avx2_vnni",
  15: "avx512_mic",
  31: "avx512_mic_4ops",
  39: "avx512_core",
  103: "avx512_core_vnni",
  231: "avx512_core_bf16",
  999: "avx512_core_amx",
};
/** The bits that avx512_core (0x27) adds to avx2 (0x7). */
const AVX512_CORE_BITS = 0x20;

/** The ISA cap set in the environment (DNNL_MAX_CPU_ISA, or ONEDNN_MAX_CPU_ISA), as named there. */
function capName(): { name: string; variable: string } | null {
  for (const variable of ["DNNL_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA"]) {
    const name = process.env[variable];
    if (name) return { name, variable };
  }
  return null;
}

/**
 * oneDNN's ISA where libtorch hides oneDNN's query (a PyTorch wheel's or archive's libtorch): the
 * best the CPU's flags allow (AVX-512 BW/VL/DQ: avx512_core; AVX2), under the environment's cap.
 */
function isaFromFlags(): number {
  const best = cpuHasAvx512Core() ? 0x27 : cpuFlags().includes("avx2") ? 0x7 : 0x1;
  const cap = capName()?.name.toLowerCase();
  if (!cap || cap === "all") return best;
  const capped = Number(Object.entries(ONEDNN_ISAS).find(([, n]) => n === cap)?.[0] ?? best);
  return capped & best;
}

let isa: number | undefined;
/** oneDNN's effective ISA in this process, as a number; from the CPU's flags where oneDNN cannot be asked. */
function onednnIsaValue(): number {
  isa ??= native.onednnIsa();
  if (isa < 0) isa = isaFromFlags();
  return isa;
}

/** The instruction set oneDNN's CPU kernels use here ("avx2", "avx512_core", ...). */
export function onednnIsa(): string {
  const v = onednnIsaValue();
  return ONEDNN_ISAS[v] ?? `0x${v.toString(16)}`;
}

/** Whether oneDNN runs AVX-512 (core or better) kernels here (torch.onednnAvx512). */
export function avx512(): boolean {
  return (onednnIsaValue() & AVX512_CORE_BITS) !== 0;
}

let flags: string[] | undefined;
/** The CPU's flags from /proc/cpuinfo, read once (autocast asks on every entry); none where there is no /proc. */
function cpuFlags(): string[] {
  if (flags === undefined) {
    const line = existsSync("/proc/cpuinfo") ? readFileSync("/proc/cpuinfo", "utf8").match(/^flags\s*:(.*)$/m) : null;
    flags = line ? line[1].split(/\s+/) : [];
  }
  return flags;
}

/**
 * Whether the CPU itself has what PyTorch 1.13 asks before it sends bf16 convolutions to oneDNN
 * (mkldnn_bf16_device_check: AVX-512 BW, VL and DQ), read from /proc/cpuinfo; false elsewhere.
 */
function cpuHasAvx512Core(): boolean {
  const flags = cpuFlags();
  return ["avx512bw", "avx512vl", "avx512dq"].every((f) => flags.includes(f));
}

/**
 * Why bf16 autocast cannot run on this CPU, or null when it can. PyTorch 1.13 routes bf16
 * convolutions to oneDNN when the CPU has AVX-512, whatever oneDNN's cap; capped below AVX-512,
 * oneDNN then has no bf16 kernel and libtorch fails with "could not create a primitive descriptor
 * iterator". (On a CPU without AVX-512 libtorch takes its own bf16 kernels, and autocast runs.)
 */
export function cpuBf16Refusal(): string | null {
  if (avx512() || !cpuHasAvx512Core()) return null;
  const cap = capName();
  return (
    `bf16 autocast on the CPU: oneDNN is capped at ${onednnIsa()}${cap ? ` (${cap.variable}=${cap.name})` : ""} on a CPU ` +
    "with AVX-512, where libtorch 1.13 sends bf16 convolutions to oneDNN kernels the cap removed; " +
    "lift the cap or run in float32 (no autocast)"
  );
}
