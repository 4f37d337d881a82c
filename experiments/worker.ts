// The worker process: runs one task of a cache, as `node experiments/worker.(ts|js) KEY --cache DIR
// [--device D] [--exit-with-parent]` (taskCommand in experiments/tasks.ts builds it). The local
// runner starts one per running task (experiments/runner.ts) and every Slurm job runs one
// (experiments/slurm.ts); it lives here, not in cli/, so that experiments/ never starts the CLI.
// Its protocol: progress and the end as JSON lines on stdout (runTaskOfCache), and on failure
// exit status 1 with the error as the last stderr line, prefixed "stitchlab: ".
//
// `worker --report OUT` is its report mode, a Slurm run's report job (reportCommand in
// experiments/tasks.ts): it writes the run's folder from the cache and prints what `stitchlab
// report OUT` prints (experiments/report.ts).
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { Worker } from "node:worker_threads";
import { DEFAULT_DEVICE, parseDevice } from "../torch/index.js";
import { runTaskOfCache } from "./tasks.js";

/**
 * Ends this process (and its process group, which the local runner makes it lead) once its
 * parent is gone: a runner killed with SIGKILL cannot stop its workers, and a worker left
 * running would hold its task's lock, so the rerun would wait on it. A task computes
 * synchronously for long stretches, so this main thread could not notice in time; a thread of
 * its own polls the parent pid (the process is re-parented when the parent dies) and sends
 * SIGTERM, whose default action ends the process at once, then SIGKILL should something hold
 * SIGTERM off. It is unref'd: it never keeps a finished worker alive.
 */
function exitWithParent(): void {
  const watch = `
    const { workerData } = require("node:worker_threads");
    const signal = (sig) => {
      for (const pid of [-workerData.pid, workerData.pid])
        try { return process.kill(pid, sig); } catch {}
    };
    const poll = setInterval(() => {
      if (process.ppid === workerData.ppid) return;
      clearInterval(poll);
      signal("SIGTERM");
      setTimeout(() => signal("SIGKILL"), 5000);
    }, 500);
  `;
  // execArgv: [] keeps tsx's loader (this process's --import) out of the thread: it runs plain JS.
  new Worker(watch, { eval: true, workerData: { pid: process.pid, ppid: process.ppid }, execArgv: [] }).unref();
}

try {
  const { positionals, values } = parseArgs({
    options: {
      cache: { type: "string" },
      // A string on the command line: parsed to a Device below (parseDevice), as the CLI's
      // --device is; whether this process can use it is checked by runTaskOfCache.
      device: { type: "string", default: DEFAULT_DEVICE },
      "exit-with-parent": { type: "boolean", default: false },
      report: { type: "string" },
    },
    allowPositionals: true,
  });
  const [key, ...extra] = positionals;
  if (values.report !== undefined) {
    if (positionals.length || values.cache) throw new Error("usage: worker --report OUT");
    // Loaded only here: a task's worker has no use for report/ (vega-lite, the renderer).
    const { reportFolder, reportText } = await import("./report.js");
    const { text, stream } = reportText(await reportFolder(values.report));
    if (stream === "stderr") console.error(text);
    else console.log(text);
  } else {
    if (!key || extra.length || !values.cache)
      throw new Error("usage: worker KEY --cache DIR [--device D] [--exit-with-parent], or worker --report OUT");
    if (values["exit-with-parent"]) exitWithParent();
    await runTaskOfCache(resolve(values.cache), key, parseDevice(values.device));
  }
} catch (e) {
  console.error(`stitchlab: ${(e as Error).message}`);
  process.exit(1);
}
