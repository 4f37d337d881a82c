// Models named by hub (models/hub.ts, io/download.ts), for real over HTTP: a local server on the
// loopback interface (node:http, port 0, in a worker thread, since loading a model waits
// synchronously for its download process) serves a small file tree in the hubs' URL layouts:
// Hugging Face's /{org}/{name}/resolve/{revision}/{file}, with its headers (ETag, X-Linked-Etag,
// X-Linked-Size, X-Repo-Commit, the redirect of an lfs file to its storage), and torchvision's
// /models/{arch}-{sha256 prefix}.pth. The model files are tiny real models made here. Only the base
// URLs differ from a user's run (STITCHLAB_HF_ENDPOINT, STITCHLAB_TORCHVISION_URL). Covered: a good
// download, then its reuse with the server gone; a model not in the cache with no server (the
// error says what to download and where to put it); a hash mismatch; a missing file (404); a
// connection that drops midway. Each failure is one error naming the URL, and leaves no file.
// Also: the hub's config mapped to the zoo (or refused), the command line (layers, import), and an
// experiment file's checkpoint: by hub through the planner.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { after, before, test } from "node:test";
import { Worker } from "node:worker_threads";
import { planExperiment } from "../experiments/plan.js";
import { parseExperiment } from "../experiments/spec.js";
import { DownloadError, download, gitBlobSha1 } from "../io/download.js";
import { saveSafetensors } from "../io/safetensors.js";
import { torchSave } from "../io/torchsave.js";
import { loadCheckpoint, modelSourceSchema } from "../models/checkpoint.js";
import { hfCacheFolder, hubCacheDir, resolveModelSource } from "../models/hub.js";
import { createModel } from "../models/registry.js";
import type { StitchableModel } from "../models/stitchable.js";
import * as torch from "../torch/index.js";
import { runCli } from "./helpers/cli.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

const tmp = mkdtempSync(join(tmpdir(), "stitchlab-hub-"));
const served = join(tmp, "served");
mkdirSync(served);

/**
 * A route of the server: a file with headers, a redirect, a status, or half a file and then a
 * dropped socket; or a hostile one: a body without Content-Length that never ends (`endless`), or
 * the file with its true Content-Length at one byte every `drip` ms.
 */
interface Route {
  status?: number;
  file?: string;
  headers?: Record<string, string>;
  location?: string;
  drop?: boolean;
  endless?: boolean;
  drip?: number;
}

// The server: plain JavaScript in a worker thread, so it answers while the test thread waits on a download.
const SERVER = `
const { createServer } = require("node:http");
const { readFileSync } = require("node:fs");
const { parentPort } = require("node:worker_threads");
let routes = {};
const log = [];
const server = createServer((req, res) => {
  log.push(req.method + " " + req.url);
  const r = routes[req.url];
  if (!r) { res.writeHead(404, { "X-Error-Code": "EntryNotFound", "X-Error-Message": "Entry not found" }); res.end(); return; }
  if (r.location) { res.writeHead(r.status || 302, { Location: r.location, ...r.headers }); res.end(); return; }
  if (r.endless) {
    res.writeHead(200, r.headers || {});
    const chunk = Buffer.alloc(1 << 16, 7);
    let open = true;
    res.on("close", () => { open = false; });
    const more = () => { if (open) res.write(chunk, more); };
    more();
    return;
  }
  if (r.drip) {
    const body = readFileSync(r.file);
    res.writeHead(200, { "Content-Length": String(body.length), ...r.headers });
    let i = 0;
    const t = setInterval(() => { if (i < body.length) res.write(body.subarray(i, ++i)); }, r.drip);
    res.on("close", () => clearInterval(t));
    return;
  }
  const body = r.file ? readFileSync(r.file) : Buffer.alloc(0);
  res.writeHead(r.status || 200, { "Content-Length": String(body.length), ...r.headers });
  if (r.drop) { res.write(body.subarray(0, body.length >> 1), () => setTimeout(() => res.socket.destroy(), 20)); return; }
  res.end(body);
});
server.listen(0, "127.0.0.1", () => parentPort.postMessage({ port: server.address().port }));
parentPort.on("message", (m) => {
  if (m.routes) { routes = m.routes; parentPort.postMessage({ ok: true }); }
  if (m.log) parentPort.postMessage({ log: log.splice(0) });
  if (m.close) server.close(() => parentPort.postMessage({ closed: true }));
});
`;

