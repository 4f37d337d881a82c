// Progress for long commands: a bar on a terminal, JSON lines otherwise (at most one a second,
// plus the last), so logs of batch jobs stay parseable.
import cliProgress from "cli-progress";

export interface ProgressSink {
  update(done: number, total: number, fields: Record<string, number | string>): void;
  stop(): void;
}

export function progressSink(label: string, format: (f: Record<string, number | string>) => string): ProgressSink {
  if (process.stderr.isTTY) {
    const bar = new cliProgress.SingleBar(
      {
        format: `${label} [{bar}] {percentage}% | {info} | ETA {eta_formatted}`,
        stream: process.stderr,
        hideCursor: true,
      },
      cliProgress.Presets.shades_classic,
    );
    let started = false;
    return {
      update(done, total, fields) {
        if (!started) {
          bar.start(total, 0, { info: "" });
          started = true;
        }
        bar.setTotal(total);
        bar.update(done, { info: format(fields) });
      },
      stop: () => started && bar.stop(),
    };
  }
  let last = 0;
  let pending: string | null = null;
  return {
    update(done, total, fields) {
      pending = JSON.stringify({ event: label, done, total, ...fields });
      const now = Date.now();
      if (now - last >= 1000 || done === total) {
        console.log(pending);
        pending = null;
        last = now;
      }
    },
    stop() {
      if (pending) console.log(pending);
    },
  };
}
