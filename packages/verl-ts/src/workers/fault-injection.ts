/**
 * Fault injection for tests: TORL_TEST_EXIT_AT="method:call:rank[:code]" makes that rank's process exit
 * (with `code`, default 1) at the start of its call-th call of `method`, as a crash would.
 */
export class FaultInjector {
  private readonly calls = new Map<string, number>();

  constructor(private readonly rank: () => number) {}

  /** Counts a call of `method`, and exits here when the environment asks for it. */
  at(method: string): void {
    const spec = process.env.TORL_TEST_EXIT_AT;
    const n = (this.calls.get(method) ?? 0) + 1;
    this.calls.set(method, n);
    if (!spec) return;
    const [m, call, rank, code] = spec.split(":");
    if (m === method && Number(call) === n && Number(rank) === this.rank()) process.exit(Number(code ?? 1));
  }
}
