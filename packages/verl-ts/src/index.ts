// Public API of @torl-ts/verl: every concept's index, each also reachable on its own subpath
// (`@torl-ts/verl/algorithms`, `/config`, ...). Names must not collide across them.
export * from "./algorithms/index.js";
export * from "./config/index.js";
export * from "./data/index.js";
export * from "./evaluation/index.js";
export * from "./models/index.js";
export * from "./protocol/index.js";
export * from "./reward/index.js";
export * from "./rollout/index.js";
export * from "./single-controller/index.js";
export * from "./trainer/index.js";
export * from "./workers/index.js";
