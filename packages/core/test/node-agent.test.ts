import net from "node:net";
import test from "ava";
import { NodeAgent } from "../src/cluster/node-agent.js";
import { HeadError } from "../src/errors.js";

/** A port nothing listens on (bound, then released). */
async function deadPort(): Promise<number> {
  const srv = net.createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const port = (srv.address() as net.AddressInfo).port;
  await new Promise((r) => srv.close(r));
  return port;
}

test("a node agent whose head never answers fails to start with HeadError instead of waiting forever", async (t) => {
  process.env.TORL_PREWARM = "0";
  const address = `127.0.0.1:${await deadPort()}`;
  const node = new NodeAgent({ headAddress: address, ip: "127.0.0.1", numCpus: 1, numGpus: 0 });
  const err = await t.throwsAsync(node.start(300), { instanceOf: HeadError });
  t.regex(err!.message, new RegExp(`no answer from the head at ${address} within 300 ms`));
});
