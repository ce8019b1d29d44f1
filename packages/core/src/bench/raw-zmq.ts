/** The floor: raw ZeroMQ request-reply between this process and an echo process, on the transport actors use. */
import { spawn } from "node:child_process";
import * as zmq from "zeromq";
import { childExecArgv, siblingModulePath } from "../module-files.js";
import { tuneSocket } from "../wire/links.js";

const ECHO = siblingModulePath(import.meta.url, "./echo-server");

/** A Dealer connected to an echo process: request-reply one at a time, or with a window in flight. */
export class RawEcho {
  private constructor(
    private child: ReturnType<typeof spawn>,
    private d: zmq.Dealer,
  ) {}

  static async start(endpoint: string): Promise<RawEcho> {
    const child = spawn(process.execPath, [...childExecArgv(ECHO), ECHO, endpoint], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    const ep: string = await new Promise((resolve, reject) => {
      child.stdout!.once("data", (d) => resolve(String(d).trim()));
      child.once("exit", (c) => reject(new Error(`echo server exited with ${c}`)));
    });
    const d = new zmq.Dealer();
    tuneSocket(d);
    d.connect(ep);
    const r = new RawEcho(child, d);
    await r.sync(0.2);
    return r;
  }

  /** Round trips per second, one at a time. */
  async sync(seconds: number): Promise<[number, number]> {
    const payload = Buffer.alloc(48, 7);
    let n = 0;
    const t0 = performance.now();
    while (performance.now() - t0 < seconds * 1000) {
      await this.d.send(payload);
      await this.d.receive();
      n++;
    }
    return [n, (performance.now() - t0) / 1000];
  }

  /** Round trips per second with up to `window` requests in flight. */
  async pipelined(seconds: number, window = 1000): Promise<[number, number]> {
    const payload = Buffer.alloc(48, 7);
    let sent = 0;
    let got = 0;
    const t0 = performance.now();
    const deadline = t0 + seconds * 1000;
    const receiver = (async () => {
      for (;;) {
        await this.d.receive();
        got++;
        if (got === sent && performance.now() > deadline) return;
      }
    })();
    while (performance.now() < deadline) {
      while (sent - got < window) {
        await this.d.send(payload);
        sent++;
      }
      await new Promise((r) => setImmediate(r));
    }
    await receiver;
    return [got, (performance.now() - t0) / 1000];
  }

  close(): void {
    this.d.close();
    this.child.kill();
  }
}
