import { SandboxExecutor, serveSandbox } from "./packages/sandbox/src/index.js";
const ex = await new SandboxExecutor({ workers: 1, log: (l) => console.error(l) }).start();
const srv = await serveSandbox(ex, { port: 0 });
srv.server.on("clientError", (e, s) => { console.log("clientError", e.message, (e as any).code); s.destroy(); });
const big = Buffer.alloc((16 << 20) / 2 + 1).toString("base64");
const bodies = [{ code: "print(1)", files: Object.fromEntries(Array.from({ length: 200000 }, (_, i) => [`f${i}`, ""])) }, { code: "print(1)", files: { "a.bin": big, "b.bin": big } }, { code: "print(1)", files: { [`${"d/".repeat(600)}x`]: "" } }];
const t0 = Date.now();
for (const b of bodies) {
  try { const r = await fetch(`${srv.url}/run_code`, { method: "POST", body: JSON.stringify(b) }); console.log((Date.now() - t0) / 1000, r.status, (await r.text()).slice(0, 100)); } catch (e) { console.log((Date.now() - t0) / 1000, String((e as any).cause)); }
}
await srv.close(); await ex.close();
