import { type ActorHandle, kill } from "@torl-ts/actors";
import { checkedOption, SandboxConfigError, shownValue } from "./errors.js";
import { sandboxError } from "./executor.js";
import { normalizeRequest } from "./request.js";
import { type SandboxActor, SandboxActorClass, type SandboxActorOptions } from "./sandbox-actor.js";
import type { BatchCodeRunner, RunCodeRequest, RunCodeResponse, SandboxHealth } from "./types.js";

/** A token bucket: `rate` tokens per second, at most `burst` saved. The clock is injectable for tests. */
export class TokenBucket {
  private tokens: number;
  private last: number;
  private waiters: (() => void)[] = [];
  private timer: NodeJS.Timeout | undefined;

  constructor(
    readonly rate: number,
    readonly burst: number = Math.max(1, rate),
    private readonly now: () => number = () => performance.now(),
  ) {
    // a rate of 0 or less would never refill: every take() would wait forever
    checkedOption("ratePerSecond", rate, 0, { integer: false, above: 0 });
    checkedOption("burst", burst, 1, { integer: false });
    this.tokens = burst;
    this.last = now();
  }

  /** Takes a token if one is there. */
  tryTake(): boolean {
    this.refill();
    if (this.tokens >= 1) {
      this.tokens -= 1;
      return true;
    }
    return false;
  }

  /** Resolves when a token was taken (FIFO). */
  take(): Promise<void> {
    if (this.waiters.length === 0 && this.tryTake()) return Promise.resolve();
    return new Promise((resolve) => {
      this.waiters.push(resolve);
      this.schedule();
    });
  }

  private refill(): void {
    const t = this.now();
    this.tokens = Math.min(this.burst, this.tokens + ((t - this.last) / 1000) * this.rate);
    this.last = t;
  }

  private schedule(): void {
    if (this.timer) return;
    const waitMs = Math.max(1, ((1 - this.tokens) / this.rate) * 1000);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      while (this.waiters.length > 0 && this.tryTake()) this.waiters.shift()!();
      if (this.waiters.length > 0) this.schedule();
    }, waitMs);
  }
}

export interface SandboxActorPoolOptions {
  /** Sandbox actors (processes). Default 2. */
  actors?: number;
  /** Warm interpreters per actor. Default 1. */
  workersPerActor?: number;
  /** Calls in flight per actor (default: workersPerActor * 2, so each actor has its next request queued). */
  maxInFlightPerActor?: number;
  /** Requests started per second over the whole pool, above 0 (default, or undefined: no limit). */
  ratePerSecond?: number;
  /** Tries per request when actors die under it (default 3). */
  maxAttempts?: number;
  /** Start a replacement when an actor dies (default true). */
  replaceDead?: boolean;
  /** Resources each actor reserves, e.g. `{ sandbox: 1 }` (default `{}`); CPUs through numCpus. */
  resources?: Record<string, number>;
  numCpus?: number;
  executor?: Omit<SandboxActorOptions, "workers">;
}

/** Every count and rate of the options, checked before anything starts (0 in flight or a rate of 0
 * would leave every request waiting). */
function checkPoolOptions(options: SandboxActorPoolOptions): void {
  for (const key of ["actors", "workersPerActor", "maxInFlightPerActor", "maxAttempts"] as const)
    checkedOption(key, options[key], 1);
  checkedOption("ratePerSecond", options.ratePerSecond, 0, { integer: false, above: 0 });
  checkedOption("numCpus", options.numCpus, 0, { integer: false, min: 0 });
  if (options.replaceDead !== undefined && typeof options.replaceDead !== "boolean")
    throw new SandboxConfigError(
      "replaceDead",
      `must be true or false, got ${shownValue(options.replaceDead)}`,
    );
}

const ALL_DEAD = "every sandbox actor of this pool has died (replaceDead is false)";

interface Member {
  handle: ActorHandle<SandboxActor>;
  inFlight: number;
  dead: boolean;
  id: number;
}

interface Job {
  request: RunCodeRequest;
  attempts: number;
  resolve: (r: RunCodeResponse) => void;
}

/**
 * Sandbox workers as actors on the runtime. `runBatch` (for rollout) spreads the requests over the
 * actors, at most `maxInFlightPerActor` each, at most `ratePerSecond` started per second. When an actor
 * dies (ActorDiedError) the calls it held run again on another actor and a replacement starts.
 */
export class SandboxActorPool implements BatchCodeRunner {
  private members: Member[] = [];
  private queue: Job[] = [];
  private closed = false;
  private nextId = 0;
  private readonly bucket: TokenBucket | undefined;
  private pumping = false;
  /** Actors being started (a first one, or replacements). */
  private adding = 0;
  /** Requests that were run again on another actor after theirs died. */
  retried = 0;
  /** Actors that died and were replaced. */
  replaced = 0;

  private constructor(readonly options: SandboxActorPoolOptions) {
    this.bucket = options.ratePerSecond !== undefined ? new TokenBucket(options.ratePerSecond) : undefined;
  }

  /** Starts the actors and waits until each has its warm workers ready. */
  static async create(options: SandboxActorPoolOptions = {}): Promise<SandboxActorPool> {
    checkPoolOptions(options);
    const pool = new SandboxActorPool(options);
    const n = options.actors ?? 2;
    await Promise.all(Array.from({ length: n }, () => pool.addMember()));
    return pool;
  }