let worker: Worker;
let base = "";
const ask = <T>(message: unknown): Promise<T> =>
  new Promise((resolve) => {
    worker.once("message", resolve);
    worker.postMessage(message);
  });
const serve = (routes: Record<string, Route>) => ask({ routes });
const requests = async () => (await ask<{ log: string[] }>({ log: true })).log;

const sha256 = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");
const COMMIT = "0123456789abcdef0123456789abcdef01234567";

/**
 * A Hugging Face repository as the hub serves it: config.json in git (ETag: its git blob SHA-1),
 * the weights in lfs (the resolve URL redirects to storage, with X-Linked-Etag: the SHA-256, and
 * X-Linked-Size), every hub answer with X-Repo-Commit. `weights` at the commit config.json came from.
 */
function hfRepo(repo: string, files: { config: string; weights?: [string, string] }, revision = "main") {
  const routes: Record<string, Route> = {};
  const config = readFileSync(files.config);
  routes[`/${repo}/resolve/${revision}/config.json`] = {
    file: files.config,
    headers: { ETag: `"${gitBlobSha1(config)}"`, "X-Repo-Commit": COMMIT },
  };
  if (files.weights) {
    const [name, path] = files.weights;
    const digest = sha256(path);
    routes[`/${repo}/resolve/${COMMIT}/${name}`] = {
      location: `${base}/storage/${digest}`,
      headers: {
        "X-Linked-Etag": `"${digest}"`,
        "X-Linked-Size": String(readFileSync(path).length),
        "X-Repo-Commit": COMMIT,
      },
    };
    // The storage's own ETag is not the file's hash (an S3 ETag): it must be ignored.
    routes[`/storage/${digest}`] = { file: path, headers: { ETag: '"d41d8cd98f00b204e9800998ecf8427e"' } };
  }
  return routes;
}

const CIFAR = { mean: [0.4914, 0.4822, 0.4465], std: [0.247, 0.2435, 0.2616] };
let tiny: StitchableModel;
let tinyTv: StitchableModel;
let tvFile = "";

function writeJson(path: string, value: unknown) {
  writeFileSync(path, JSON.stringify(value));
  return path;
}

before(async () => {
  worker = new Worker(SERVER, { eval: true });
  const { port } = await new Promise<{ port: number }>((resolve) => worker.once("message", resolve));
  base = `http://127.0.0.1:${port}`;
  process.env.STITCHLAB_HF_ENDPOINT = base;
  process.env.STITCHLAB_TORCHVISION_URL = `${base}/models`;
  process.env.STITCHLAB_CACHE = join(tmp, "cache");
  delete process.env.STITCHLAB_OFFLINE;
  // A narrow CIFAR ResNet-18 (10 classes) as timm would publish it: model.safetensors without
  // stitchlab's metadata, config.json in timm's current form (pretrained_cfg).
  tiny = createModel("resnet18", { width: 0.125, numClasses: 10 });
  saveSafetensors(join(served, "model.safetensors"), tiny.stateDict());
  writeJson(join(served, "config.json"), {
    architecture: "resnet18",
    num_classes: 10,
    num_features: 64,
    pretrained_cfg: { tag: "tiny", input_size: [3, 32, 32], mean: CIFAR.mean, std: CIFAR.std, num_classes: 10 },
  });
  // The same weights as a torch.save file with a config.json in timm's old form (all at the top).
  torchSave(join(served, "pytorch_model.bin"), tiny.stateDict());
  writeJson(join(served, "config-old.json"), {
    architecture: "resnet18",
    num_classes: 10,
    input_size: [3, 32, 32],
    mean: [0.485, 0.456, 0.406],
    std: [0.229, 0.224, 0.225],
  });
  writeJson(join(served, "config-convnext.json"), {
    architecture: "convnext_tiny",
    num_classes: 1000,
    pretrained_cfg: { input_size: [3, 224, 224], mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225] },
  });
  // torchvision's layout: an ImageNet-stem ResNet-18 of 1000 classes, named by its SHA-256's start.
  tinyTv = createModel("resnet18", { width: 0.125, numClasses: 1000, stem: "imagenet", imageSize: 224 });
  const tv = join(served, "tv.pth");
  torchSave(tv, tinyTv.stateDict());
  tvFile = `resnet18-${sha256(tv).slice(0, 8)}.pth`;
  writeFileSync(join(served, tvFile), readFileSync(tv));
});

