// Collective rings in a cluster with keys: the ring sockets are CURVE sockets like every other one.
import {
  createCollectiveGroup,
  destroyCollectiveGroup,
  generateClusterKeys,
  init,
  shutdown,
} from "@torl-ts/actors";
import test from "ava";
import { CollectiveWorkerActor, valueAt } from "./collective.fixture.js";

test.after.always(async () => {
  await shutdown();
});

test("allReduce over TCP between two actors of a cluster with CURVE keys", async (t) => {
  await init({ numCpus: 2, keys: generateClusterKeys() });
  const members = [CollectiveWorkerActor.remote(), CollectiveWorkerActor.remote()];
  await Promise.all(members.map((m) => m.ready()));
  const group = await createCollectiveGroup(members, { name: "secure", transport: "tcp" });
  t.is(group.worldSize, 2);
  const n = 1001;
  const res = await Promise.all(members.map((m) => m.allReduce("secure", "Int32Array", n, "sum")));
  const want = Array.from({ length: n }, (_, i) => valueAt("Int32Array", 0, i) + valueAt("Int32Array", 1, i));
  t.deepEqual(Array.from(res[0]!), want);
  t.deepEqual(Array.from(res[1]!), want);
  await destroyCollectiveGroup(group);
});
