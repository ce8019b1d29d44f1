// Public API of @torl-ts/actors.
export * from "./collective/index.js";
export * from "./pools.js";