after(async () => {
  await ask({ close: true }).catch(() => {});
  await worker.terminate();
  tiny?.dispose();
  tinyTv?.dispose();
  rmSync(tmp, { recursive: true, force: true });
});

/** Every file under the hub cache, relative to it (temporary .part files included). */
function cacheFiles(): string[] {
  const root = hubCacheDir();
  if (!existsSync(root)) return [];
  return (readdirSync(root, { recursive: true, withFileTypes: true }) as import("node:fs").Dirent[])
    .filter((d) => d.isFile())
    .map((d) => relative(root, join(d.parentPath ?? (d as unknown as { path: string }).path, d.name)))
    .sort();
}

function fails(fn: () => unknown): string {
  try {
    const r = fn() as { model?: StitchableModel } | undefined;
    r?.model?.dispose();
  } catch (e) {
    return (e as Error).message;
  }
  assert.fail("expected an error");
}

/** The largest difference of two models' logits on the same images. */
function sameLogits(a: StitchableModel, b: StitchableModel): number {
  return torch.tidy(() => {
    a.eval();
    b.eval();
    torch.manualSeed(7);
    const input = torch.randn([2, 3, 32, 32]);
    return torch.noGrad(() => a.forward(input).sub(b.forward(input)).abs().max().item()) as number;
  });
}

test("hf-hub: a good download (verified, with the hub's facts), then its reuse without the network", async () => {
  await serve({
    ...hfRepo("test-org/tiny-resnet.a1", {
      config: join(served, "config.json"),
      weights: ["model.safetensors", join(served, "model.safetensors")],
    }),
  });
  const { model, meta, record, file } = loadCheckpoint("hf-hub:test-org/tiny-resnet.a1");
  try {
    assert.equal(meta.arch, "resnet18");
    assert.deepEqual(meta.normalization, CIFAR);
    assert.equal(record.numClasses, 10);
    assert.equal(record.imageSize, 32);
    assert.equal(sameLogits(model, tiny), 0);
    const dir = hfCacheFolder("test-org/tiny-resnet.a1", "main");
    assert.equal(file, join(dir, "model.safetensors"));
  } finally {
    model.dispose();
  }
  const log = await requests();
  // config.json at the revision; the weights at the commit it came from, through the redirect to storage.
  assert.deepEqual(log, [
    "GET /test-org/tiny-resnet.a1/resolve/main/config.json",
    `GET /test-org/tiny-resnet.a1/resolve/${COMMIT}/model.safetensors`,
    `GET /storage/${sha256(join(served, "model.safetensors"))}`,
  ]);
  assert.deepEqual(cacheFiles(), [
    "huggingface/test-org/tiny-resnet.a1/main/config.json",
    "huggingface/test-org/tiny-resnet.a1/main/model.safetensors",
    "huggingface/test-org/tiny-resnet.a1/main/source.json",
  ]);
  const fetched = JSON.parse(
    readFileSync(join(hfCacheFolder("test-org/tiny-resnet.a1", "main"), "source.json"), "utf8"),
  );
  assert.equal(fetched.commit, COMMIT);
  assert.deepEqual(fetched.files["config.json"].verified, ["git blob SHA-1 = the hub's ETag"]);
  assert.deepEqual(fetched.files["model.safetensors"].verified, ["SHA-256 = the hub's ETag", "safetensors structure"]);

  // Used again: from the cache, no request; then with no server at all.
  const again = loadCheckpoint({ checkpoint: "hf-hub:test-org/tiny-resnet.a1", normalization: "cifar10" });
  assert.deepEqual(again.meta.normalization, CIFAR, "the source's own fields override the hub's");
  again.model.dispose();
  assert.deepEqual(await requests(), []);
  process.env.STITCHLAB_HF_ENDPOINT = "http://127.0.0.1:9"; // nothing listens on the discard port
  try {
    const offline = loadCheckpoint("hf-hub:test-org/tiny-resnet.a1");
    assert.equal(sameLogits(offline.model, tiny), 0);
    offline.model.dispose();
  } finally {
    process.env.STITCHLAB_HF_ENDPOINT = base;
  }
});

