// What parts of the suite need from the machine (Python's PyTorch, torchvision, Fashion-MNIST,
// Chromium, util-linux's script), how to check each, and the one way tests turn a missing one into
// a skip: `missing`, which returns the skip reason (and records it), or throws where a skip would
// hide a broken set-up (CI). Outside CI a skip used to be silent, and `npm test` without PyTorch
// skipped a quarter of the suite; test/zz-requirements.test.ts, which runs last, checks the same
// requirements again and fails, listing what is missing and how to get it, unless
// STITCHLAB_ALLOW_SKIPS=1. (Each test file runs in its own process, so that file re-evaluates the
// checks rather than collecting the other files' records.)
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";

/** The Python with PyTorch: Debian's /usr/bin/python3 (not the one on PATH), or STITCHLAB_PYTHON. */
export const PYTHON = process.env.STITCHLAB_PYTHON || "/usr/bin/python3";

/** Where Debian's dataset-fashion-mnist puts the files (data/idx.ts FASHION_MNIST_ROOT). */
export const FASHION_MNIST_FILE = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";

/** Whether skips are allowed to pass: STITCHLAB_ALLOW_SKIPS=1. */
export const skipsAllowed = (): boolean => process.env.STITCHLAB_ALLOW_SKIPS === "1";

const SETUP = "bash scripts/setup.sh --tests installs it";

export interface Requirement {
  /** What is needed, in words. */
  what: string;
  /** null when present, else why not (one line). */
  absent: () => string | null;
  /** How to get it. */
  howToGet: string;
}

/** The last line of a failed command's error, for a one-line reason. */
function lastLine(r: { error?: Error; stderr: string }): string {
  return (r.error?.message ?? r.stderr).trim().split("\n").pop() ?? "";
}

const memo = <T>(f: () => T): (() => T) => {
  let done = false;
  let value: T;
  return () => {
    if (!done) {
      value = f();
      done = true;
    }
    return value;
  };
};

/** null when PYTHON imports torch and numpy, else why not. */
const pytorchAbsent = memo((): string | null => {
  // Not from the repository root, where `import torch` would find our torch/ folder.
  const r = spawnSync(PYTHON, ["-c", "import torch, numpy; print(torch.__version__)"], {
    encoding: "utf8",
    cwd: tmpdir(),
  });
  return r.status === 0 ? null : `${PYTHON} cannot import torch and numpy (${lastLine(r)})`;
});

const torchvisionAbsent = memo((): string | null => {
  const torch = pytorchAbsent();
  if (torch) return torch;
  const r = spawnSync(PYTHON, ["-c", "import torchvision"], { encoding: "utf8", cwd: tmpdir() });
  return r.status === 0 ? null : `${PYTHON} cannot import torchvision (${lastLine(r)})`;
});

/** The system Chromium: STITCHLAB_CHROMIUM, else chromium or chromium-browser on PATH; null when none. */
export const findChromium = memo((): string | null => {
  if (process.env.STITCHLAB_CHROMIUM) return process.env.STITCHLAB_CHROMIUM;
  for (const name of ["chromium", "chromium-browser"]) {
    const r = spawnSync("/bin/sh", ["-c", `command -v ${name}`], { encoding: "utf8" });
    if (r.status === 0 && r.stdout.trim()) return r.stdout.trim();
  }
  return null;
});

export const REQUIREMENTS = {
  pytorch: {
    what: "Python's PyTorch (with numpy), for the comparisons with PyTorch",
    absent: pytorchAbsent,
    howToGet: `apt-get install python3-torch (${SETUP}), or set STITCHLAB_PYTHON to a Python with torch and numpy`,
  },
  torchvision: {
    what: "torchvision for Python, for the comparisons with torchvision's models and transforms",
    absent: torchvisionAbsent,
    howToGet: `apt-get install python3-torchvision (${SETUP})`,
  },
  fashionMnist: {
    what: "Fashion-MNIST, for the tests that train and stitch on real data",
    absent: () => (existsSync(FASHION_MNIST_FILE) ? null : `${FASHION_MNIST_FILE} not found`),
    howToGet: `apt-get install dataset-fashion-mnist (${SETUP})`,
  },
  chromium: {
    what: "Chromium, for the test that opens report.html in a headless browser",
    absent: () => (findChromium() ? null : "no chromium or chromium-browser on PATH, and STITCHLAB_CHROMIUM unset"),
    howToGet: `apt-get install chromium (${SETUP}), or set STITCHLAB_CHROMIUM to a Chromium binary`,
  },
  script: {
    what: "util-linux's script, for the tests that need a terminal (a pty)",
    absent: memo(() => {
      const r = spawnSync("script", ["--version"], { encoding: "utf8" });
      return r.status === 0 ? null : `script --version failed (${lastLine(r)})`;
    }),
    howToGet: "apt-get install bsdutils (Debian's package of util-linux's script)",
  },
} satisfies Record<string, Requirement>;

export type RequirementName = keyof typeof REQUIREMENTS;

/** The reasons given by `missing` in this process, in order. */
export const recordedSkips: string[] = [];

/**
 * The `skip` option for tests that need `what`: false when `have`, else the reason (recorded in
 * recordedSkips). In CI (CI set, as .ci/run's environment has it) a missing requirement throws
 * instead, unless STITCHLAB_ALLOW_SKIPS=1: the set-up installs everything there, so a skip would
 * hide a broken set-up. With `required` (asked for, e.g. STITCHLAB_REQUIRE_PYTORCH) it always throws.
 */
export function missing(what: string, have: boolean, howToGet: string, required = false): string | false {
  if (have) return false;
  const reason = `${what} is missing; to get it: ${howToGet}`;
  if (required) throw new Error(`required here (asked for), but ${reason}`);
  if (process.env.CI && !skipsAllowed())
    throw new Error(`required in CI, but ${reason} (STITCHLAB_ALLOW_SKIPS=1 skips instead)`);
  recordedSkips.push(reason);
  return reason;
}

/** `missing` for one of REQUIREMENTS: false when present, else the reason to skip. */
export function skipUnless(name: RequirementName, required = false): string | false {
  const r: Requirement = REQUIREMENTS[name];
  const why = r.absent();
  return missing(why === null ? r.what : `${r.what} (${why})`, why === null, r.howToGet, required);
}

/** The requirements this machine lacks, each with why and how to get it. */
export function absentRequirements(): { name: RequirementName; what: string; why: string; howToGet: string }[] {
  const out = [];
  for (const [name, r] of Object.entries(REQUIREMENTS) as [RequirementName, Requirement][]) {
    const why = r.absent();
    if (why !== null) out.push({ name, what: r.what, why, howToGet: r.howToGet });
  }
  return out;
}

/** The skip option of the tests that need Fashion-MNIST. */
export const skipUnlessFashionMnist = (): string | false => skipUnless("fashionMnist");
