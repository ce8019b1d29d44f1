import { init, shutdown } from "@torl-ts/actors";
import { SandboxActorPool } from "@torl-ts/sandbox";
import test from "ava";
import { buildByteBpeTokenizer, Qwen2Model, selectBackend } from "../../src/models/index.js";
import { PythonCodeInterpreter, tirRollout } from "../../src/rollout/index.js";
import { tinyTestConfig } from "../models/tiny-config.js";
import { scriptedProcessor } from "./helpers.js";

const tok = buildByteBpeTokenizer();
let pool: SandboxActorPool;

test.before(async () => {
  await selectBackend({ backend: "wasm", log: null });
  await init({ numCpus: 4, resources: { sandbox: 2 } });
  pool = await SandboxActorPool.create({ actors: 2, workersPerActor: 1, resources: { sandbox: 1 } });
});

test.after.always(async () => {
  await pool?.close();
  await shutdown();
});

test("the code interpreter backed by the sandbox actor pool: each row's code runs on an actor and its output comes back", async (t) => {
  const cfg = tinyTestConfig(tok.vocabSize);
  const model = Qwen2Model.random(cfg, { seed: 5, std: 0.6 });
  const prompts = [0, 1, 2, 3, 4, 5].map((i) => tok.encode(`Q${i}:`));
  const scripts = prompts.map((_, i) => [
    `\`\`\`python\nimport sympy\nprint(sympy.factorial(${i + 3}))\n\`\`\`\n\`\`\`output`,
    `\\boxed{}`,
  ]);
  const r = await tirRollout(model, tok, prompts, {
    tool: new PythonCodeInterpreter(pool),
    maxResponseLength: 120,
    seed: 9,
    logitsProcessor: (i, ids, logits) => scriptedProcessor(tok, scripts[i]!, tok.eosTokenId!)(i, ids, logits),
  });
  const fact = (n: number): number => (n <= 1 ? 1 : n * fact(n - 1));
  r.samples.forEach((s, i) => {
    t.is(s.calls[0]?.observation, String(fact(i + 3)));
    t.like(s, { numToolCalls: 1, executionPasses: 1, finishReason: "stop" });
    t.true(s.text.endsWith(`\`\`\`output\n${fact(i + 3)}\n\`\`\`\n\\boxed{}`));
  });
});
