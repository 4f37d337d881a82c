// --device: its form (cpu, cuda, cuda:N) is checked when parsed; whether this process can use it
// when a command is about to compute, so `run --executor slurm --device cuda` can be submitted
// from a login node without a GPU.
import type { Command } from "commander";
import * as torch from "../torch/index.js";

/** --device's parser: the form is torch/'s check (parseDevice), the message names the flag. */
export function deviceArg(v: string): torch.Device {
  try {
    return torch.parseDevice(v);
  } catch {
    throw new Error(`--device must be cpu, cuda or cuda:N, not '${v}'`);
  }
}

// Whether this process can compute on a device: torch/device.ts, so that worker processes
// (experiments/worker.ts) check it as the commands do.
export { requireDevice } from "../torch/index.js";

/** --device, for the commands that compute (their --autocast is a key of their settings' schema). */
export function deviceOption(cmd: Command): Command {
  return cmd.option("--device <d>", "cpu, cuda or cuda:N", deviceArg, torch.DEFAULT_DEVICE);
}
