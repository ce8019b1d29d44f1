// What values travel to and from actors and tasks: faithfully, or refused at the call site with a
// SerializationError naming the path. Nothing may arrive as something else (e.g. a function as undefined).

import { get, init, ObjectRef, put, SerializationError, shutdown } from "@torl-ts/actors";
import test from "ava";
import { addTask, CounterActor } from "./fixtures/classes.js";
import { Point, ProbeActor, Secret } from "./fixtures/values.js";

test.before(async () => {
  await init({ numCpus: 2 });
});
test.after.always(async () => {
  await shutdown();
});

class Local {
  n = 1;
}

test("a function, a symbol or an unregistered class instance is refused at the call site, naming the path", (t) => {
  const p = ProbeActor.remote();
  const fn = t.throws(() => p.echo({ f: () => 1 }), { instanceOf: SerializationError });
  t.is(fn!.path, "args[0].f");
  t.regex(fn!.message, /^args\[0\]\.f: a function \(f\) cannot be sent to an actor/);
  const deep = t.throws(() => p.echo([1, { a: [Symbol("s")] }]), { instanceOf: SerializationError });
  t.is(deep!.path, "args[0][1].a[0]");
  t.is(deep!.found, "a symbol");
  const inst = t.throws(() => p.echo({ x: new Local() }), { instanceOf: SerializationError });
  t.is(inst!.path, "args[0].x");
  t.regex(inst!.message, /an instance of class Local.*registerSerializer\(Local\)/);
  const cyc: Record<string, unknown> = {};
  cyc.self = cyc;
  t.regex(
    t.throws(() => p.echo(cyc), { instanceOf: SerializationError })!.message,
    /args\[0\]\.self: a circular reference/,
  );
  t.regex(
    t.throws(() => p.echo(Promise.resolve(1)), { instanceOf: SerializationError })!.message,
    /a Promise cannot be sent.*await it first/,
  );
  t.regex(
    t.throws(() => p.echo(2n ** 80n), { instanceOf: SerializationError })!.message,
    /BigInt outside the 64-bit range/,
  );
  const ctor = t.throws(() => CounterActor.remote((() => 0) as unknown as number), {
    instanceOf: SerializationError,
  });
  t.regex(ctor!.message, /^args\[0\]: a function .*constructor of Counter/);
  t.is(
    t.throws(() => addTask.remote(1, (() => 2) as unknown as number), { instanceOf: SerializationError })!
      .path,
    "args[1]",
  );
  t.is(t.throws(() => put({ g: () => 0 }), { instanceOf: SerializationError })!.path, "value.g");
});

test("a return value that cannot travel fails the caller's ref with SerializationError, not undefined", async (t) => {
  const p = ProbeActor.remote();
  const fn = await t.throwsAsync(p.returnsFunction(), { instanceOf: SerializationError });
  t.is(fn!.path, "result.f");
  t.regex(fn!.message, /result\.f: a function \(f\) cannot be returned from method 'returnsFunction'/);
  const inst = await t.throwsAsync(p.returnsInstance(), { instanceOf: SerializationError });
  t.is(inst!.path, "result[0]");
  t.is(await p.echo(1), 1, "the actor keeps working");
});

test("Map, Set, Date, RegExp, BigInt, undefined, typed arrays, ArrayBuffer and DataView arrive as themselves", async (t) => {
  const p = ProbeActor.remote();
  const map = new Map<unknown, unknown>([
    ["a", 1],
    [2, new Map([["inner", [1, 2]]])],
  ]);
  const sent = {
    map,
    set: new Set(["x", 3]),
    date: new Date(1_700_000_000_123),
    re: /a+b/gi,
    big: 2n ** 63n,
    undef: undefined,
    f64: Float64Array.from([1.5, -2]),
    big32: new Float32Array(1000).fill(0.25),
    buf: Buffer.from("hi"),
    ab: new Uint8Array([7, 8, 9]).buffer,
    dv: new DataView(new Uint8Array([1, 2, 3, 4]).buffer, 1, 2),
    nullProto: Object.assign(Object.create(null), { k: 1 }),
  };
  const back = (await p.echo(sent)) as typeof sent;
  t.true(back.map instanceof Map);
  t.deepEqual([...back.map.keys()], ["a", 2], "keys keep their type");
  t.deepEqual([...(back.map.get(2) as Map<string, number[]>).entries()], [["inner", [1, 2]]]);
  t.deepEqual(back.set, new Set(["x", 3]));
  t.true(back.date instanceof Date);
  t.is(back.date.getTime(), 1_700_000_000_123);
  t.true(back.re instanceof RegExp);
  t.is(back.re.source, "a+b");
  t.is(back.re.flags, "gi");
  t.is(back.big, 2n ** 63n);
  t.true("undef" in back && back.undef === undefined);
  t.true(back.f64 instanceof Float64Array);
  t.deepEqual([...back.f64], [1.5, -2]);
  t.true(back.big32 instanceof Float32Array);
  t.is(back.big32[999], 0.25);
  t.true(Buffer.isBuffer(back.buf));
  t.is(back.buf.toString(), "hi");
  t.true(back.ab instanceof ArrayBuffer);
  t.deepEqual([...new Uint8Array(back.ab)], [7, 8, 9]);
  t.true(back.dv instanceof DataView);
  t.deepEqual([back.dv.getUint8(0), back.dv.getUint8(1)], [2, 3]);
  t.is(back.nullProto.k, 1);
  // the same through the object store, fetched by another process
  const held = put(sent);
  const viaStore = (await p.readRef([held])) as typeof sent;
  t.true(viaStore.map instanceof Map);
  t.true(viaStore.set instanceof Set);
  t.deepEqual(
    (await p.describe(map)).detail,
    [...map.entries()].map(([k, v]) => [k, v]),
  );
});

