/** `torl status`: nodes, resources used/free, actors and their state, asked of the head. */
import { defaultKeyFile, resolveJoinKeys } from "../cluster/key-file.js";
import type { ClusterStatus } from "../cluster/messages.js";
import { ClusterAuthError, HeadError } from "../errors.js";
import { HeadClient } from "../runtime/head-client.js";
import { setClusterKeys } from "../wire/security.js";
import { defineCommand } from "./define.js";
import { headAddressFrom } from "./flags.js";
import { listDaemons } from "./state.js";

const usage = `usage: pnpm torl status [--address HOST:PORT] [--keys PATH] [--json]

Shows the cluster's nodes (resources used / total), actors and placement groups, and whether the
cluster is authenticated. Without --address it asks the head last started on this machine. An
authenticated cluster needs its keys: --keys, TORL_CLUSTER_KEYS, or the state directory's file.`;

export async function fetchStatus(
  address: string,
  timeoutMs = 5000,
  keysFile?: string,
): Promise<ClusterStatus> {
  setClusterKeys(resolveJoinKeys(keysFile, address));
  const client = new HeadClient(`tcp://${address}`, () => {});
  try {
    return await client.request("status", {}, timeoutMs);
  } finally {
    client.close();
  }
}

function fmt(n: number): string {
  return String(Math.round(n * 100) / 100);
}

export function formatStatus(s: ClusterStatus): string {
  const lines = [
    `head ${s.address}  up ${s.uptimeS}s  drivers/workers connected ${s.clients}`,
    s.security?.mode === "curve"
      ? `security: authenticated and encrypted (CURVE), listening on ${s.security.listen}; connections refused so far: ${s.security.refusedConnections}`
      : `security: NOT authenticated (listening on ${s.security?.listen ?? "?"} only): any process on this machine can run code in this cluster`,
    "",
    "nodes:",
  ];
  for (const n of s.nodes) {
    const res = Object.entries(n.total)
      .filter(([, total]) => total > 0)
      .map(([k, total]) => `${k} ${fmt(total - (n.available[k] ?? 0))}/${fmt(total)} used`)
      .join(", ");
    lines.push(`  ${n.nodeId}  ${n.ip.padEnd(15)} ${n.alive ? "ALIVE" : "DEAD "}  pid ${n.pid}  ${res}`);
  }
  const actors = s.actors.filter((a) => a.className !== "(task executor)");
  const execs = s.actors.length - actors.length;
  lines.push("", `actors (${actors.length}, plus ${execs} task executors):`);
  for (const a of actors) {
    lines.push(
      `  ${a.actorId.padEnd(28)} ${(a.name ?? "-").padEnd(14)} ${a.state.padEnd(10)} ${a.nodeId ?? "-"}  pid ${a.pid ?? "-"}${a.nodeAffinity ? `  affinity ${a.nodeAffinity.nodeId}${a.nodeAffinity.soft ? " (soft)" : ""}` : ""}${a.state === "DEAD" && a.cause ? `  (${a.cause.split("\n")[0]})` : ""}`,
    );
  }
  if (s.placementGroups.length > 0) {
    lines.push("", "placement groups:");
    for (const p of s.placementGroups)
      lines.push(`  ${p.pgId}  ${p.strategy}  ${p.state}  ${JSON.stringify(p.bundles)}`);
  }
  return lines.join("\n");
}

/**
 * Why a secure head refused `torl status`, naming the keys this process used and where the head's
 * are: the file a head started on this machine was given, or where a head keeps them by default.
 */
function refusedKeys(address: string, e: ClusterAuthError, given: string | undefined): string {
  const used = given
    ? `the keys in ${given} (--keys)`
    : process.env.TORL_CLUSTER_KEYS
      ? `the keys in ${process.env.TORL_CLUSTER_KEYS} (TORL_CLUSTER_KEYS)`
      : null;
  const started = listDaemons().find((d) => d.role === "head" && d.address === address && d.keys);
  const theirs = started
    ? `the head was started here with its keys in ${started.keys}: add --keys ${started.keys}`
    : `give the key file the head was started with (--keys PATH or TORL_CLUSTER_KEYS=PATH; a head started without --keys keeps it in cluster-keys.json in its state directory, here ${defaultKeyFile()})`;
  return `it refused ${used ?? "a connection without keys"} (${e.reason}); ${theirs}`;
}

export const statusCommand = defineCommand({
  summary: "show the cluster's nodes, resources and actors",
  usage,
  flags: {
    address: { type: "address" },
    json: { type: "boolean" },
    keys: { type: "string" },
  },
  async run(f) {
    const address = headAddressFrom(f.address);
    let s: any;
    try {
      s = await fetchStatus(address, 5000, f.keys);
    } catch (e) {
      const why = e instanceof ClusterAuthError ? refusedKeys(address, e, f.keys) : (e as Error).message;
      throw new HeadError(`cannot reach the head at ${address}: ${why}`, { cause: e });
    }
    console.log(f.json ? JSON.stringify(s) : formatStatus(s));
  },
});
