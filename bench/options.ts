// The options of the benchmarks that run on a device (engine, iris): --quick, --device D and
// --batch N, plus a benchmark's own value options; each value option is accepted both as
// `--name value` and as `--name=value`. Any other argument is an error naming the benchmark and
// its options.
import { DEFAULT_DEVICE, type Device, isCuda, parseDevice, requireDevice } from "../torch/index.js";

export interface DeviceOptions {
  /** --quick, or STITCHLAB_BENCH_QUICK=1. */
  quick: boolean;
  /** cpu (the default), cuda or cuda:N. */
  device: Device;
  /** --batch N, when given: it replaces the benchmark's own batch size (quick or not). */
  batch: number | undefined;
}

/** A value option of one benchmark: the placeholder shown in the usage, and what to do with the value. */
export interface ValueOption {
  arg: string;
  set(value: string): void;
}

export function positiveInt(name: string, flag: string, v: string): number {
  const n = Number(v);
  if (v.trim() === "" || !Number.isInteger(n) || n < 1)
    throw new Error(`${name}: ${flag} ${v}: need a positive integer`);
  return n;
}

export function parseDeviceOptions(name: string, args: string[], own: Record<string, ValueOption> = {}): DeviceOptions {
  const o: DeviceOptions = {
    quick: process.env.STITCHLAB_BENCH_QUICK === "1",
    device: DEFAULT_DEVICE,
    batch: undefined,
  };
  const values: Record<string, ValueOption> = {
    device: {
      arg: "cpu|cuda|cuda:N",
      set: (v) => {
        try {
          o.device = parseDevice(v);
        } catch (e) {
          throw new Error(`${name}: --${(e as Error).message}`);
        }
      },
    },
    batch: {
      arg: "N",
      set: (v) => {
        o.batch = positiveInt(name, "--batch", v);
      },
    },
    ...own,
  };
  const usage = ["--quick", ...Object.entries(values).map(([k, v]) => `--${k} ${v.arg}`)].join(", ");
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    if (a === "--quick") {
      o.quick = true;
      continue;
    }
    const m = /^--([a-z-]+)(?:=(.*))?$/s.exec(a);
    const option = m && Object.hasOwn(values, m[1]) ? values[m[1]] : undefined;
    if (!m || !option) throw new Error(`${name}: unknown option '${a}'; options: ${usage}`);
    let value = m[2];
    if (value === undefined) {
      value = args[++i];
      if (value === undefined) throw new Error(`${name}: --${m[1]} needs a value (${option.arg})`);
    }
    option.set(value);
  }
  return o;
}

/**
 * Stops at once, before anything is built or the Python side is started, when this process
 * cannot compute on `device`: cli/device.ts's message, which names the missing half (a CPU build
 * of libtorch, or no GPU visible) as `stitchlab doctor` does.
 */
export function requireBenchDevice(name: string, device: Device): void {
  try {
    requireDevice(device);
  } catch (e) {
    throw new Error(`${name}: ${(e as Error).message}`);
  }
}

/** How a table title names the device: "cpu", or "cuda (NVIDIA H200)" with the GPU's name. */
export function deviceLabel(device: Device, gpu: string | undefined): string {
  return isCuda(device) ? `${device} (${gpu ?? "unknown GPU"})` : device;
}