test("the command line downloads with a progress line on stderr (layers --checkpoint hf-hub:...)", async () => {
  await serve(
    hfRepo("test-org/tiny-bin", {
      config: join(served, "config-old.json"),
      weights: ["pytorch_model.bin", join(served, "pytorch_model.bin")],
    }),
  );
  const r = runCli(["layers", "--checkpoint", "hf-hub:test-org/tiny-bin", "--json"], { env: process.env });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(JSON.parse(r.stdout)[0].name, "stem");
  assert.match(r.stderr, /downloading hf-hub:test-org\/tiny-bin config\.json/);
  // No model.safetensors on the hub: timm's fallback, pytorch_model.bin.
  assert.match(r.stderr, /downloading hf-hub:test-org\/tiny-bin pytorch_model\.bin \([\d.]+ kB\)/);
  assert.match(
    r.stderr,
    /downloaded hf-hub:test-org\/tiny-bin pytorch_model\.bin: [\d.]+ kB in [\d.]+ s, verified \(SHA-256 = the hub.s ETag\)/,
  );
  assert.ok(existsSync(join(hfCacheFolder("test-org/tiny-bin", "main"), "pytorch_model.bin")));
  // timm's old config form: ImageNet's statistics, by name.
  assert.equal(resolveModelSource("hf-hub:test-org/tiny-bin").normalization, "imagenet");
  const { model, meta } = loadCheckpoint("hf-hub:test-org/tiny-bin");
  assert.deepEqual(meta.normalization, { mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225] });
  assert.equal(sameLogits(model, tiny), 0);
  model.dispose();
});

test("not in the cache and no server: the error says what to download and where to put it", () => {
  const before = cacheFiles();
  process.env.STITCHLAB_HF_ENDPOINT = "http://127.0.0.1:9";
  process.env.STITCHLAB_TORCHVISION_URL = "http://127.0.0.1:9/models";
  try {
    const dir = hfCacheFolder("test-org/elsewhere", "v1.0");
    const hf = fails(() => loadCheckpoint("hf-hub:test-org/elsewhere@v1.0"));
    assert.match(hf, /^hf-hub:test-org\/elsewhere@v1\.0 is not in the cache and cannot be downloaded: cannot reach/);
    assert.ok(
      hf.includes(`http://127.0.0.1:9/test-org/elsewhere/resolve/v1.0/config.json\n    -> ${join(dir, "config.json")}`),
      hf,
    );
    assert.ok(
      hf.includes(
        `http://127.0.0.1:9/test-org/elsewhere/resolve/v1.0/model.safetensors\n    -> ${join(dir, "model.safetensors")}`,
      ),
      hf,
    );
    const tv = fails(() => loadCheckpoint("torchvision:resnet50.IMAGENET1K_V1"));
    assert.ok(
      tv.includes(
        `http://127.0.0.1:9/models/resnet50-0676ba61.pth\n    -> ${join(hubCacheDir(), "torchvision", "resnet50-0676ba61.pth")}`,
      ),
      tv,
    );
    // STITCHLAB_OFFLINE: the same answer without trying.
    process.env.STITCHLAB_OFFLINE = "1";
    assert.match(
      fails(() => loadCheckpoint("torchvision:vgg16_bn")),
      /not in the cache and cannot be downloaded: STITCHLAB_OFFLINE is set/,
    );
  } finally {
    delete process.env.STITCHLAB_OFFLINE;
    process.env.STITCHLAB_HF_ENDPOINT = base;
    process.env.STITCHLAB_TORCHVISION_URL = `${base}/models`;
  }
  assert.deepEqual(cacheFiles(), before);
});

