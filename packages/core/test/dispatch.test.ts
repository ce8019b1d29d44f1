import test from "ava";
import { type CliCommand, UsageError } from "../src/cli/command.js";
import { defineBench } from "../src/cli/commands.js";
import { type CliProgram, dispatch } from "../src/cli/dispatch.js";
import { defineCommand } from "../src/index.js";

function command(summary: string, ran: string[][]): CliCommand {
  return {
    summary,
    usage: `usage: ${summary}`,
    async run(args) {
      ran.push(args);
      return 0;
    },
  };
}

/** Runs dispatch with console.log/error captured. */
async function capture(program: CliProgram, argv: string[]) {
  const out: string[] = [];
  const err: string[] = [];
  const log = console.log;
  const error = console.error;
  console.log = (s: string) => out.push(s);
  console.error = (s: string) => err.push(s);
  try {
    const code = await dispatch(program, argv);
    return { code, out: out.join("\n"), err: err.join("\n") };
  } finally {
    console.log = log;
    console.error = error;
  }
}

function program(ran: string[][], withMain: boolean): CliProgram {
  return {
    name: "torl",
    version: "9.9.9",
    commands: {
      status: async () => command("cluster status", ran),
      "bench actors": async () => command("actor bench", ran),
      "bench sandbox": async () => command("sandbox bench", ran),
    },
    main: withMain ? { loader: async () => command("main job", ran), usage: "torl [k=v ...]" } : undefined,
  };
}

test("a command and a group's sub-command get the arguments after their names", async (t) => {
  const ran: string[][] = [];
  t.is((await capture(program(ran, false), ["status", "--address", "h:1"])).code, 0);
  t.is((await capture(program(ran, false), ["bench", "sandbox", "--json"])).code, 0);
  t.deepEqual(ran, [["--address", "h:1"], ["--json"]]);
});

test("--version prints the program's version; --help lists every registered command", async (t) => {
  const ran: string[][] = [];
  t.is((await capture(program(ran, false), ["--version"])).out, "9.9.9");
  const help = await capture(program(ran, false), ["--help"]);
  t.regex(help.out, /^ {2}status +cluster status$/m);
  t.regex(help.out, /^ {2}bench sandbox +sandbox bench$/m);
  t.deepEqual(ran, []);
});

test("with no main job, no arguments print the help and exit 2, and k=v is an unknown command", async (t) => {
  const ran: string[][] = [];
  const none = await capture(program(ran, false), []);
  t.is(none.code, 2);
  t.regex(none.err, /usage: torl <command>/);
  const kv = await capture(program(ran, false), ["a.b=1"]);
  t.is(kv.code, 2);
  t.regex(kv.err, /unknown command 'a\.b=1' \(see torl --help\)/);
  t.deepEqual(ran, []);
});

test("a recipe's main job runs with no command or with k=v overrides", async (t) => {
  const ran: string[][] = [];
  t.is((await capture(program(ran, true), [])).code, 0);
  t.is((await capture(program(ran, true), ["a.b=1"])).code, 0);
  t.deepEqual(ran, [[], ["a.b=1"]]);
});

test("an unknown sub-command names the group's choices", async (t) => {
  const r = await capture(program([], false), ["bench", "gpu"]);
  t.is(r.code, 2);
  t.regex(r.err, /unknown bench command 'gpu'; one of: actors, sandbox \(see torl bench --help\)/);
});

// serial: capture() swaps console.log for the whole process
test.serial(
  "usage, summaries and errors name the program as it was invoked (torl installed, pnpm torl in the repository)",
  async (t) => {
    const written: CliCommand = {
      summary: "see pnpm torl data tiny",
      usage: "usage: pnpm torl make --out DIR\n  pnpm torl make --out x   # an example",
      async run() {
        throw new UsageError("--out is required (pnpm torl make --help)");
      },
    };
    const as = (name: string): CliProgram => ({
      name,
      version: "1",
      commands: { make: async () => written },
    });
    const installed = await capture(as("torl"), ["make", "--help"]);
    t.is(installed.out, "usage: torl make --out DIR\n  torl make --out x   # an example");
    t.regex((await capture(as("torl"), ["--help"])).out, /^ {2}make +see torl data tiny$/m);
    const failed = await capture(as("torl"), ["make"]);
    t.is(failed.code, 2);
    t.is(failed.err, "error: --out is required (torl make --help) (see torl make --help)");
    t.is((await capture(as("pnpm torl"), ["make", "--help"])).out, written.usage);
  },
);

// The command helpers every package's commands are written with: defineCommand (flags parsed and
// checked before the run) and defineBench (--json, the figures as the last line).

