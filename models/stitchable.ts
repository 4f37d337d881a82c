// What every zoo model shares: an ordered list of stages, some of which end at a named stitch
// point, then a head. forwardTo / forwardFrom / forwardIntermediates follow from that list, so a
// stitched model is back.forwardFrom(T(front.forwardTo(x, p)), p) for any pair of models.
import { runInOrder } from "../nn/layers.js";
import { Module } from "../nn/module.js";
import * as torch from "../torch/index.js";

type Tensor = torch.Tensor;

/**
 * A named place in a network, by the shape of its features (the reference's conv / token /
 * vector formats, models/model_utils.py get_stitch_transform). `channels` is what T maps.
 */
export type StitchPoint =
  /** [N, C, H, W] feature maps. */
  | { kind: "cnn"; name: string; channels: number; height: number; width: number }
  /** [N, tokens, dim] token sequences: channels is dim. */
  | { kind: "vit"; name: string; channels: number; tokens: number }
  /** [N, D] vectors (the head's input): channels is D. */
  | { kind: "vector"; name: string; channels: number };

export type PointKind = StitchPoint["kind"];

/** The shape of a point's features for a batch of n: what forwardTo(x, point) returns. */
export function pointShape(p: StitchPoint, n: number): number[] {
  if (p.kind === "cnn") return [n, p.channels, p.height, p.width];
  if (p.kind === "vit") return [n, p.tokens, p.channels];
  return [n, p.channels];
}

export interface Stage {
  name: string;
  /** Whether the stage's output is a stitch point. */
  point: StitchPoint | null;
  run(h: Tensor): Tensor;
}

/**
 * The name of every model's last point, the head's input (the penultimate features): the
 * "front only" end of the reference's curves, where stitching is a linear probe from A's
 * penultimate features into B's classifier. It is not among `stitchPoints` (so `points: all`
 * stays the paper's list) and is stitched at only when named.
 */
export const HEAD_POINT = "head";

export abstract class StitchableModel extends Module {
  /** The registry name and options this model was built from (recorded in checkpoints). */
  abstract readonly arch: string;
  abstract readonly config: Record<string, unknown>;
  /** Stages in order; built once by the subclass. */
  protected abstract readonly stageList: Stage[];
  /**
   * From the last stage's output to the head's input, one vector per image: the penultimate
   * features (what SimCLR's projector and a linear probe read).
   */
  protected abstract embedFrom(h: Tensor): Tensor;
  /**
   * The head: the classifier on those vectors (the module named fc in ResNet's state dict,
   * classifier in VGG's, head in the ViT's); a linear probe trains its parameters. Named as
   * timm names it, with forwardHead and forwardIntermediates.
   */
  abstract readonly head: Module;

  /** The width of the penultimate features (the classifier's input). */
  protected abstract readonly embedDim: number;

  #stages: Stage[] | null = null;
  /** The subclass's stages, then the head's input (HEAD_POINT); the classifier follows. */
  private get stages(): Stage[] {
    if (!this.#stages) {
      const point: StitchPoint = { name: HEAD_POINT, channels: this.embedDim, kind: "vector" };
      this.#stages = [...this.stageList, { name: HEAD_POINT, point, run: (h) => this.embedFrom(h) }];
    }
    return this.#stages;
  }

  /** From the penultimate features to the logits (timm's forward_head). */
  forwardHead(v: Tensor): Tensor {
    return this.head.forward(v);
  }

  /** The penultimate features of x, [N, D]. */
  embed(x: Tensor): Tensor {
    return this.runStages(x, 0, this.stages.length);
  }

  /** The stitch points, in order (the paper's list; HEAD_POINT, the head's input, is stitched at only when named). */
  get stitchPoints(): StitchPoint[] {
    return this.stageList.flatMap((s) => (s.point ? [s.point] : []));
  }

  /** A stitch point by name (HEAD_POINT included), or one clear error listing the names. */
  stitchPoint(name: string): StitchPoint {
    const p = this.stages[this.pointIndex(name)]?.point;
    if (!p) throw new Error(`${this.arch}: stage '${name}' is not a stitch point`);
    return p;
  }

  /** The stage index of a stitch point; a clear error lists the valid names. */
  protected pointIndex(point: string): number {
    const i = this.stages.findIndex((s) => s.point?.name === point);
    if (i < 0)
      throw new Error(
        `${this.arch} has no stitch point '${point}'; its points are: ${this.stitchPoints.map((p) => p.name).join(", ")} (and ${HEAD_POINT}, the head's input)`,
      );
    return i;
  }

