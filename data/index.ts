// The data layer: dataset readers, shortcut markers, transforms, seeded loaders.
export * from "./cifar10.js";
export * from "./dataset.js";
export { DataError } from "./files.js";
export * from "./idx.js";
export * from "./imagefolder.js";
export * from "./loader.js";
export * from "./preview.js";
export * from "./registry.js";
export * from "./rng.js";
export * from "./shortcuts.js";
export { readTar, type TarEntry } from "./tar.js";
export * from "./transforms.js";