const make = (ran: unknown[]) =>
  defineCommand({
    summary: "make things",
    usage: "usage: torl make --out DIR [--n N] [--force] NAME...",
    flags: { out: { type: "string" }, n: { type: "integer", min: 1 }, force: { type: "boolean" } },
    positionals: true,
    run(flags, positionals) {
      ran.push({ flags, positionals });
      if (flags.n === 7) return 3;
    },
  });

const registry = (commands: CliProgram["commands"]): CliProgram => ({ name: "torl", version: "1", commands });

test.serial(
  "defineCommand: the run gets the parsed, typed flags and the positionals; no exit code is 0",
  async (t) => {
    const ran: unknown[] = [];
    const p = registry({ make: async () => make(ran) });
    t.is((await capture(p, ["make", "--out", "d", "--n=2", "a", "b"])).code, 0);
    t.is((await capture(p, ["make", "--n", "7"])).code, 3, "the exit code the run returns");
    t.deepEqual(ran, [
      { flags: { out: "d", n: 2 }, positionals: ["a", "b"] },
      { flags: { n: 7 }, positionals: [] },
    ]);
  },
);

test.serial(
  "defineCommand: a bad flag exits 2 with one error line naming it, before the run; --help runs nothing",
  async (t) => {
    const ran: unknown[] = [];
    const p = registry({ make: async () => make(ran) });
    for (const [argv, message] of [
      [["make", "--bogus"], "error: unknown flag --bogus (see torl make --help)"],
      [["make", "--n", "0"], "error: --n must be an integer >= 1, got '0' (see torl make --help)"],
      [
        ["make", "--out"],
        "error: --out needs a value (write --out VALUE or --out=VALUE) (see torl make --help)",
      ],
    ] as const) {
      const r = await capture(p, [...argv]);
      t.is(r.code, 2, argv.join(" "));
      t.is(r.err, message);
    }
    const help = await capture(p, ["make", "--help"]);
    t.is(help.code, 0);
    t.is(help.out, "usage: torl make --out DIR [--n N] [--force] NAME...");
    t.deepEqual(ran, []);
  },
);

test.serial("defineCommand: a positional is refused unless the command takes them", async (t) => {
  const stop = defineCommand({ summary: "s", usage: "u", flags: { force: { type: "boolean" } }, run() {} });
  const r = await capture(registry({ stop: async () => stop }), ["stop", "now"]);
  t.is(r.code, 2);
  t.is(r.err, "error: unexpected argument 'now' (see torl stop --help)");
});

test.serial(
  "defineBench: --json prints the figures as one JSON object, the last line, after what show prints",
  async (t) => {
    const bench = defineBench({
      summary: "b",
      usage: "u",
      flags: { seconds: { type: "number", min: 0.1 } },
      async measure(flags) {
        console.log("measuring ...");
        return { per_s: 10 * (flags.seconds ?? 1), failed: flags.seconds === 9 };
      },
      show(result, flags) {
        console.log(`per_s ${result.per_s}${flags.json ? " (json)" : ""}`);
      },
      exitCode: (result) => (result.failed ? 1 : 0),
    });
    const p = registry({ "bench b": async () => bench });
    const plain = await capture(p, ["bench", "b", "--seconds", "2"]);
    t.deepEqual(plain, { code: 0, out: "measuring ...\nper_s 20", err: "" });
    const json = await capture(p, ["bench", "b", "--json"]);
    t.is(json.out, 'measuring ...\nper_s 10 (json)\n{"per_s":10,"failed":false}');
    t.is((await capture(p, ["bench", "b", "--seconds", "9"])).code, 1, "exitCode decides the exit code");
    const bad = await capture(p, ["bench", "b", "--seconds", "0"]);
    t.is(bad.code, 2);
    t.is(bad.out, "", "nothing is measured on a bad flag");
  },
);

test.serial(
  "defineBench: without show, a table of the figures unless --json; toJson picks what --json prints",
  async (t) => {
    const bench = defineBench({ summary: "b", usage: "u", flags: {}, measure: async () => ({ a_per_s: 5 }) });
    const p = registry({ "bench b": async () => bench });
    const table = await capture(p, ["bench", "b"]);
    t.is(table.code, 0);
    t.regex(table.out, /a_per_s.*5/s);
    t.notRegex(table.out, /\{"a_per_s"/);
    t.is((await capture(p, ["bench", "b", "--json"])).out, '{"a_per_s":5}');
    const some = defineBench({
      summary: "b",
      usage: "u",
      flags: {},
      measure: async () => ({ figures: { a_per_s: 5 }, rows: ["a table row"] }),
      show: (result, flags) => flags.json || console.log(result.rows.join("\n")),
      toJson: (result) => result.figures,
    });
    const q = registry({ "bench some": async () => some });
    t.is((await capture(q, ["bench", "some"])).out, "a table row");
    t.is(
      (await capture(q, ["bench", "some", "--json"])).out,
      '{"a_per_s":5}',
      "toJson picks what --json prints",
    );
  },
);
