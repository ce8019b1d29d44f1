/** A raw ZeroMQ echo server (Router) for the baseline round trips; prints its endpoint on stdout. */
import * as zmq from "zeromq";

const sock = new zmq.Router();
sock.linger = 0;
sock.sendHighWaterMark = 0;
sock.receiveHighWaterMark = 0;
await sock.bind(process.argv[2] ?? "tcp://127.0.0.1:0");
process.stdout.write(`${sock.lastEndpoint}\n`);
process.on("disconnect", () => process.exit(0));
for await (const msg of sock) await sock.send(msg);
