// --device: its form (cpu, cuda, cuda:N) is checked when parsed; whether this process can use it
// when a command is about to compute, so `run --executor slurm --device cuda` can be submitted
// from a login node without a GPU.
import type { Command } from "commander";
import * as torch from "../torch/index.js";

export function deviceArg(v: string): string {
  if (!/^(cpu|cuda(:\d+)?)$/.test(v)) throw new Error(`--device must be cpu, cuda or cuda:N, not '${v}'`);
  return v;
}

/** Throws, saying which half is missing, when this process cannot compute on `device`. */
export function requireDevice(device: string): void {
  if (device === "cpu") return;
  const why = !torch.buildInfo().builtWithCuda
    ? "this libtorch is a CPU build (build against a CUDA libtorch: see the README's GPU section)"
    : !torch.cuda.isAvailable()
      ? "libtorch sees no GPU (driver? CUDA_VISIBLE_DEVICES?)"
      : null;
  if (why) throw new Error(`--device ${device}: ${why}; \`stitchlab doctor\` shows what this install has`);
  const n = Number(device.split(":")[1] ?? 0);
  if (n >= torch.cuda.deviceCount())
    throw new Error(`--device ${device}: there are ${torch.cuda.deviceCount()} GPU(s), numbered from 0`);
}

/** --device and --autocast, for the commands that train or generate IRIs. */
export function computeOptions(cmd: Command, defaultDevice: string): Command {
  return cmd
    .option("--device <d>", "cpu, cuda or cuda:N", deviceArg, defaultDevice)
    .option(
      "--autocast <mode>",
      `mixed precision: ${torch.AUTOCAST_MODES.join(", ")} (forward and loss under bfloat16 autocast, as torch.autocast; default float32)`,
    );
}