  run(request: RunCodeRequest | string): Promise<RunCodeResponse> {
    const body = typeof request === "string" ? { code: request, language: "python" } : request;
    try {
      normalizeRequest(body); // a bad request fails here, before it reaches an actor
    } catch (error) {
      return Promise.reject(error);
    }
    if (this.closed) return Promise.resolve(sandboxError("the sandbox actor pool is closed"));
    return new Promise((resolve) => {
      this.queue.push({ request: body, attempts: 0, resolve });
      if (this.live().length === 0 && this.adding === 0) {
        // every actor died and none is starting: start one if the pool replaces its dead, else say so
        if (this.options.replaceDead === false) this.failQueued(ALL_DEAD);
        else this.replace();
      }
      void this.pump();
    });
  }

  /** Runs every request; answers in the same order. */
  runBatch(requests: (RunCodeRequest | string)[]): Promise<RunCodeResponse[]> {
    return Promise.all(requests.map((r) => this.run(r)));
  }

  /** Process ids of the live actors (for tests that kill one). */
  async actorPids(): Promise<number[]> {
    return Promise.all(this.live().map((m) => m.handle.pid() as PromiseLike<number>));
  }

  async health(): Promise<SandboxHealth[]> {
    return Promise.all(this.live().map((m) => m.handle.health() as PromiseLike<SandboxHealth>));
  }

  get size(): number {
    return this.live().length;
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const job of this.queue.splice(0)) job.resolve(sandboxError("the sandbox actor pool closed"));
    await Promise.all(
      this.live().map(async (m) => {
        try {
          await m.handle.close();
        } catch {
          // already gone
        }
        kill(m.handle);
      }),
    );
    this.members = [];
  }

  private live(): Member[] {
    return this.members.filter((m) => !m.dead);
  }

  private async addMember(): Promise<void> {
    const handle = SandboxActorClass.options({
      numCpus: this.options.numCpus ?? 0,
      resources: this.options.resources ?? {},
    }).remote({ ...this.options.executor, workers: this.options.workersPerActor ?? 1 });
    this.adding++;
    try {
      await handle.ready();
      await handle.health(); // the warm interpreters are up
    } catch (error) {
      kill(handle); // an actor whose sandbox did not start serves nobody
      throw error;
    } finally {
      this.adding--;
    }
    const member: Member = { handle, inFlight: 0, dead: false, id: this.nextId++ };
    if (this.closed) {
      kill(handle);
      return;
    }
    this.members.push(member);
    void this.pump();
  }

  private capacity(): number {
    return this.options.maxInFlightPerActor ?? 2 * (this.options.workersPerActor ?? 1);
  }

  private pick(): Member | undefined {
    let best: Member | undefined;
    for (const m of this.live()) {
      if (m.inFlight >= this.capacity()) continue;
      if (!best || m.inFlight < best.inFlight) best = m;
    }
    return best;
  }

  private async pump(): Promise<void> {
    if (this.pumping) return;
    this.pumping = true;
    try {
      while (this.queue.length > 0) {
        const member = this.pick();
        if (!member) return;
        if (this.bucket && !this.bucket.tryTake()) {
          await this.bucket.take();
        }
        const job = this.queue.shift();
        if (!job) return;
        const target = member.dead ? this.pick() : member;
        if (!target) {
          this.queue.unshift(job);
          return;
        }
        this.dispatch(target, job);
      }
    } finally {
      this.pumping = false;
    }
  }

  private dispatch(member: Member, job: Job): void {
    member.inFlight++;
    job.attempts++;
    Promise.resolve(member.handle.run(job.request) as PromiseLike<RunCodeResponse>).then(
      (response) => {
        member.inFlight--;
        job.resolve(response);
        void this.pump();
      },
      (error: Error) => {
        member.inFlight--;
        if (error?.name === "ActorDiedError") {
          this.onDeath(member);
          if (job.attempts < (this.options.maxAttempts ?? 3) && !this.closed) {
            this.retried++;
            this.queue.unshift(job);
            if (this.options.replaceDead === false && this.live().length === 0) this.failQueued(ALL_DEAD);
          } else {
            job.resolve(
              sandboxError(`sandbox actor died ${job.attempts} time(s) under this request: ${error.message}`),
            );
          }
        } else {
          job.resolve(sandboxError(error?.message ?? String(error)));
        }
        void this.pump();
      },
    );
  }

  private onDeath(member: Member): void {
    if (member.dead) return;
    member.dead = true;
    this.members = this.members.filter((m) => m !== member);
    if (this.closed || this.options.replaceDead === false) return;
    this.replaced++;
    this.replace();
  }

  /** Starts a replacement actor. The pool keeps working with fewer meanwhile, or if it fails; with
   * none left, the requests waiting are answered SandboxError with the reason (a later request or
   * death tries again). */
  private replace(): void {
    this.addMember().catch((error: Error) => {
      if (this.live().length === 0 && this.adding === 0)
        this.failQueued(
          `every sandbox actor of this pool has died and a replacement failed: ${error.message}`,
        );
    });
  }

  private failQueued(message: string): void {
    for (const job of this.queue.splice(0)) job.resolve(sandboxError(message));
  }
}
