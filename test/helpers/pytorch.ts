// Runs Python's PyTorch on the same inputs as our operators, in one Python process for all
// cases (torch's start-up costs seconds): inputs go over in a safetensors file, results come
// back in another (see torch_reference.py).
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadSafetensors, saveSafetensors } from "../../io/safetensors.js";
import * as torch from "../../torch/index.js";
import { PYTHON, REQUIREMENTS, skipUnless } from "./requirements.js";

export { PYTHON } from "./requirements.js";

const SCRIPT = join(dirname(fileURLToPath(import.meta.url)), "torch_reference.py");

/**
 * null when PYTHON imports torch, else why not: a reason to skip the comparisons, or to fail
 * them when STITCHLAB_REQUIRE_PYTORCH is set (see skipUnlessPytorch).
 */
export function pytorchUnavailable(): string | null {
  const why = REQUIREMENTS.pytorch.absent();
  return why === null ? null : `${why}; set STITCHLAB_PYTHON to a Python with PyTorch`;
}

export interface ReferenceCase {
  name: string;
  /** A Python expression over the inputs, torch, F (torch.nn.functional) and math. */
  expr: string;
  /** Input names: the tensor for input k of case c is inputs[`${c}/${k}`]. */
  inputs: string[];
}

export interface ReferenceResults {
  /** Results by case name: "<case>" for a tensor, "<case>#0", "<case>#1", ... for tuples. */
  outputs: Record<string, torch.Tensor>;
  /** Python's traceback for each case whose expression raised. */
  errors: Record<string, string>;
  torchVersion: string;
}

/** Evaluates every case in one Python process. `inputs` are the tensors of all cases, named "<case>/<input>". */
export function runReference(cases: ReferenceCase[], inputs: Record<string, torch.Tensor>): ReferenceResults {
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-ref-"));
  try {
    saveSafetensors(join(dir, "inputs.safetensors"), inputs);
    writeFileSync(join(dir, "cases.json"), JSON.stringify({ threads: torch.getNumThreads(), cases }));
    const r = spawnSync(PYTHON, [SCRIPT, dir], { encoding: "utf8", timeout: 120_000, cwd: dir });
    if (r.status !== 0)
      throw new Error(`${PYTHON} ${SCRIPT} failed (status ${r.status}): ${r.error?.message ?? ""}\n${r.stderr}`);
    const out = loadSafetensors(join(dir, "outputs.safetensors"));
    return {
      outputs: out.tensors,
      errors: JSON.parse(out.metadata.errors ?? "{}"),
      torchVersion: out.metadata.torch ?? "?",
    };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * The `skip` option for a test that needs Python's PyTorch: false, or the reason it is missing
 * (test/helpers/requirements.ts `missing`). In CI (CI set, as .ci/run's environment has it) or
 * with STITCHLAB_REQUIRE_PYTORCH, a missing PyTorch is an error instead: the set-up installs it,
 * so a skip there would hide a broken set-up.
 */
export function skipUnlessPytorch(): string | false {
  return skipUnless("pytorch", Boolean(process.env.STITCHLAB_REQUIRE_PYTORCH));
}

/** Whether PYTHON has torchvision; in CI (or with STITCHLAB_REQUIRE_PYTORCH) a missing one is an error, as for PyTorch. */
export function skipUnlessTorchvision(): string | false {
  return skipUnlessPytorch() || skipUnless("torchvision", Boolean(process.env.STITCHLAB_REQUIRE_PYTORCH));
}

/** Python's torch.__version__ as PYTHON reports it (an independent witness of what ran there). */
export function pythonTorchVersion(): string {
  const r = spawnSync(PYTHON, ["-c", "import torch; print(torch.__version__)"], { encoding: "utf8", cwd: tmpdir() });
  if (r.status !== 0) throw new Error(`${PYTHON} cannot import torch: ${r.stderr}`);
  return r.stdout.trim();
}
