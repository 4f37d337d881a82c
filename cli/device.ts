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

/** What --device says by default; a command whose tasks run elsewhere says where (run's, compare's). */
export const DEVICE_HELP = "cpu, cuda or cuda:N";

/**
 * --device, the one way every command adds it: its parser, its default (torch/'s DEFAULT_DEVICE)
 * and its help, DEVICE_HELP unless the command words where its tasks run.
 */
export function deviceOption(cmd: Command, help = DEVICE_HELP): Command {
  return cmd.option("--device <d>", help, deviceArg, torch.DEFAULT_DEVICE);
}