test("a hash mismatch is one error naming the URL, and nothing is kept", async () => {
  const routes = hfRepo("test-org/tampered", {
    config: join(served, "config.json"),
    weights: ["model.safetensors", join(served, "model.safetensors")],
  });
  // The hub promises other bytes than the storage serves.
  const weights = `/test-org/tampered/resolve/${COMMIT}/model.safetensors`;
  const promised = createHash("sha256").update("other bytes").digest("hex");
  routes[weights].headers = { ...routes[weights].headers, "X-Linked-Etag": `"${promised}"` };
  await serve(routes);
  const e = fails(() => loadCheckpoint("hf-hub:test-org/tampered"));
  assert.match(
    e,
    new RegExp(
      `^hf-hub:test-org/tampered: ${base}${weights}: hash mismatch: SHA-256 [0-9a-f]{64}, but the hub's ETag \\(the file's SHA-256\\) is ${promised}; nothing was kept$`,
    ),
  );
  const dir = relative(hubCacheDir(), hfCacheFolder("test-org/tampered", "main"));
  assert.deepEqual(
    cacheFiles().filter((f) => f.startsWith(dir)),
    [`${dir}/config.json`, `${dir}/source.json`],
    "the verified config.json and its record stay; no weights, no partial file",
  );

  // torchvision: the file name's hash (torchvision:resnet18 is resnet18-f37072fd.pth) against other bytes.
  await serve({ "/models/resnet18-f37072fd.pth": { file: join(served, tvFile) } });
  const tv = fails(() => loadCheckpoint("torchvision:resnet18"));
  assert.match(
    tv,
    new RegExp(
      `^torchvision:resnet18: ${base}/models/resnet18-f37072fd\\.pth: hash mismatch: SHA-256 [0-9a-f]{64} does not start with f37072fd`,
    ),
  );
  assert.ok(!cacheFiles().some((f) => f.startsWith("torchvision/")), cacheFiles().join(", "));
});

test("torchvision: a weights file by its published name downloads, checked against the hash in its name", async () => {
  await requests();
  await serve({ [`/models/${tvFile}`]: { file: join(served, tvFile) } });
  const { model, meta, record } = loadCheckpoint(`torchvision:${tvFile}`);
  try {
    assert.equal(meta.arch, "resnet18");
    assert.deepEqual(meta.normalization, { mean: [0.485, 0.456, 0.406], std: [0.229, 0.224, 0.225] });
    assert.equal(record.numClasses, 1000);
    assert.equal(record.imageSize, 224);
    assert.equal(sameLogits(model, tinyTv), 0);
  } finally {
    model.dispose();
  }
  assert.deepEqual(await requests(), [`GET /models/${tvFile}`]);
  assert.ok(cacheFiles().includes(`torchvision/${tvFile}`));
});

test("a missing file (404) is one error naming the URL, and nothing is kept", async () => {
  await serve(hfRepo("test-org/no-weights", { config: join(served, "config.json") }));
  const before = cacheFiles().filter((f) => !f.includes("no-weights"));
  const e = fails(() => loadCheckpoint("hf-hub:test-org/no-weights"));
  assert.equal(
    e,
    `hf-hub:test-org/no-weights: the hub has no weights for it: ${base}/test-org/no-weights/resolve/${COMMIT}/model.safetensors (404) and ${base}/test-org/no-weights/resolve/${COMMIT}/pytorch_model.bin (404); timm's models have one of model.safetensors or pytorch_model.bin`,
  );
  const gone = fails(() => loadCheckpoint("hf-hub:test-org/no-such-model"));
  assert.equal(
    gone,
    `hf-hub:test-org/no-such-model: ${base}/test-org/no-such-model/resolve/main/config.json: HTTP 404 Not Found: Entry not found`,
  );
  const tv = fails(() => loadCheckpoint("torchvision:resnet50"));
  assert.equal(tv, `torchvision:resnet50: ${base}/models/resnet50-11ad3fa6.pth: HTTP 404 Not Found: Entry not found`);
  const after = cacheFiles();
  assert.ok(
    !after.some((f) => f.includes("no-such-model") || f.endsWith(".part") || f.includes("resnet50")),
    after.join(", "),
  );
  assert.ok(!after.some((f) => f.includes("no-weights") && !/config\.json|source\.json/.test(f)), after.join(", "));
  assert.deepEqual(
    after.filter((f) => !f.includes("no-weights")),
    before,
  );
});

