"""stitchlab from Python: is model A functionally similar to model B, in one call.

    import stitchlab                      # this file: python/ on sys.path, or copy it
    r = stitchlab.compare(model_a, model_b, "fashion-mnist", test_limit=500)
    for c in r["controls"]:               # B->B: a model stitched with itself must agree
        print("control", "passed" if c["passed"] else f"FAILED at {c['min']}", c["hint"] or "")
    for v in r["verdicts"]:               # A->B (and the control's points)
        if v["relation"] != "identical":
            print(v["relation"], [(p["point"], p["state"]) for p in v["points"]])

As torch_cka's `CKA(m1, m2).compare(loader)`, but the answer is the stitchlab CLI's: both
modules are exported to ONNX (eval mode, opset 17, a dynamic batch axis) and
`stitchlab compare A.onnx B.onnx --dataset DATA --normalization ... --json` runs on them; the
dict it prints is returned (per pair and stitch point: standard and invariance-aware agreement
with 95% intervals, the IRI residual and `state`: close, apart or loose; then the report's path).
Other keywords become flags: `test_limit=500` -> `--test-limit 500`, `both_ways=True` ->
`--both-ways`, `points=["layer2.1", "layer4.1"]` -> `--points layer2.1,layer4.1`, a dict -> JSON;
`no_stitch_augment=True` -> `--no-stitch-augment` (models trained without augmentation).
`stitchlab compare --help` lists them; `out` (default runs/compare, from the current folder)
and `cache` (default ~/.cache/stitchlab: a second call on the same models is instant) among
them. The CLI's progress is copied to sys.stderr as it runs.

The CLI, in this order: `stitchlab=` (a path, or a command as a list, e.g. ["node", "--import",
"/repo/node_modules/tsx/dist/loader.mjs", "/repo/cli/main.ts"] runs the sources of a checkout
whose dist/ is not built; a bare "tsx" is found only from inside the checkout),
$STITCHLAB_BIN (a command line, split as the shell would), the checkout's bin/stitchlab.js next
to this file, `stitchlab` on PATH. A .js file (after links: `npm link` makes `stitchlab` one)
runs under $STITCHLAB_NODE, else `node` on PATH, rather than by its `#!/usr/bin/env node`: a
notebook's PATH often lacks the node a shell finds. Standard library and torch only, from
Debian's torch 1.13 on. The temporary folder goes when the call returns; the compare.yaml the
CLI writes names the .onnx files, so pass workdir= to keep them and run it again.
"""
import inspect
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

import torch

__all__ = ["compare", "StitchlabError"]


class StitchlabError(RuntimeError):
    """The CLI failed. str() ends with its last stderr lines, which name what was wrong;
    `.stderr` is all of it, `.command` what ran, `.result` the parsed JSON when it printed
    one (a run where some tasks failed still prints its verdicts)."""

    def __init__(self, message, command=None, stderr="", result=None):
        super().__init__(message)
        self.command, self.stderr, self.result = command, stderr, result


def compare(model_a, model_b, data="fashion-mnist", *, image_size=32, normalization=None,
            stitchlab=None, workdir=None, **flags):
    """Stitch model_a into model_b (both classifiers of 3-channel image_size px images) on the
    dataset `data`, and return `stitchlab compare --json`'s dict. normalization: how their
    inputs were normalised in training (a dataset's name, "none", or {"mean": [...], "std":
    [...]} in [0, 1] pixel units); by default the dataset's own statistics. workdir: where the
    .onnx files go and stay (by default a temporary folder, removed afterwards)."""
    for taken in ("dataset", "json"):
        if taken in flags:
            raise TypeError(f"compare() sets --{taken} itself (the dataset is data=)")
    command = _cli(stitchlab)
    folder = workdir or tempfile.mkdtemp(prefix="stitchlab-")
    try:
        os.makedirs(folder, exist_ok=True)
        paths = [os.path.join(folder, f"{n}.onnx") for n in ("A", "B")]
        for model, path in zip((model_a, model_b), paths):
            _export(model, path, image_size)
        norm = data if normalization is None else normalization
        args = ["compare", *paths, "--dataset", data, "--normalization", _value(norm), "--json"]
        for key, value in flags.items():
            if value is None or value is False:
                continue
            args.append("--" + key.replace("_", "-"))
            if value is not True:
                args.append(_value(value))
        return _run(command + args)
    finally:
        if not workdir:
            shutil.rmtree(folder, ignore_errors=True)


