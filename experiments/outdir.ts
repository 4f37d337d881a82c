// An experiment's folder (`run --out DIR`) belongs to one experiment at a time (issue 25, cases 10
// and 12). A run holds DIR's lock (DIR/run.lock, experiments/lock.ts) from before it records
// itself to its report, so a second run into DIR at the same time is refused at once, naming the
// holder, rather than mixing its files with the first's (results.csv of one, plan.json of the
// other). And DIR is refused when it holds another experiment's run, whose report this run would
// replace, unless --force, which moves that run's files aside into DIR/replaced-<time>/.
//
// What identifies an experiment: its name and its tasks' keys, which hash every setting and input
// (experiments/cache.ts), never paths. A folder belongs to the experiment its records name
// (plan.json, written with the report; local/run.json and slurm/run.json, written before the first
// task). A run of the same name whose plan holds every task recorded there is the same
// experiment: rerun (served from the cache), or extended (a point more), it loses no result.
// Another name, or the same name with a task the new plan lacks (other settings, or an older
// stitchlab's keys) is another experiment.
import { existsSync, mkdirSync, readdirSync, renameSync } from "node:fs";
import { join } from "node:path";
import { readJsonFile } from "../io/files.js";
import { describeHolder, withLock } from "./lock.js";
import type { Plan } from "./plan.js";

/** The files and folders a run writes into its folder (experiments/results.ts, local.ts, slurm.ts). */
const RUN_FILES = [
  "results.csv",
  "summary.csv",
  "report.html",
  "figures",
  "plan.json",
  "run.json",
  "env.json",
  "local",
  "slurm",
] as const;

/** The records that name the experiment a folder belongs to, and where its tasks are in each. */
const RECORDS = [
  { path: "plan.json", plan: (r: RecordedPlan) => r },
  { path: join("local", "run.json"), plan: (r: { plan: RecordedPlan }) => r.plan },
  { path: join("slurm", "run.json"), plan: (r: { plan: RecordedPlan }) => r.plan },
] as const;

interface RecordedPlan {
  experiment: { name: string };
  tasks: { key: string; label: string }[];
}

export const outLockPath = (out: string): string => join(out, "run.lock");

/** Why a run may not go into a folder without --force, and whose the folder is. */
interface OutProblem {
  /** What the folder holds, as the error says it ("holds the run of another experiment, ..."). */
  problem: string;
  /** The run there, as --force names what it moved aside. */
  owner: string;
}

/**
 * Why `plan`'s run may not go into `out` without --force: the folder holds another experiment's
 * run, or files of a run no record names. Null when it may (empty, new, or this experiment's).
 */
export function outOwnerProblem(out: string, plan: Plan): OutProblem | null {
  if (!existsSync(out)) return null;
  const name = plan.experiment.name;
  const keys = new Set(plan.tasks.map((t) => t.key));
  let recorded = false;
  for (const rec of RECORDS) {
    const path = join(out, rec.path);
    if (!existsSync(path)) continue;
    recorded = true;
    let theirs: RecordedPlan;
    try {
      theirs = (rec.plan as (r: unknown) => RecordedPlan)(readJsonFile(path, "a run's record"));
      if (typeof theirs?.experiment?.name !== "string" || !Array.isArray(theirs.tasks)) throw new Error("");
    } catch {
      return {
        problem: `holds a run whose record ${path} cannot be read, so it is not known to be this experiment's`,
        owner: "the run",
      };
    }
    const owner = `the run of "${theirs.experiment.name}"`;
    if (theirs.experiment.name !== name)
      return {
        problem: `holds the run of another experiment, "${theirs.experiment.name}" (${path}); this one is "${name}"`,
        owner,
      };
    const lacking = theirs.tasks.filter((t) => !keys.has(t.key));
    if (lacking.length)
      return {
        problem:
          `holds a run of "${name}" with other settings (${path}): ${lacking.length} of its ${theirs.tasks.length} ` +
          `tasks are not in this run's plan (${lacking[0].label}${lacking.length > 1 ? ", ..." : ""}), so their results would go`,
        owner,
      };
  }
  if (recorded) return null;
  const files = readdirSync(out).filter((f) => (RUN_FILES as readonly string[]).includes(f));
  return files.length
    ? { problem: `holds ${files.join(", ")} of a run that no plan.json or run.json names`, owner: "the files" }
    : null;
}

/**
 * Refuses an --out that belongs to another experiment (outOwnerProblem), before any work. With
 * `force` and `move`, that run's files are moved into out/replaced-<time>/ instead (nothing is
 * deleted), and what was moved where is returned for the caller to say.
 */
export function claimOut(out: string, plan: Plan, force: boolean, move: boolean): string | null {
  const found = outOwnerProblem(out, plan);
  if (!found) return null;
  if (!force)
    throw new Error(
      `--out ${out} ${found.problem}; running this experiment there would replace its report: give another --out, or --force to replace it (the earlier run's files are then moved to ${join(out, "replaced-<time>")})`,
    );
  if (!move) return null;
  const aside = join(out, `replaced-${new Date().toISOString().replace(/[:.]/g, "-")}`);
  mkdirSync(aside);
  for (const f of readdirSync(out))
    if ((RUN_FILES as readonly string[]).includes(f)) renameSync(join(out, f), join(aside, f));
  return `--force: ${found.owner} there is moved to ${aside}`;
}

/**
 * Runs fn holding out's lock; another live run holding it is an error at once (never waited
 * for: the folder is that run's until it ends). A lock left by a killed run is taken over.
 */
export function withOutLock<T>(out: string, fn: () => Promise<T>): Promise<T> {
  return withLock(outLockPath(out), fn, (h) => {
    throw new Error(
      `--out ${out} is in use by another stitchlab run (${describeHolder(h)}): wait for it to end (stitchlab status ${out}), or give another --out`,
    );
  });
}