  /**
   * Runs stages [from, to) on h (runInOrder); the output of each stage named in `keep` is put
   * there and not freed. h itself is left to the caller.
   */
  private runStages(h: Tensor, from: number, to: number, keep?: Map<string, Tensor>): Tensor {
    const steps = this.stages.slice(from, to).map((s) => (t: Tensor) => {
      const out = s.run(t);
      if (keep && s.point && keep.has(s.point.name)) keep.set(s.point.name, out);
      return out;
    });
    const out = runInOrder(h, steps, keep ? (t) => [...keep.values()].includes(t) : undefined);
    // What leaves the model leaves in the form callers read (leaving): the last output and the kept ones.
    const left = new Map<Tensor, Tensor>();
    const leave = (t: Tensor) => {
      const had = left.get(t);
      if (had) return had;
      const l = this.leaving(t);
      left.set(t, l);
      return l;
    };
    if (keep) for (const [k, t] of keep) keep.set(k, leave(t));
    const result = leave(out);
    for (const [t, l] of left) if (l !== t && t !== h) t.dispose();
    return result;
  }

  /**
   * A stage's output as it leaves the model (a point's features, the last stage's output). Stages
   * may hand each other a form only they read (models/onnx/blocked.ts: oneDNN's blocked layout);
   * here it becomes an ordinary tensor. The zoo's stages hand on ordinary tensors: the same one.
   */
  protected leaving(t: Tensor): Tensor {
    return t;
  }

  forward(x: Tensor): Tensor {
    return torch.tidy(() => this.forwardHead(this.runStages(x, 0, this.stages.length)));
  }

  /** A_{<=p}(x): the features at stitch point p. */
  forwardTo(x: Tensor, point: string): Tensor {
    return this.runStages(x, 0, this.pointIndex(point) + 1);
  }

  /** B_{>p}(h): the logits from features h at stitch point p. */
  forwardFrom(h: Tensor, point: string): Tensor {
    const i = this.pointIndex(point);
    return torch.tidy(() => this.forwardHead(this.runStages(h, i + 1, this.stages.length)));
  }

  /** Features at several stitch points and the logits, from one pass (timm's forward_intermediates). */
  forwardIntermediates(x: Tensor, points: string[]): { features: Record<string, Tensor>; logits: Tensor } {
    return this.collect(x, 0, points);
  }

  /**
   * From features h at stitch point `from`, the features at later points and the logits: what
   * FuLA compares along B's remaining layers. A point equal to `from` is given h itself.
   */
  forwardIntermediatesFrom(
    h: Tensor,
    from: string,
    points: string[],
  ): { features: Record<string, Tensor>; logits: Tensor } {
    const i = this.pointIndex(from);
    const later = points.filter((p) => p !== from);
    for (const p of later)
      if (this.pointIndex(p) <= i) throw new Error(`${this.arch}: point '${p}' does not come after '${from}'`);
    const out = this.collect(h, i + 1, later);
    if (points.includes(from)) out.features[from] = h;
    return out;
  }

  private collect(x: Tensor, from: number, points: string[]): { features: Record<string, Tensor>; logits: Tensor } {
    for (const p of points) this.pointIndex(p);
    const keep = new Map<string, Tensor>(points.map((p) => [p, x]));
    const last = this.runStages(x, from, this.stages.length, keep);
    const logits = torch.tidy(() => this.forwardHead(last));
    if (![...keep.values()].includes(last)) last.dispose();
    return { features: Object.fromEntries(keep), logits };
  }
}

/**
 * Images of shape [N, C, H, W] must have the side the model was built for (its config's
 * `imageSize`): a network trained on 224 px images and fed 32 px ones gives numbers, not
 * answers. Callers check before any work; `what` names the model in the error.
 */
export function checkInputSize(model: StitchableModel, shape: number[], what: string): void {
  const side = model.config.imageSize;
  const [h, w] = shape.slice(2);
  if (typeof side === "number" && (h !== side || w !== side))
    throw new Error(
      `${what} model (${model.arch}) takes ${side} x ${side} images, and the data are ${h} x ${w}: use data of that size (image folders: imageSize / --image-size ${side}), or give the model's imageSize if it was trained on ${h} px images`,
    );
}

/**
 * What a model is made of, counted from its recipe without building it (so that a model too
 * large for the machine is refused before a byte of it is allocated: train/memory.ts).
 * `parameters` and `buffers` are exact (tested against built models); `activations` is the
 * number of floats of every intermediate output one image's forward pass makes (the maps that
 * training keeps for the backward pass are most of them), an estimate.
 */
export interface ModelSize {
  parameters: number;
  buffers: number;
  activations: number;
}
