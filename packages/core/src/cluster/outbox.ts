/**
 * How the parts of the head (node table, actor directory, scheduler, placement groups) reach the
 * peers they answer to. The head implements it over its ROUTER socket; a test records what is sent.
 */
import type { HeadToClient, HeadToNode } from "./messages.js";

export interface Outbox {
  /** To a node agent or client, by its routing id. */
  send(peer: Buffer, m: HeadToNode | HeadToClient): void;
  /** To the peer that sent messages under this key (its routing id as latin1), if it is known. */
  sendTo(key: string, m: HeadToClient): void;
}
