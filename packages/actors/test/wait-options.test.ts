// wait() and get() refuse options they cannot honour at the call site, with a named error, and never
// give a wrong answer (Ray's rule for wait: 1 <= numReturns <= refs.length; timeouts are numbers >= 0).
import { spawnSync } from "node:child_process";
import { fileURLToPath } from "node:url";
import { get, wait } from "@torl-ts/actors";
import test from "ava";

const never = () => new Promise<never>(() => {});

test("wait refuses numReturns that is not a whole number from 1 to refs.length", (t) => {
  const refs = [Promise.resolve(1), Promise.resolve(2)];
  for (const numReturns of [Number.NaN, 1.5, -1, 0, 3, Number.POSITIVE_INFINITY, "1" as unknown as number]) {
    const err = t.throws(() => wait(refs, { numReturns }), { instanceOf: RangeError }, String(numReturns));
    t.regex(err!.message, /numReturns must be a whole number from 1 to the number of refs \(2\)/);
  }
});

test("wait and get refuse a timeout that is not a number >= 0", (t) => {
  const refs = [Promise.resolve(1)];
  for (const timeoutMs of [Number.NaN, -1, "10" as unknown as number, null as unknown as number]) {
    t.throws(() => wait(refs, { timeoutMs }), { instanceOf: RangeError, message: /wait\(\): timeoutMs/ });
    t.throws(() => get(refs[0]!, { timeoutMs }), { instanceOf: RangeError, message: /get\(\): timeoutMs/ });
  }
});

test("wait answers right at the edges: every ref, an empty list, a timeout of 0", async (t) => {
  const a = Promise.resolve("a");
  const b = Promise.resolve("b");
  const slow = never();
  t.deepEqual(await wait([a, b], { numReturns: 2 }), { ready: [a, b], notReady: [] });
  t.deepEqual(await wait([], { numReturns: 3 }), { ready: [], notReady: [] });
  const r = await wait([a, slow, b], { numReturns: 3, timeoutMs: 20 });
  t.deepEqual(r, { ready: [a, b], notReady: [slow] });
  t.deepEqual(await wait([slow, a], { numReturns: 2, timeoutMs: 0 }), { ready: [a], notReady: [slow] });
});

// In a child process: the pending wait and get keep their (long) timers, so the process ends itself.
test("a timeout beyond Node's longest timer (2^31 - 1 ms) does not fire at once", (t) => {
  const code = `
import { GetTimeoutError, get, wait } from "@torl-ts/actors";
const slow = new Promise(() => {});
let waited = false;
let timedOut = false;
void wait([slow], { timeoutMs: 2 ** 32 }).then(() => { waited = true; });
get(slow, { timeoutMs: 2 ** 32 }).catch((e) => { timedOut = e instanceof GetTimeoutError; });
setTimeout(() => { console.log(JSON.stringify({ waited, timedOut })); process.exit(0); }, 200);
`;
  const r = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", code], {
    cwd: fileURLToPath(new URL("..", import.meta.url)),
    encoding: "utf8",
    timeout: 60_000,
  });
  t.is(r.status, 0, r.stderr);
  const { waited, timedOut } = JSON.parse(r.stdout.trim().split("\n").pop()!);
  t.false(waited, "wait() returned long before its timeout");
  t.false(timedOut, "get() timed out long before its timeout");
});