test("a connection that drops midway is one error naming the URL, and nothing is kept", async () => {
  const routes = hfRepo("test-org/dropped", {
    config: join(served, "config.json"),
    weights: ["model.safetensors", join(served, "model.safetensors")],
  });
  const digest = sha256(join(served, "model.safetensors"));
  routes[`/storage/${digest}`].drop = true;
  await serve(routes);
  const size = readFileSync(join(served, "model.safetensors")).length;
  const e = fails(() => loadCheckpoint("hf-hub:test-org/dropped"));
  assert.match(
    e,
    new RegExp(
      `^hf-hub:test-org/dropped: ${base}/test-org/dropped/resolve/${COMMIT}/model\\.safetensors: the connection (dropped|ended) after \\d+ of ${size} bytes.*; nothing was kept$`,
    ),
  );
  const dir = relative(hubCacheDir(), hfCacheFolder("test-org/dropped", "main"));
  assert.deepEqual(
    cacheFiles().filter((f) => f.startsWith(dir)),
    [`${dir}/config.json`, `${dir}/source.json`],
  );
  // torchvision's the same way; then the same name downloads whole once the server behaves.
  await serve({ [`/models/${tvFile}`]: { file: join(served, tvFile), drop: true } });
  rmSync(join(hubCacheDir(), "torchvision"), { recursive: true, force: true });
  assert.match(
    fails(() => loadCheckpoint(`torchvision:${tvFile}`)),
    /the connection (dropped|ended) after \d+ of \d+ bytes/,
  );
  assert.ok(!cacheFiles().some((f) => f.startsWith("torchvision/")), cacheFiles().join(", "));
  await serve({ ...routes, [`/storage/${digest}`]: { file: join(served, "model.safetensors") } });
  const whole = loadCheckpoint("hf-hub:test-org/dropped");
  assert.equal(sameLogits(whole.model, tiny), 0);
  whole.model.dispose();
});

test("what the hub says is mapped to the zoo, or refused naming what the zoo has", async () => {
  await serve(hfRepo("test-org/convnext", { config: join(served, "config-convnext.json") }));
  const e = fails(() => loadCheckpoint("hf-hub:test-org/convnext"));
  assert.match(
    e,
    /^hf-hub:test-org\/convnext is timm's convnext_tiny, which the zoo lacks: from timm it takes resnet18, resnet50, vit_tiny_patch16_224, vit_small_patch16_224, vit_base_patch16_224; torchvision's weights for resnet18, resnet50, vgg16_bn/,
  );
  // An architecture the hub contradicts.
  assert.match(
    fails(() => loadCheckpoint({ checkpoint: "hf-hub:test-org/tiny-resnet.a1", arch: "resnet50" })),
    /hf-hub:test-org\/tiny-resnet\.a1 is timm's resnet18, not resnet50: leave arch out/,
  );
  // Names that are not names, refused by the schema before anything is fetched.
  const issue = (checkpoint: string) => modelSourceSchema.safeParse({ checkpoint }).error?.issues[0]?.message ?? "";
  assert.match(issue("hf-hub:resnet18"), /not a Hugging Face model name: expected hf-hub:ORG\/NAME/);
  assert.match(
    issue("torchvision:vit_b_16"),
    /no torchvision architecture vit_b_16: torchvision's ViTs keep other parameter names/,
  );
  assert.match(
    issue("torchvision:resnet18.IMAGENET1K_V2"),
    /torchvision's resnet18 has no weights IMAGENET1K_V2; it has IMAGENET1K_V1/,
  );
  assert.equal(issue("hf-hub:timm/resnet18.a1_in1k@main"), "");
  assert.equal(issue("torchvision:resnet50-11ad3fa6.pth"), "");
});

test("an experiment file's checkpoint: by hub is planned from its file in the cache, with the hub's facts in the key", () => {
  const exp = parseExperiment(
    "name: hub\ndataset: { name: fashion-mnist }\nmodels:\n  a: { checkpoint: 'hf-hub:test-org/tiny-resnet.a1' }\npairs:\n  - { front: a, back: a, relation: identical }\npoints: [layer2.1]\n",
    "exp.yaml",
  );
  const plan = planExperiment(exp, join(tmp, "exp.yaml"));
  const ref = plan.models.a as { checkpoint: string; arch: string; sha256: string; normalization: unknown };
  assert.equal(ref.checkpoint, join(hfCacheFolder("test-org/tiny-resnet.a1", "main"), "model.safetensors"));
  assert.equal(ref.arch, "resnet18");
  assert.deepEqual(ref.normalization, CIFAR);
  assert.equal(ref.sha256, sha256(join(served, "model.safetensors")));
});

