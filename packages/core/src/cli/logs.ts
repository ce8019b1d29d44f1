/** `torl logs <actor|node>`: what a worker printed, read from its node's log files through the head. */
import { resolveJoinKeys } from "../cluster/key-file.js";
import type { LogsRead } from "../cluster/messages.js";
import { HeadError, UsageError } from "../errors.js";
import { HeadClient } from "../runtime/head-client.js";
import { setClusterKeys } from "../wire/security.js";
import { defineCommand } from "./define.js";
import { headAddressFrom } from "./flags.js";

const usage = `usage: pnpm torl logs <actor id | actor name | node id> [--tail BYTES] [--address HOST:PORT] [--keys PATH] [--json]

Prints what an actor's worker processes printed (stdout and stderr, one file each per process), or
every worker's of a node, read on the node that ran them: from any machine of the cluster. Each file
is shown from its last --tail bytes (default 65536). torl status lists actor ids, names and nodes.`;

export const logsCommand = defineCommand({
  summary: "print what an actor's or a node's workers printed (their log files)",
  usage,
  flags: {
    address: { type: "address" },
    keys: { type: "string" },
    tail: { type: "integer", min: 1, max: 8 << 20 },
    json: { type: "boolean" },
  },
  positionals: true,
  async run(f, positionals) {
    if (positionals.length !== 1)
      throw new UsageError("name one actor id, actor name or node id (torl status lists them)");
    const target = positionals[0]!;
    const address = headAddressFrom(f.address);
    setClusterKeys(resolveJoinKeys(f.keys, address));
    const client = new HeadClient(`tcp://${address}`, () => {});
    let logs: LogsRead;
    try {
      logs = await client.request("readLogs", { target, tailBytes: f.tail ?? 65536 }, 15_000);
    } catch (e) {
      throw new HeadError(`logs of '${target}' from the head at ${address}: ${(e as Error).message}`, {
        cause: e,
      });
    } finally {
      client.close();
    }
    if (f.json) {
      console.log(JSON.stringify(logs));
      return 0;
    }
    if (logs.files.length === 0)
      console.log(`no log files of '${target}' on node ${logs.nodeId} (${logs.dir})`);
    for (const file of logs.files) {
      const cut =
        file.bytes > Buffer.byteLength(file.text)
          ? ` (last ${Buffer.byteLength(file.text)} of ${file.bytes} bytes)`
          : "";
      console.log(`==> ${logs.nodeId}:${logs.dir}/${file.name}${cut} <==`);
      process.stdout.write(file.text.endsWith("\n") || file.text === "" ? file.text : `${file.text}\n`);
    }
    return 0;
  },
});
