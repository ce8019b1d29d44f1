/** Runs `f` with console.log's lines going to `lines` instead of the terminal (a command's output in a test). */
export async function capturingConsole<T>(lines: string[], f: () => Promise<T>): Promise<T> {
  const log = console.log;
  console.log = (...a: unknown[]) => {
    lines.push(a.map(String).join(" "));
  };
  try {
    return await f();
  } finally {
    console.log = log;
  }
}