test("stitchlab import takes a model by hub without --arch, and records the name and the file's SHA-256", {
  skip: skipUnlessFashionMnist(),
}, () => {
  const out = join(tmp, "imported");
  // Cached by the first test: no server needed.
  const r = runCli(
    ["import", "hf-hub:test-org/tiny-resnet.a1", "--dataset", "fashion-mnist", "--check-images", "16", "--out", out],
    { env: { ...process.env, STITCHLAB_HF_ENDPOINT: "http://127.0.0.1:9" } },
  );
  assert.equal(r.status, 0, r.stderr);
  const side = JSON.parse(readFileSync(join(out, "model.json"), "utf8"));
  assert.equal(side.arch, "resnet18");
  assert.deepEqual(side.normalization, CIFAR);
  assert.equal(side.importedFrom.file, "hf-hub:test-org/tiny-resnet.a1");
  assert.equal(side.importedFrom.sha256, sha256(join(served, "model.safetensors")));
  // A file still needs --arch.
  const noArch = runCli([
    "import",
    join(served, "model.safetensors"),
    "--dataset",
    "fashion-mnist",
    "--out",
    join(tmp, "x"),
  ]);
  assert.notEqual(noArch.status, 0);
  // Asked for with what else the file does not say, all at once (cli/source.ts).
  assert.match(noArch.stderr, /give what the file does not say:\n {2}--arch resnet18 /);
});

/** Runs fn with the environment's variables set as given, and as they were after. */
async function withEnv<T>(vars: Record<string, string>, fn: () => Promise<T>): Promise<T> {
  const was = Object.fromEntries(Object.keys(vars).map((k) => [k, process.env[k]]));
  Object.assign(process.env, vars);
  try {
    return await fn();
  } finally {
    for (const [k, v] of Object.entries(was))
      if (v === undefined) delete process.env[k];
      else process.env[k] = v;
  }
}

/** The files in dir (temporary .part files included), or none. */
const filesIn = (dir: string) => (existsSync(dir) ? readdirSync(dir) : []);

test("a body that never ends, or one trickled a byte at a time, each ends in one error naming the URL, and nothing is kept", {
  timeout: 10_000,
}, async () => {
  // Issue 36: both ran until killed (the trickle keeps the socket's idle timeout from firing).
  const dest = join(tmp, "bounded", "model.safetensors");
  const size = readFileSync(join(served, "model.safetensors")).length;
  await serve({
    "/endless": { endless: true },
    "/models/resnet18-0badf00d.pth": { endless: true },
    "/trickle": { file: join(served, "model.safetensors"), drip: 50 },
    // The hub says the size (X-Linked-Size), the storage sends no Content-Length and never ends.
    "/linked": { location: `${base}/endless`, headers: { "X-Linked-Size": String(size), "X-Linked-Etag": '"x"' } },
  });
  // Each message names the bound that fired (the cap, the size given, the minimum rate), which is
  // what a bound on the time taken meant to show; how long it took is the machine's load.
  const refused = async (job: Parameters<typeof download>[0], why: RegExp) => {
    await assert.rejects(download(job), (e: Error) => {
      assert.ok(e instanceof DownloadError, e.stack);
      assert.match(e.message, new RegExp(`^${job.url}: `));
      assert.match(e.message, why);
      return true;
    });
    assert.deepEqual(filesIn(join(tmp, "bounded")), [], "no partial file");
  };
  // No size given: the cap (STITCHLAB_DOWNLOAD_MAX_MB) stops it.
  await withEnv({ STITCHLAB_DOWNLOAD_MAX_MB: "2" }, () =>
    refused(
      { url: `${base}/endless`, dest },
      /: more bytes than the cap of 2\.0 MB \(STITCHLAB_DOWNLOAD_MAX_MB\) for a file whose size the server does not give: stopped; nothing was kept; set STITCHLAB_DOWNLOAD_MAX_MB \(megabytes\) above 2 to take a larger file$/,
    ),
  );
  // A model named by hub is a model's file: its cap is the model's (io/download.ts
  // MODEL_FILE_MAX_MB, here set lower by the setting), and the error names the model.
  await withEnv({ STITCHLAB_DOWNLOAD_MAX_MB: "1" }, async () => {
    assert.equal(
      fails(() => loadCheckpoint("torchvision:resnet18-0badf00d.pth")),
      `torchvision:resnet18-0badf00d.pth: ${base}/models/resnet18-0badf00d.pth: more bytes than the cap of 1.0 MB (STITCHLAB_DOWNLOAD_MAX_MB) for a model's file whose size the server does not give: stopped; nothing was kept; set STITCHLAB_DOWNLOAD_MAX_MB (megabytes) above 1 to take a larger file`,
    );
  });
  assert.ok(!cacheFiles().some((f) => f.startsWith("torchvision/resnet18-0badf00d")), cacheFiles().join(", "));
  // The hub's size is the cap where it gives one.
  await refused(
    { url: `${base}/linked`, dest, hf: true },
    new RegExp(
      `: more bytes than the ${(size / 1e3).toFixed(1)} kB its X-Linked-Size gives: stopped; nothing was kept$`,
    ),
  );
  // The right Content-Length, 20 bytes a second: under the minimum rate over a window.
  await withEnv({ STITCHLAB_DOWNLOAD_MIN_RATE: "1", STITCHLAB_DOWNLOAD_RATE_WINDOW: "0.5" }, () =>
    refused(
      { url: `${base}/trickle`, dest },
      new RegExp(
        `: \\d+ B in the last 0\\.5 s, slower than the minimum 1\\.0 kB/s \\(STITCHLAB_DOWNLOAD_MIN_RATE, over STITCHLAB_DOWNLOAD_RATE_WINDOW\\): stopped after \\d+ of ${size} bytes; nothing was kept$`,
      ),
    ),
  );
  // A size promised above the cap is refused before any byte is read; a setting that is no number is named.
  await withEnv({ STITCHLAB_DOWNLOAD_MAX_MB: "0.001" }, () =>
    refused(
      { url: `${base}/trickle`, dest },
      /: the server says [\d.]+ kB, more than the cap of 1\.0 kB \(STITCHLAB_DOWNLOAD_MAX_MB\)/,
    ),
  );
  await withEnv({ STITCHLAB_DOWNLOAD_MIN_RATE: "fast" }, () =>
    refused({ url: `${base}/trickle`, dest }, /STITCHLAB_DOWNLOAD_MIN_RATE is 'fast': expected a number of kB\/s >= 0/),
  );
});

