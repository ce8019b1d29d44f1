// Public API of @torl-ts/verl. Each area keeps its own index; names must not collide across them.
export * from "./core.js";
export * from "./evaluation/index.js";
export * from "./models/index.js";
export * from "./reward/index.js";
export * from "./rollout/index.js";
export * from "./trainer/index.js";
export * from "./workers/index.js";
