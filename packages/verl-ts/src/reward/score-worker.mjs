// Worker-thread entry for MathScorePool. Plain JS because a worker's entry file is loaded before any
// TypeScript loader. From the sources (workerData.ext ".ts") it registers tsx first; the built
// package imports its .js files under plain node.
import { parentPort, workerData } from "node:worker_threads";

const ext = workerData?.ext === ".ts" ? ".ts" : ".js";
if (ext === ".ts") {
  const { register } = await import("tsx/esm/api");
  register();
}
const { computeMathScore } = await import(`./score${ext}`);
const { verifierErrors } = await import(`./equivalence${ext}`);

parentPort.on("message", ({ id, inputs, options }) => {
  try {
    const before = verifierErrors.count;
    const results = inputs.map((x) => computeMathScore(x.solution, x.groundTruth, options, x.execution));
    parentPort.postMessage({
      id,
      results,
      verifierErrors: verifierErrors.count - before,
      firstError: verifierErrors.first,
    });
  } catch (error) {
    parentPort.postMessage({ id, error: error instanceof Error ? error.message : String(error) });
  }
});
