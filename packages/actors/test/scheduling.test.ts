import {
  availableResources,
  get,
  InfeasibleResourceError,
  init,
  kill,
  placementGroup,
  removePlacementGroup,
  shutdown,
  wait,
} from "@torl-ts/actors";
import test from "ava";
import { CounterActor, slowSquareTask } from "./fixtures/classes.js";

test.before(async () => {
  await init({ numCpus: 4, numGpus: 4, resources: { sandbox: 2 } });
});
test.after.always(async () => {
  await shutdown();
});

test.serial("an actor given GPUs sees exactly those ids in CUDA_VISIBLE_DEVICES", async (t) => {
  const two = CounterActor.options({ numGpus: 2 }).remote(0);
  const ctx = await two.context();
  t.deepEqual(ctx.gpuIds, [0, 1]);
  t.is(ctx.cuda, "0,1");
  const none = CounterActor.remote(0);
  t.is((await none.context()).cuda, "", "an actor without GPUs sees none");
  kill(two);
  kill(none);
});

test.serial("fractional GPUs share one device; whole GPUs are exclusive", async (t) => {
  const a = CounterActor.options({ numGpus: 0.5 }).remote(0);
  const b = CounterActor.options({ numGpus: 0.5 }).remote(0);
  const c = CounterActor.options({ numGpus: 1 }).remote(0);
  const [ca, cb, cc] = await get([a.context(), b.context(), c.context()]);
  t.is(ca.cuda, cb.cuda);
  t.is(ca.cuda!.split(",").length, 1);
  t.not(cc.cuda, ca.cuda);
  for (const h of [a, b, c]) kill(h);
});

test.serial("a request that can never fit fails at once with a clear error", async (t) => {
  const big = CounterActor.options({ numGpus: 8 }).remote(0);
  const err = await t.throwsAsync(big.ready(), { instanceOf: InfeasibleResourceError });
  t.regex(err!.message, /GPU: 8/);
  t.regex(err!.message, /no node in the cluster can ever provide/);
  await t.throwsAsync(
    CounterActor.options({ resources: { tpu: 1 } })
      .remote(0)
      .inc(1),
    {
      instanceOf: InfeasibleResourceError,
      message: /tpu: 1/,
    },
  );
  await t.throwsAsync(slowSquareTask.options({ numCpus: 64 }).remote(2, 0), {
    instanceOf: InfeasibleResourceError,
  });
});

test.serial("a request that can fit later waits until resources are freed", async (t) => {
  const first = CounterActor.options({ resources: { sandbox: 2 } }).remote(1);
  await first.ready();
  const second = CounterActor.options({ resources: { sandbox: 1 } }).remote(2);
  const ready = second.ready();
  const early = await wait([ready], { timeoutMs: 300 });
  t.is(early.ready.length, 0, "waits while the resource is taken");
  kill(first);
  await ready;
  t.is(await second.inc(1), 3);
  kill(second);
});

test.serial("placement groups: PACK bundles hold GPUs; several actors share one bundle's GPU", async (t) => {
  const pg = placementGroup(
    [
      { CPU: 1, GPU: 1 },
      { CPU: 1, GPU: 1 },
    ],
    { strategy: "STRICT_PACK" },
  );
  const info = await pg.ready();
  t.is(info.state, "CREATED");
  t.is(info.bundleGpus!.length, 2);
  t.not(info.bundleGpus![0]![0], info.bundleGpus![1]![0]);
  const actorRole = CounterActor.options({ placementGroup: pg, bundleIndex: 0, numGpus: 0.5 }).remote(0);
  const rolloutRole = CounterActor.options({ placementGroup: pg, bundleIndex: 0, numGpus: 0.5 }).remote(0);
  const other = CounterActor.options({ placementGroup: pg, bundleIndex: 1, numGpus: 1 }).remote(0);
  const [a, r, o] = await get([actorRole.context(), rolloutRole.context(), other.context()]);
  t.is(a.cuda, String(info.bundleGpus![0]![0]));
  t.is(r.cuda, a.cuda, "two roles colocated on one GPU bundle");
  t.is(o.cuda, String(info.bundleGpus![1]![0]));
  // the bundle is full: a third 0.5-GPU actor on bundle 0 waits
  const extra = CounterActor.options({ placementGroup: pg, bundleIndex: 0, numGpus: 0.5 }).remote(0);
  t.is((await wait([extra.ready()], { timeoutMs: 300 })).ready.length, 0);
  // asking a bundle for more than it holds fails at once
  const tooBig = CounterActor.options({ placementGroup: pg, bundleIndex: 1, numGpus: 2 }).remote(0);
  await t.throwsAsync(tooBig.ready(), { instanceOf: InfeasibleResourceError, message: /bundle 1/ });
  await t.throwsAsync(CounterActor.options({ placementGroup: pg, bundleIndex: 5 }).remote(0).ready(), {
    message: /bundle index 5 is out of range/,
  });
  await removePlacementGroup(pg);
  await t.throwsAsync(actorRole.inc(1), { name: "ActorDiedError" });
  const avail = await availableResources();
  t.is(avail.GPU, 4, "removing the group returns its GPUs");
});

