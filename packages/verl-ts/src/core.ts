// The framework core of @torl-ts/verl: DataProto, config, data, algorithms, single controller.

export * from "./algorithms/index.js";
export * from "./config/index.js";
export * from "./data/index.js";
export * from "./protocol/index.js";
export * from "./single-controller/index.js";
