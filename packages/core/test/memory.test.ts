import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import test from "ava";

const run = promisify(execFile);
const SCRIPT = fileURLToPath(new URL("./fixtures/memory-run.ts", import.meta.url));

test("objects are freed when no ref remains: store and heap stay flat over 100,000 calls", async (t) => {
  const { stdout } = await run(process.execPath, ["--expose-gc", "--import", "tsx", SCRIPT], {
    maxBuffer: 1 << 20,
  });
  const lines = stdout
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  const rounds = lines.filter((l) => l.calls);
  t.is(rounds.length, 10);
  t.is(lines.at(-1).final, 100_000, "every call ran");
  // at most the last batch of 1,000 refs may still be reachable from the loop's frame
  for (const r of rounds) t.true(r.held <= 1000, `objects still held after ${r.calls} calls: ${r.held}`);
  t.true(
    rounds.at(-1).freed + rounds.at(-1).held >= 110_000,
    `freed ${rounds.at(-1).freed} of 110,000 objects`,
  );
  const growth = rounds.at(-1).heapUsed - rounds[1].heapUsed;
  t.true(growth < 8 * 1024 * 1024, `heap grew by ${growth} bytes from 20,000 to 100,000 calls`);
  t.log(rounds.map((r) => `${r.calls}: held ${r.held}, heap ${(r.heapUsed / 1e6).toFixed(1)} MB`).join("\n"));
});

test("an object lent to an actor stays while the actor holds its ref, and is freed once it drops it", async (t) => {
  const script = fileURLToPath(new URL("./fixtures/borrow-run.ts", import.meta.url));
  const { stdout } = await run(process.execPath, ["--expose-gc", "--import", "tsx", script]);
  const r = JSON.parse(stdout.trim().split("\n").pop()!);
  t.is(r.afterDriverDropped, 1, "kept for the borrower after the driver dropped its ref");
  t.is(r.readByBorrower, 7);
  t.is(r.afterBorrowerDropped, 0, "freed once the borrower dropped it");
});
