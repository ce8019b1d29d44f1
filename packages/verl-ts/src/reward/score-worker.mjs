// Worker-thread entry for MathScorePool. Plain JS because a worker's entry file is loaded before any
// TypeScript loader; it registers tsx, then imports the scorer sources.
import { parentPort } from "node:worker_threads";
import { register } from "tsx/esm/api";

register();
const { computeMathScore } = await import("./score.ts");
const { verifierErrors } = await import("./equivalence.ts");

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
