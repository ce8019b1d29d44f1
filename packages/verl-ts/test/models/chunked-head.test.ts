/**
 * The LM head in chunks for passes without gradients (computeLogProbs): the same log-probs and entropy
 * as the whole-batch logits within float rounding, and a lower peak of tensor bytes, on the wasm backend
 * (with the OpenBLAS addon: its pick kernel and the tied head read in place) and on the cpu backend (the
 * op-by-op statistics, the head's transposed copy).
 */
import * as tf from "@tensorflow/tfjs";
import test from "ava";
import {
  chunkedTokenLogProbs,
  computeLogProbs,
  forwardBackward,
  headChunkRows,
  padBatch,
  Qwen2Model,
  selectBackend,
  tokenLogProbs,
} from "../../src/models/index.js";
import { tinyTestConfig } from "./tiny-config.js";

const batch = padBatch([
  [1, 5, 9, 3, 7, 2, 11, 40, 3],
  [4, 4, 8, 60, 2],
  [7, 1, 2, 3, 4, 5, 6, 7, 8],
]);

/** Log-probs and entropy of a pass run in a tidy scope, read and disposed. */
async function read(
  f: () => { logProbs: tf.Tensor; entropy?: tf.Tensor },
): Promise<[Float32Array, Float32Array]> {
  const [lp, ent] = tf.tidy(() => {
    const r = f();
    return [r.logProbs, r.entropy!];
  });
  try {
    return [(await lp!.data()) as Float32Array, (await ent!.data()) as Float32Array];
  } finally {
    lp!.dispose();
    ent!.dispose();
  }
}

function maxAbsDiff(a: Float32Array, b: Float32Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]! - b[i]!));
  return m;
}

for (const backend of ["wasm", "cpu"] as const) {
  for (const tied of [true, false]) {
    test.serial(
      `${backend}, ${tied ? "tied" : "untied"} head: chunked log-probs equal the whole-batch pass, with a lower peak`,
      async (t) => {
        await selectBackend({ backend, log: null });
        const model = Qwen2Model.random(tinyTestConfig(300, { tieWordEmbeddings: tied }), {
          seed: 3,
          std: 0.3,
        });
        try {
          for (const temperature of [1, 0.7]) {
            const whole = await read(() => tokenLogProbs(model, batch, { temperature, withEntropy: true }));
            for (const chunkRows of [1, 4, 7, 1000]) {
              const chunked = await read(() =>
                chunkedTokenLogProbs(model, batch, { temperature, withEntropy: true, chunkRows }),
              );
              t.true(
                maxAbsDiff(chunked[0], whole[0]) < 1e-5,
                `log-probs, ${chunkRows} rows a chunk, T ${temperature}`,
              );
              t.true(
                maxAbsDiff(chunked[1], whole[1]) < 1e-5,
                `entropy, ${chunkRows} rows a chunk, T ${temperature}`,
              );
              t.is(chunked[0][0], 0, "column 0 scores nothing");
              // one chunk (a small vocabulary: the tiny recipe's) is the whole-batch product: the same bits
              if (chunkRows >= batch.batch * batch.length) t.deepEqual(chunked, whole);
            }
          }
          // the peak of tensor bytes in a pass: the whole logits [B * L, V] against one chunk's
          const peak = async (f: () => { logProbs: tf.Tensor; entropy?: tf.Tensor }) =>
            (await tf.profile(async () => read(f))).peakBytes;
          const wholePeak = await peak(() => tokenLogProbs(model, batch, { withEntropy: true }));
          const chunkPeak = await peak(() =>
            chunkedTokenLogProbs(model, batch, { withEntropy: true, chunkRows: 2 }),
          );
          const logitsBytes = 4 * batch.batch * batch.length * 300;
          t.true(
            chunkPeak < wholePeak - logitsBytes / 2,
            `peak ${chunkPeak} bytes chunked, ${wholePeak} whole (the logits alone: ${logitsBytes})`,
          );
          // computeLogProbs takes the chunked path, and refuses a chunk size that is not one
          const viaCompute = await computeLogProbs(model, batch, {
            withEntropy: true,
            chunkRows: 2,
            microBatchSize: 3,
          });
          const whole = await read(() => tokenLogProbs(model, batch, { withEntropy: true }));
          t.true(maxAbsDiff(viaCompute.logProbs, whole[0]) < 1e-5);
          await t.throwsAsync(computeLogProbs(model, batch, { chunkRows: 0 }), { message: /chunkRows/ });
        } finally {
          model.dispose();
        }
      },
    );
  }
}

test("the default chunk holds 32 MiB of float32 logits: 55 positions at Qwen2.5's vocabulary", (t) => {
  t.is(headChunkRows(151936), 55);
  t.is(headChunkRows(1e9), 1);
});

