import test from "ava";
import { type CliProgram, dispatch } from "../src/cli/dispatch.js";
import { type CliCommand, UsageError } from "../src/cli-command.js";

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
