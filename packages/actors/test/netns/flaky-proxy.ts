/**
 * A slow, unreliable link for the partition tests, as a SOCKS5 proxy (CONNECT, no auth): every chunk
 * is delayed by DELAY_MS plus a uniform jitter of up to JITTER_MS (order kept per direction), and
 * each proxied connection is reset (TCP RST both ways) after a random lifetime with mean RESET_MS.
 * This kernel has no netem qdisc, so delay and resets are made here. Prints its port, then a line
 * of counts every 250 ms.
 */
import net from "node:net";

const DELAY_MS = Number(process.env.DELAY_MS ?? 100);
const JITTER_MS = Number(process.env.JITTER_MS ?? 40);
const RESET_MS = Number(process.env.RESET_MS ?? 3000);

const stats = { connections: 0, resets: 0, bytes: 0, upstreamErrors: 0 };

/**
 * Writes chunks to `to` after the delay, in the order they came: one queue and one timer per
 * direction (separate timers could fire out of order, and a TCP stream never reorders bytes).
 */
function delayedPipe(from: net.Socket, to: net.Socket): void {
  const queue: Array<{ due: number; chunk: Buffer }> = [];
  let timer: NodeJS.Timeout | null = null;
  const drain = () => {
    timer = null;
    const now = Date.now();
    while (queue.length > 0 && queue[0]!.due <= now) {
      const { chunk } = queue.shift()!;
      if (!to.destroyed) to.write(chunk);
    }
    if (queue.length > 0) timer = setTimeout(drain, queue[0]!.due - now);
  };
  let lastDue = 0;
  from.on("data", (chunk) => {
    const due = Math.max(Date.now() + DELAY_MS + Math.random() * JITTER_MS, lastDue);
    lastDue = due;
    stats.bytes += chunk.length;
    queue.push({ due, chunk });
    timer ??= setTimeout(drain, due - Date.now());
  });
  from.once("close", () => {
    if (timer) clearTimeout(timer);
  });
}

function relay(client: net.Socket, host: string, port: number): void {
  const upstream = net.connect({ host, port });
  let relaying = false;
  upstream.once("connect", () => {
    relaying = true;
    client.write(Buffer.from([5, 0, 0, 1, 0, 0, 0, 0, 0, 0]));
    stats.connections++;
    delayedPipe(client, upstream);
    delayedPipe(upstream, client);
    client.resume();
    // exponential lifetime: resets come now and then, at no fixed rhythm
    const life = -Math.log(1 - Math.random()) * RESET_MS;
    const t = setTimeout(() => {
      stats.resets++;
      client.resetAndDestroy();
      upstream.resetAndDestroy();
    }, life);
    const end = () => {
      clearTimeout(t);
      client.destroy();
      upstream.destroy();
    };
    client.once("close", end);
    upstream.once("close", end);
  });
  upstream.once("error", () => {
    if (client.destroyed) return;
    // a SOCKS failure reply only before the success reply: written into a relayed stream, its bytes
    // would reach the client as the server's and fail its handshake as a protocol error
    if (!relaying) client.end(Buffer.from([5, 5, 0, 1, 0, 0, 0, 0, 0, 0]));
    else {
      stats.upstreamErrors++;
      client.resetAndDestroy();
    }
  });
  client.on("error", () => upstream.destroy());
}

const server = net.createServer((client) => {
  let buf = Buffer.alloc(0);
  let stage: "greeting" | "request" = "greeting";
  const onData = (d: Buffer) => {
    buf = Buffer.concat([buf, d]);
    if (stage === "greeting") {
      if (buf.length < 2 || buf.length < 2 + buf[1]!) return;
      buf = buf.subarray(2 + buf[1]!);
      client.write(Buffer.from([5, 0]));
      stage = "request";
    }
    if (buf.length < 5) return;
    const atyp = buf[3]!;
    let host: string;
    let off: number;
    if (atyp === 1) {
      if (buf.length < 10) return;
      host = [...buf.subarray(4, 8)].join(".");
      off = 8;
    } else if (atyp === 3) {
      const n = buf[4]!;
      if (buf.length < 5 + n + 2) return;
      host = buf.subarray(5, 5 + n).toString();
      off = 5 + n;
    } else {
      client.destroy();
      return;
    }
    const port = buf.readUInt16BE(off);
    const rest = buf.subarray(off + 2);
    client.off("data", onData);
    client.pause(); // hold what the client sends until the upstream connection is there
    if (rest.length > 0) client.unshift(rest);
    relay(client, host, port);
  };
  client.on("data", onData);
  client.on("error", () => {});
});

server.listen(0, "127.0.0.1", () => {
  process.stdout.write(`port ${(server.address() as net.AddressInfo).port}\n`);
  setInterval(() => process.stdout.write(`stats ${JSON.stringify(stats)}\n`), 250);
});
