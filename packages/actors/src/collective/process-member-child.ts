/** Entry of a ProcessMember child: runs `import(moduleUrl)[exportName](...args)` per message. */
interface Request {
  id: number;
  moduleUrl: string;
  exportName: string;
  args: unknown[];
}

process.on("message", async (req: Request) => {
  try {
    const mod = (await import(req.moduleUrl)) as Record<string, unknown>;
    const fn = mod[req.exportName];
    if (typeof fn !== "function") {
      throw new TypeError(`${req.moduleUrl} has no exported function "${req.exportName}"`);
    }
    const value = await (fn as (...a: unknown[]) => unknown)(...req.args);
    process.send?.({ id: req.id, ok: true, value });
  } catch (err) {
    const e = err instanceof Error ? err : new Error(String(err));
    process.send?.({ id: req.id, ok: false, error: { name: e.name, message: e.message, stack: e.stack } });
  }
});

// Exit when the parent disconnects (or dies), even if sockets are still open.
process.on("disconnect", () => {
  setTimeout(() => process.exit(0), 50).unref();
});
