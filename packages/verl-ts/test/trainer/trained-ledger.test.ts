/** TrainedLedger: an asynchronous run's checkpoint stands before the oldest loader batch not wholly trained. */
import test from "ava";
import { TrainedLedger } from "../../src/trainer/trained-ledger.js";

/** The state before loader batch `i` of batches of 4 rows. */
const at = (i: number) => ({ loader: { epoch: 0, position: 4 * i, seed: 1, size: 16 }, rng: 100 + i });

function ledgerWith(batches: number, from = 0): TrainedLedger {
  const l = new TrainedLedger(at(from), from);
  for (let i = from; i < from + batches; i++) l.drew(at(i), at(i + 1), 4);
  return l;
}

test("the checkpoint stands before the oldest batch not wholly trained and lists what of it and later batches was", (t) => {
  const l = ledgerWith(3);
  // nothing trained yet: the start, though three batches are drawn
  t.deepEqual(l.point(), { ...at(0), async: { batch: 0, trained: [] } });
  l.took(0);
  t.deepEqual(l.point(), { ...at(1), async: { batch: 1, trained: [] } });
  // groups of batches 1 and 2 finished out of order
  l.took(1, [3, 0]);
  l.took(2, [1]);
  t.deepEqual(l.point(), { ...at(1), async: { batch: 1, trained: [[0, 3], [1]] } });
  l.took(1, [1, 2]);
  t.deepEqual(l.point(), { ...at(2), async: { batch: 2, trained: [[1]] } });
  l.took(2, [0, 2, 3]);
  t.deepEqual(l.point(), { ...at(3), async: { batch: 3, trained: [] } });
});

test("a resumed ledger numbers its batches on and takes the groups trained before the checkpoint", (t) => {
  const l = new TrainedLedger(at(5), 5);
  t.is(l.drew(at(5), at(6), 4, [0, 2]), 5);
  t.is(l.drew(at(6), at(7), 4), 6);
  t.deepEqual(l.point(), { ...at(5), async: { batch: 5, trained: [[0, 2]] } });
  l.took(5, [1, 3]);
  t.deepEqual(l.point(), { ...at(6), async: { batch: 6, trained: [] } });
});

test("a group trained twice, an unknown batch and a checkpoint's group out of range are errors", (t) => {
  const l = ledgerWith(2);
  l.took(0, [1]);
  t.throws(() => l.took(0, [1]), { message: /prompt group 1 of loader batch 0 was trained twice/ });
  t.throws(() => l.took(7), { message: /loader batch 7/ });
  t.throws(() => new TrainedLedger(at(0), 0).drew(at(0), at(1), 4, [4]), {
    message: /prompt group 4 of loader batch 0 .* has 4 groups/,
  });
});