test("a hub config.json is checked: a class count the weights' head does not have, or a field of the wrong kind, is refused naming the file and the field", async () => {
  const absurd = writeJson(join(served, "config-absurd.json"), {
    architecture: "resnet18",
    num_classes: 1e12,
    pretrained_cfg: { input_size: [3, 32, 32], mean: CIFAR.mean, std: CIFAR.std },
  });
  const words = writeJson(join(served, "config-words.json"), {
    architecture: "resnet18",
    pretrained_cfg: { input_size: [3, 32, 32], mean: ["a", "b", "c"], std: CIFAR.std, num_classes: 10 },
  });
  const weights: [string, string] = ["model.safetensors", join(served, "model.safetensors")];
  await serve({
    ...hfRepo("test-org/absurd", { config: absurd, weights }),
    ...hfRepo("test-org/words", { config: words, weights }),
  });
  // Issue 36: the config's count overrode the weights' and reached libtorch ("you tried to allocate 128000000000000 bytes").
  const config = join(hfCacheFolder("test-org/absurd", "main"), "config.json");
  const weightsFile = join(hfCacheFolder("test-org/absurd", "main"), "model.safetensors");
  assert.equal(
    fails(() => loadCheckpoint("hf-hub:test-org/absurd")),
    `hf-hub:test-org/absurd: ${config}: num_classes is 1000000000000, but the weights' head (fc.weight [10, 64]) has 10 classes (${weightsFile}): the config does not belong to these weights; nothing was built`,
  );
  // ... and before an experiment is planned on it.
  assert.throws(
    () => resolveModelSource("hf-hub:test-org/absurd"),
    /num_classes is 1000000000000, but the weights' head/,
  );
  // Issue 36: a raw `tensor(): expected numbers`, naming neither the field nor the file.
  assert.equal(
    fails(() => loadCheckpoint("hf-hub:test-org/words")),
    `hf-hub:test-org/words: ${join(hfCacheFolder("test-org/words", "main"), "config.json")}: pretrained_cfg.mean[0]: Invalid input: expected number, received string; the hub's config.json is not timm's (or is damaged)`,
  );
});
