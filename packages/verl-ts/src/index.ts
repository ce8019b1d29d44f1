// Public API of @torl-ts/verl. Each area keeps its own index; names must not collide across them.
export * from "./core.js";
export * from "./models/index.js";
export * from "./reward/index.js";
