// The CLI's commands, each module imported only when its commands are asked for (issue 14): a
// command module imports the layers below it, so loading them all made `stitchlab --version`
// load stitchlab's whole code for one line of output. `--version` loads no command module;
// `stitchlab CMD ...` and `stitchlab help CMD` load CMD's; `--help`, no command or an unknown one
// load them all, so that the list (and "Did you mean ...?") is made from the commands' own
// definitions, as before. None of this starts libtorch: torch/ loads it on first use.
import { Command, Help, type Option } from "commander";
import { stitchlabVersion } from "../io/files.js";

type Register = (program: Command) => void;

export interface CommandModule {
  /** The top-level commands it registers. */
  names: string[];
  load: () => Promise<Register>;
}

/**
 * The commands in the order `--help` lists them, a reader's: the jobs that answer the question
 * (demo, compare, run an experiment file), then its single steps (train, iris, stitch, import),
 * then looking at models, data and runs (layers, data, status, report), then a worker's one task,
 * the experiment files' schema and the install (task, schema, doctor). A module registers its
 * commands together (run.ts: run, task, schema), so the list is ordered here, not by loading.
 */
export const COMMAND_ORDER = [
  "demo",
  "compare",
  "run",
  "train",
  "iris",
  "stitch",
  "import",
  "layers",
  "data",
  "status",
  "report",
  "task",
  "schema",
  "doctor",
];

/** Every command module, each registering its `names`. */
export const COMMAND_MODULES: CommandModule[] = [
  { names: ["demo"], load: async () => (await import("./demo.js")).registerDemoCommand },
  { names: ["compare"], load: async () => (await import("./compare.js")).registerCompareCommand },
  { names: ["run", "task", "schema"], load: async () => (await import("./run.js")).registerRunCommands },
  { names: ["train"], load: async () => (await import("./train.js")).registerTrainCommand },
  { names: ["iris"], load: async () => (await import("./iris.js")).registerIrisCommand },
  { names: ["stitch"], load: async () => (await import("./stitch.js")).registerStitchCommand },
  { names: ["import"], load: async () => (await import("./import.js")).registerImportCommand },
  { names: ["layers"], load: async () => (await import("./layers.js")).registerLayersCommand },
  { names: ["data"], load: async () => (await import("./data.js")).registerDataCommands },
  { names: ["status", "report"], load: async () => (await import("./status.js")).registerStatusCommands },
  { names: ["doctor"], load: async () => registerDoctorCommand },
];

/** The program's commands in COMMAND_ORDER (one not in it, commander's own help, keeps its place after them). */
function inCommandOrder(commands: Command[]): Command[] {
  const rank = (c: Command) => {
    const i = COMMAND_ORDER.indexOf(c.name());
    return i < 0 ? COMMAND_ORDER.length : i;
  };
  return [...commands].sort((x, y) => rank(x) - rank(y));
}

function registerDoctorCommand(program: Command): void {
  program
    .command("doctor")
    .description("check the install: libtorch version and build, device, threads, BLAS, and a matmul")
    .option("--json", "print the report as JSON")
    .action(async (opts: { json?: boolean }) => {
      const { doctor, formatDoctor } = await import("./doctor.js");
      const r = doctor();
      console.log(opts.json ? JSON.stringify(r, null, 2) : formatDoctor(r));
      if (!r.matmul.ok) process.exitCode = 1;
    });
}

/**
 * The command modules that the arguments after `node stitchlab` need. The program's own options
 * (-V, --version, -h, --help) take no value, so the first argument not starting with "-" is the
 * command (or `help`, followed by the command it is asked about).
 */
export function modulesFor(args: string[]): CommandModule[] {
  const i = args.findIndex((a) => !a.startsWith("-"));
  if (i < 0) {
    const asks = (...flags: string[]) => args.some((a) => flags.includes(a));
    return asks("-V", "--version") && !asks("-h", "--help") ? [] : COMMAND_MODULES;
  }
  const name = args[i] === "help" ? args.slice(i + 1).find((a) => !a.startsWith("-")) : args[i];
  const one = COMMAND_MODULES.find((m) => name !== undefined && m.names.includes(name));
  return one ? [one] : COMMAND_MODULES;
}

/** The stitchlab program, with the commands that `argv` (process.argv's form) needs. */
export async function buildProgram(argv: string[]): Promise<Command> {
  const program = new Command("stitchlab")
    .description("Invariance-aware model stitching: is network A functionally similar to network B?")
    .version(stitchlabVersion)
    // Required options say so in --help (commander lists them like the others); every command
    // made from the program inherits this.
    .configureHelp({
      optionDescription(this: Help, option: Option): string {
        const text = Help.prototype.optionDescription.call(this, option);
        return option.mandatory ? `${text} (required)` : text;
      },
      // The top-level list in a reader's order (a command's own subcommands, data's, as registered).
      visibleCommands(this: Help, cmd: Command): Command[] {
        const list = Help.prototype.visibleCommands.call(this, cmd);
        return cmd.parent ? list : inCommandOrder(list);
      },
    });
  for (const m of modulesFor(argv.slice(2))) (await m.load())(program);
  return program;
}
