// What a command prints when it is done: on a terminal, a short summary a person reads (the
// scores, the files written, the time taken); with --json, or into a pipe or a file, the one
// JSON line scripts and tests parse, as before.
export function printDone(o: { json?: boolean }, result: Record<string, unknown>, human: string[]): void {
  if (o.json || !process.stdout.isTTY) console.log(JSON.stringify({ event: "done", ...result }));
  else console.log(human.join("\n"));
}

/** A score with 3 decimals, or "-" when there is none. */
export const score = (v: number | null | undefined): string =>
  v === null || v === undefined || !Number.isFinite(v) ? "-" : v.toFixed(3);
