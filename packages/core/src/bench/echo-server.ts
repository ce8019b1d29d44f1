/** A raw ZeroMQ echo server (Router) for the baseline round trips; prints its endpoint on stdout. */
import * as zmq from "zeromq";
import { tuneSocket } from "../wire/links.js";

const sock = new zmq.Router();
tuneSocket(sock);
await sock.bind(process.argv[2] ?? "tcp://127.0.0.1:0");
process.stdout.write(`${sock.lastEndpoint}\n`);
process.on("disconnect", () => process.exit(0));
for await (const msg of sock) await sock.send(msg);
