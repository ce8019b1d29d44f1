/** Actor classes and functions the actor benchmark runs in worker processes. */
import { get } from "../api.js";

export class BenchActor {
  noop(): null {
    return null;
  }
  async asyncNoop(): Promise<null> {
    await Promise.resolve();
    return null;
  }
}

/** A client actor for n:n calls: calls every target `calls` times, in batches. */
export class BenchClient {
  constructor(private targets: any[]) {}
  async run(calls: number, batch: number): Promise<number> {
    let done = 0;
    while (done < calls) {
      const refs = [];
      for (let i = 0; i < batch; i++) for (const t of this.targets) refs.push(t.noop());
      await get(refs);
      done += batch;
    }
    return done * this.targets.length;
  }
}

export function noopTask(): null {
  return null;
}