def _value(v):
    if isinstance(v, dict):
        return json.dumps(v)  # JSON is YAML: the CLI reads '{"mean": [...], "std": [...]}'
    if isinstance(v, (list, tuple)):
        return ",".join(str(x) for x in v)
    return str(v)


def torchscript_export():
    """torch.onnx.export's keyword for the TorchScript exporter: torch 2.9 made the dynamo exporter
    the default, and stitchlab's interpreter is tested on the TorchScript exporter's graphs
    (test/helpers/onnx_models.py), so every export here, in the tests, the benchmarks and the
    presets asks for it where the choice exists. A function, so that importing this module does
    not import torch.onnx (loaded lazily by recent torch)."""
    return {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}


def _export(model, path, size):
    # The exporter traces in eval mode (batch norm's running statistics, no dropout); the
    # module's own mode is put back afterwards. PRESERVE keeps each batch norm a node: the
    # default eval export folds it into the convolutions, and stitching's 'adapt' would then
    # leave it as exported. The input sits where the weights are.
    param = next(model.parameters(), None)
    x = torch.randn(2, 3, size, size, device=param.device if param is not None else "cpu")
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            torch.onnx.export(model, x, path, opset_version=17, input_names=["input"],
                              output_names=["output"],
                              dynamic_axes={"input": {0: "batch"}, "output": {0: "batch"}},
                              training=torch.onnx.TrainingMode.PRESERVE, **torchscript_export())
    finally:
        model.train(training)


def _cli(given):
    if given is None and os.environ.get("STITCHLAB_BIN"):
        given = shlex.split(os.environ["STITCHLAB_BIN"])
    if given is None:
        here = os.path.dirname(os.path.abspath(__file__))
        repo_bin = os.path.join(os.path.dirname(here), "bin", "stitchlab.js")
        given = repo_bin if os.path.exists(repo_bin) else shutil.which("stitchlab")
        if given is None:
            raise StitchlabError("no stitchlab CLI: pass stitchlab=PATH, set STITCHLAB_BIN, keep this "
                                 "file in its checkout's python/ folder, or `npm link` the checkout")
    if not isinstance(given, str):
        return [str(part) for part in given]  # a command as given: its node is the caller's
    if not os.path.realpath(given).endswith(".js"):
        return [given]
    node = os.environ.get("STITCHLAB_NODE") or shutil.which("node")
    if node is None:
        raise StitchlabError(f"{given} needs Node.js 20: none on PATH; set STITCHLAB_NODE to its path")
    return [node, given]


def _run(command):
    # stdout (the one JSON object) goes to a file, so that stderr alone is read as it comes.
    with tempfile.TemporaryFile("w+", encoding="utf-8") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.PIPE, encoding="utf-8",
                                errors="replace")
        lines = []
        try:
            for line in proc.stderr:
                lines.append(line)
                sys.stderr.write(line)
            code = proc.wait()
        except BaseException:  # an interrupted cell: the CLI ends its workers on SIGTERM
            proc.terminate()
            proc.wait()
            raise
        out.seek(0)
        text = out.read()
    stderr = "".join(lines)
    try:
        result = json.loads(text) if text.strip() else None
    except json.JSONDecodeError:
        result = None
    if code != 0 or result is None:
        tail = "".join(lines[-20:]).strip() or "(no output on stderr)"
        why = f"exited with status {code}" if code != 0 else "printed no JSON"
        raise StitchlabError(f"stitchlab compare {why}: {shlex.join(command)}\n{tail}",
                             command, stderr, result)
    return result
