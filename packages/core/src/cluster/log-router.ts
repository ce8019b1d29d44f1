/**
 * The head's part in worker logs: batches a node agent sends go to the driver that owns each actor,
 * directly or through the actors that created it (or, where that driver is gone or unknown, to every
 * driver that asked for logs), and
 * `torl logs` requests go to the node that holds the files, with a deadline on its answer.
 */
import { ActorNotFoundError, HeadError } from "../errors.js";
import type { WireError } from "../wire/codec.js";
import type { ActorDirectory } from "./actor-directory.js";
import type { ClientEntry, ClientTable } from "./clients.js";
import type { LogsRead, NodeToHead } from "./messages.js";
import type { NodeTable } from "./node-table.js";
import type { Outbox } from "./outbox.js";
import type { LogBatch } from "./worker-logs.js";

/** How long the head waits for a node to read its log files. */
const READ_TIMEOUT_MS = 10_000;

export class LogRouter {
  private qid = 0;
  private queries = new Map<number, { answer: (ok: boolean, v: unknown) => void; timer: NodeJS.Timeout }>();

  constructor(
    private nodes: NodeTable,
    private actors: ActorDirectory,
    private clients: ClientTable,
    private out: Outbox,
  ) {}

  /** Hands each batch to its actor's driver if it wants logs, else to every driver that does. */
  forward(batches: LogBatch[]): void {
    const byPeer = new Map<string, LogBatch[]>();
    const everyone = this.clients.wantingLogs();
    for (const b of batches) {
      const driver = this.driverOf(b.actorId);
      const to = driver ? (driver.logs ? [driver] : []) : everyone;
      for (const c of to) {
        const list = byPeer.get(c.peerKey) ?? [];
        list.push(b);
        byPeer.set(c.peerKey, list);
      }
    }
    for (const [peerKey, list] of byPeer) this.out.sendTo(peerKey, { t: "workerLog", batches: list });
  }

  /**
   * The driver an actor's output belongs to: its owner, or for an actor created inside another
   * actor's worker, that actor's driver, up the chain. Undefined where a link is gone.
   */
  private driverOf(actorId: string): ClientEntry | undefined {
    const seen = new Set<string>();
    let id: string | undefined = actorId;
    while (id !== undefined && !seen.has(id)) {
      seen.add(id);
      const owner = this.clients.get(this.actors.get(id)?.spec.ownerClientId ?? "");
      if (!owner) return undefined;
      if (owner.actorId === undefined) return owner;
      id = owner.actorId;
    }
    return undefined;
  }

  /** Asks the node holding `target`'s files (an actor id or name, or a node id) for their tails. */
  read(target: string, tailBytes: number, answer: (ok: boolean, v: unknown) => void): void {
    const node = this.nodes.get(target);
    let actorId: string | undefined;
    let nodeId = node?.nodeId;
    if (!node) {
      const entries = this.actors.entries();
      const found =
        entries.find(([id]) => id === target) ?? entries.reverse().find(([, a]) => a.spec.name === target);
      if (!found) {
        answer(
          false,
          new ActorNotFoundError(
            `no actor or node '${target}' (torl status lists them: actor ids, names and node ids)`,
          ),
        );
        return;
      }
      actorId = found[0];
      nodeId = found[1].nodeId;
      if (!nodeId) {
        answer(false, new HeadError(`actor ${actorId} was never placed on a node: it has no logs`));
        return;
      }
    }
    const holder = this.nodes.get(nodeId!);
    if (!holder?.alive) {
      answer(false, new HeadError(`node ${nodeId}, which holds the logs of '${target}', is dead`));
      return;
    }
    const qid = ++this.qid;
    const timer = setTimeout(() => {
      if (this.queries.delete(qid))
        answer(
          false,
          new HeadError(`node ${nodeId} did not send the logs of '${target}' within ${READ_TIMEOUT_MS} ms`),
        );
    }, READ_TIMEOUT_MS);
    timer.unref();
    this.queries.set(qid, { answer, timer });
    this.out.send(holder.peer, { t: "readLogs", qid, actorId, tailBytes });
  }

  answered(m: Extract<NodeToHead, { t: "logsRead" }>): void {
    const q = this.queries.get(m.qid);
    if (!q) return; // answered after its deadline: the caller was told already
    this.queries.delete(m.qid);
    clearTimeout(q.timer);
    if (m.ok) q.answer(true, m.v as LogsRead);
    else q.answer(false, wireToError(m.e));
  }
}

function wireToError(e: WireError): Error {
  return new HeadError(`${e.name}: ${e.message}`);
}
