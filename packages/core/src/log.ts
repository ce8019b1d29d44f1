/** Minimal logger: one line per event on stderr, tagged with the process role. Quiet unless TORL_LOG says so for debug. */
let role = "driver";

export function setLogRole(r: string): void {
  role = r;
}

export function logWarn(message: string): void {
  process.stderr.write(`[torl ${role} ${process.pid}] ${message}\n`);
}

export function logDebug(message: string): void {
  if (process.env.TORL_LOG === "debug") process.stderr.write(`[torl ${role} ${process.pid}] ${message}\n`);
}