test.serial(
  "placement strategies: STRICT_SPREAD needs one node per bundle; SPREAD and PACK fit on one",
  async (t) => {
    const spread = placementGroup([{ CPU: 1 }, { CPU: 1 }], { strategy: "STRICT_SPREAD" });
    const err = await t.throwsAsync(spread.ready(), { message: /can never be placed/ });
    t.is(err!.name, "InfeasibleResourceError");
    const soft = placementGroup([{ CPU: 1 }, { CPU: 1 }], { strategy: "SPREAD" });
    t.is((await soft.ready()).state, "CREATED");
    const pack = placementGroup([{ CPU: 1 }, { CPU: 1 }], { strategy: "PACK" });
    t.is((await pack.ready()).state, "CREATED");
    // all 4 CPUs are now reserved: a third group waits until one is removed
    const later = placementGroup([{ CPU: 2 }], { strategy: "PACK" });
    const readyLater = later.ready();
    t.is((await wait([readyLater], { timeoutMs: 300 })).ready.length, 0);
    await removePlacementGroup(soft);
    t.is((await readyLater).state, "CREATED");
    await removePlacementGroup(pack);
    await removePlacementGroup(later);
    await t.throwsAsync(placementGroup([{ CPU: 100 }]).ready(), {
      instanceOf: Error,
      message: /can never be placed/,
    });
  },
);

test.serial(
  "a placement group waiting for resources that are taken says so, naming itself and what is free",
  async (t) => {
    const holder = placementGroup([{ CPU: (await availableResources()).CPU! }]);
    await holder.ready();
    const lines: string[] = [];
    const write = process.stderr.write;
    process.stderr.write = ((chunk: string | Uint8Array, ...rest: never[]) => {
      lines.push(String(chunk));
      return write.call(process.stderr, chunk, ...rest);
    }) as typeof process.stderr.write;
    process.env.TORL_PENDING_WARN_MS = "200";
    const warnings = () => lines.filter((l) => l.includes('placement group "late"'));
    try {
      const late = placementGroup([{ CPU: 1 }], { name: "late" });
      const ready = late.ready();
      await new Promise((r) => setTimeout(r, 900));
      t.true(warnings().length >= 2, `a warning every 200 ms: ${warnings().length}`);
      t.regex(warnings()[0]!, /has waited \d+\.\d s for resources; free now: \{[^}]*"CPU":0/);
      t.regex(warnings()[0]!, /removePlacementGroup/);
      await removePlacementGroup(holder);
      t.is((await ready).state, "CREATED");
      const after = warnings().length;
      await new Promise((r) => setTimeout(r, 500));
      t.is(warnings().length, after, "silent once placed");
      await removePlacementGroup(late);
      process.env.TORL_PENDING_WARN_MS = "soon";
      const refused = placementGroup([{ CPU: 1 }]);
      await t.throwsAsync(refused.ready(), {
        message: /TORL_PENDING_WARN_MS must be a positive number of milliseconds, got "soon"/,
      });
      await removePlacementGroup(refused);
    } finally {
      process.stderr.write = write;
      delete process.env.TORL_PENDING_WARN_MS;
    }
  },
);