for (const backend of ["wasm", "cpu"] as const)
  test.serial(
    `${backend}: scoreColumns scores those columns alone, the head running on their predicting positions only`,
    async (t) => {
      await selectBackend({ backend, log: null });
      const V = 300;
      const model = Qwen2Model.random(tinyTestConfig(V), { seed: 5, std: 0.3 });
      try {
        const L = batch.length;
        const full = await read(() => tokenLogProbs(model, batch, { withEntropy: true }));
        for (const [from, to] of [
          [5, 9],
          [1, 3],
          [8, 9],
          [0, 2],
        ] as const) {
          const scoreColumns = { from, to };
          const heads: number[][] = [];
          const profile = async (f: () => { logProbs: tf.Tensor; entropy?: tf.Tensor }) => {
            let got: [Float32Array, Float32Array] | undefined;
            const info = await tf.profile(async () => {
              got = await read(f);
            });
            // the LM head's products: matrix products V wide
            heads.push(
              info.kernels
                .filter((k) => /matmul/i.test(k.name))
                .flatMap((k) => k.outputShapes)
                .filter((shape) => shape.length === 2 && shape[1] === V)
                .map((shape) => shape[0]!),
            );
            return got!;
          };
          const viaTape = await profile(() =>
            tokenLogProbs(model, batch, { withEntropy: true, scoreColumns }),
          );
          const chunked = await profile(() =>
            chunkedTokenLogProbs(model, batch, { withEntropy: true, scoreColumns, chunkRows: 1000 }),
          );
          const scored = batch.batch * (to - Math.max(from, 1));
          for (const rows of heads) t.deepEqual([...new Set(rows)], [scored], `[${from}, ${to}): head rows`);
          for (const got of [viaTape, chunked])
            for (let i = 0; i < batch.batch * L; i++) {
              const c = i % L;
              const inside = c >= Math.max(from, 1) && c < to;
              for (const k of [0, 1] as const) {
                if (inside) t.true(Math.abs(got[k][i]! - full[k][i]!) < 1e-5, `[${from}, ${to}) column ${c}`);
                else t.is(got[k][i], 0, `[${from}, ${to}) column ${c} is not scored`);
              }
            }
          // the passes' products are the same calls: the same bits (the update's first ratio is exactly 1)
          t.deepEqual(chunked, viaTape);
        }
        t.throws(() => tokenLogProbs(model, batch, { scoreColumns: { from: 3, to: L + 1 } }), {
          message: /scoreColumns/,
        });
        t.throws(() => chunkedTokenLogProbs(model, batch, { scoreColumns: { from: 2.5, to: 4 } }), {
          message: /scoreColumns/,
        });
        // lastOnly names its one position: a range beside it is refused, not ignored
        t.throws(() => model.forward(batch, { lastOnly: true, positions: { from: 0, to: 2 } }), {
          instanceOf: RangeError,
          message: /lastOnly and positions/,
        });
      } finally {
        model.dispose();
      }
    },
  );

test.serial(
  "wasm: a loss over scored columns has the gradients of the whole pass's loss over the same columns",
  async (t) => {
    await selectBackend({ backend: "wasm", log: null });
    const model = Qwen2Model.random(tinyTestConfig(300, { tieWordEmbeddings: true }), { seed: 9, std: 0.3 });
    try {
      const L = batch.length;
      const [from, to] = [4, 8];
      // weights per scored column: a loss like the policy loss's, a weighted sum over the response
      const weights = tf.tensor2d(
        Float32Array.from({ length: batch.batch * L }, (_, i) =>
          i % L >= from && i % L < to ? 1 + (i % 5) : 0,
        ),
        [batch.batch, L],
      );
      const gradsOf = async (scoreColumns?: { from: number; to: number }) => {
        const { grads } = await forwardBackward(
          model,
          batch,
          ({ scores }) =>
            tf.sum(tf.mul(tf.add(scores.logProbs, tf.mul(scores.entropy!, 0.3)), weights)) as tf.Scalar,
          { withEntropy: true, microBatchSize: batch.batch, ...(scoreColumns ? { scoreColumns } : {}) },
        );
        const out = new Map<string, Float32Array>();
        for (const [name, g] of grads) {
          out.set(name, (await g.data()) as Float32Array);
          g.dispose();
        }
        return out;
      };
      const whole = await gradsOf();
      const scored = await gradsOf({ from, to });
      t.deepEqual([...scored.keys()].sort(), [...whole.keys()].sort());
      for (const [name, w] of whole) {
        const s = scored.get(name)!;
        let worst = 0;
        let scale = 0;
        for (let i = 0; i < w.length; i++) {
          worst = Math.max(worst, Math.abs(s[i]! - w[i]!));
          scale = Math.max(scale, Math.abs(w[i]!));
        }
        t.true(worst <= 1e-5 * Math.max(scale, 1), `${name}: max |diff| ${worst} of max |grad| ${scale}`);
      }
      weights.dispose();
    } finally {
      model.dispose();
    }
  },
);