test("-0 arrives as -0: in arguments, results, stored objects and tasks, alone or inside values", async (t) => {
  const p = ProbeActor.remote();
  const [arrived, sentBack] = await p.negativeZero(-0);
  t.true(arrived, "the argument arrived as -0");
  t.true(Object.is(sentBack, -0), "the result arrived as -0");
  t.false((await p.negativeZero(0))[0], "0 stays 0");
  t.true(Object.is(await p.echo(-0), -0));
  const back = (await p.echo({ a: [-0, 0, 1.5], m: new Map([["k", -0]]), f: new Float64Array([-0]) })) as {
    a: number[];
    m: Map<string, number>;
    f: Float64Array;
  };
  t.deepEqual(
    back.a.map((v) => Object.is(v, -0)),
    [true, false, false],
  );
  t.true(Object.is(back.m.get("k"), -0));
  t.true(Object.is(back.f[0], -0));
  t.true(Object.is((await p.readRef([put(-0)])) as number, -0), "through the object store");
  t.true(Object.is(await addTask.remote(-0, -0), -0), "task arguments and result");
});

test("an array with extra own properties is refused with SerializationError naming the property", async (t) => {
  const p = ProbeActor.remote();
  const list = Object.assign([1, 2], { extra: "x" });
  const sent = t.throws(() => p.echo({ list }), { instanceOf: SerializationError });
  t.is(sent?.path, "args[0].list.extra");
  t.regex(
    sent?.message ?? "",
    /^args\[0\]\.list\.extra: a property of an array beside its elements cannot be sent/,
  );
  const returned = await t.throwsAsync(p.returnsArrayWithProperty(), { instanceOf: SerializationError });
  t.is(returned?.path, "result.extra");
  t.throws(() => put(list), { instanceOf: SerializationError, message: /^value\.extra:/ });
  // holes are no extra properties: a sparse array travels (its holes as undefined)
  const sparse: number[] = [1];
  sparse[3] = 4;
  t.deepEqual(await p.echo(sparse), [1, undefined, undefined, 4]);
});

test("errors travel as errors: built-in classes kept, others by name, with message and own fields", async (t) => {
  const p = ProbeActor.remote();
  const range = await p.describe(new RangeError("too far"));
  t.deepEqual(range, { type: "RangeError", detail: ["RangeError", "too far", null] });
  class DiskError extends Error {
    override name = "DiskError";
    code = "ENOSPC";
  }
  const custom = await p.describe(new DiskError("full"));
  t.deepEqual(custom, { type: "Error", detail: ["DiskError", "full", "ENOSPC"] });
  const back = (await p.echo(new TypeError("bad"))) as Error;
  t.true(back instanceof TypeError);
  t.is(back.message, "bad");
});

test("registered classes arrive as instances of their class (default and custom serializers)", async (t) => {
  const p = ProbeActor.remote();
  t.deepEqual(await p.describe(new Point(1, 2)), { type: "Point", detail: 5 });
  t.deepEqual(await p.describe(new Secret("s3")), { type: "Secret", detail: "s3" });
  const back = await p.returnsPoint();
  t.true(back instanceof Point);
  t.is(back.norm2(), 25);
});

test("refs nested in values stay refs (top-level ref arguments are resolved)", async (t) => {
  const p = ProbeActor.remote();
  const ref = put(41);
  t.true(await p.isRef([ref]));
  t.is(await p.echo(ref), 41);
  const [owned] = await p.ownRef(7);
  t.true(owned instanceof ObjectRef);
  t.is(await get(owned!), 7);
});
