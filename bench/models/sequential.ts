// Layers applied in sequence, each in its own tidy scope. A scope around the whole forward
// would keep every intermediate alive until it ends; Python frees each one as soon as its
// last reference goes. Scoping per layer frees them at the same points: what backward needs
// stays alive through the autograd graph, the rest goes now. The smaller peak matters on the
// CPU: freed memory is reused while still mapped instead of being faulted in afresh.
import * as torch from "../../torch/index.js";

type Tensor = torch.Tensor;

/** Applies layer after layer to x; takes ownership of x, disposing it once the first layer is done. */
export function sequential<L>(x: Tensor, layers: L[], apply: (h: Tensor, layer: L) => Tensor): Tensor {
  let h = x;
  for (const layer of layers) {
    const next = torch.tidy(() => apply(h, layer));
    h.dispose();
    h = next;
  }
  return h;
}
