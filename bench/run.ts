// Benchmark dispatcher: `npm run bench -- <name> [options]`. Each benchmark is a module with
// main(args); it is imported only when asked for, so one benchmark's setup never slows another.
type Benchmark = { main(args: string[]): void | Promise<void> };

const BENCHMARKS: Record<string, () => Promise<Benchmark>> = {
  engine: () => import("./engine.js"),
  train: () => import("./train.js"),
  demo: () => import("./demo.js"),
  iris: () => import("./iris.js"),
  stitch: () => import("./stitch.js"),
  slurm: () => import("./slurm.js"),
  overhead: () => import("./overhead.js"),
  "iri-tightness": () => import("./iri-tightness.js"),
  "compare-full": () => import("./compare-full.js"),
  onnx: () => import("./onnx.js"),
  protocol: () => import("./protocol.js"),
};

const [name, ...args] = process.argv.slice(2);
if (name === undefined || !Object.hasOwn(BENCHMARKS, name)) {
  const known = Object.keys(BENCHMARKS).join(", ");
  console.error(
    name === undefined
      ? `usage: npm run bench -- <name> [options]; known benchmarks: ${known}`
      : `unknown benchmark '${name}'; known benchmarks: ${known}`,
  );
  process.exitCode = 2;
} else {
  try {
    await (await BENCHMARKS[name]()).main(args);
  } catch (e) {
    // A benchmark's failure is reported as its message; the stack adds nothing for a user.
    console.error(e instanceof Error ? e.message : e);
    process.exitCode = 1;
  }
}
