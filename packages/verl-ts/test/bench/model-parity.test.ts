/** `bench model`'s parity figures: the selected backend against a CPU reference in the same process. */
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import { backendParity } from "../../src/bench/model.js";
import { selectBackend } from "../../src/models/index.js";
import { tinyTestConfig } from "../models/tiny-config.js";

test("on wasm the parity figures compare with cpu, are ~0, and the selected backend is restored", async (t) => {
  await selectBackend({ backend: "wasm", log: null });
  const p = await backendParity(tinyTestConfig(259));
  t.is(p.reference, "cpu");
  t.is(tf.getBackend(), "wasm");
  t.true(p.maxAbsLogprobDiff < 1e-4, `log-probs ${p.maxAbsLogprobDiff}`);
  t.true(p.maxRelGradDiff < 1e-3, `gradients ${p.maxRelGradDiff}`);
  // Not trivially zero: the two backends really computed (float sums in different orders differ a little).
  t.true(p.maxAbsLogprobDiff > 0 || p.maxRelGradDiff > 0);
});
