// The Python PyTorch side of a benchmark, as a child process answering one JSON command per
// line (engine_torch.py --serve). Driving it step by step lets the caller alternate its own
// iterations with PyTorch's, so that both see the same load on a shared machine.
import { type ChildProcess, spawn } from "node:child_process";
import { createInterface } from "node:readline";

/** The interpreter: STITCHLAB_PYTHON, else Debian's /usr/bin/python3 (which has PyTorch). */
export const python = (): string => process.env.STITCHLAB_PYTHON || "/usr/bin/python3";

export class PyTorchPeer {
  readonly #child: ChildProcess;
  readonly #lines: AsyncIterator<string>;
  readonly #what: string;
  /** Settles with the reason the process ended: its exit code, or the error of starting it. */
  readonly #ended: Promise<string>;

  private constructor(script: string, args: string[]) {
    this.#what = `${python()} ${script} ${args.join(" ")}`;
    // No bench/__pycache__ from the scripts' imports of each other (train_torch.py).
    this.#child = spawn(python(), [script, ...args], {
      stdio: ["pipe", "pipe", "inherit"],
      env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1" },
    });
    this.#ended = new Promise((resolve) => {
      this.#child.once("error", (e) => resolve(e.message));
      this.#child.once("exit", (code, signal) => resolve(`it exited (${signal ?? `code ${code}`})`));
    });
    // Writing to a process that died fails with EPIPE; the next read reports why it died.
    this.#child.stdin!.on("error", () => {});
    this.#lines = createInterface({ input: this.#child.stdout! })[Symbol.asyncIterator]();
  }

  /** Starts the script and waits for its greeting (the first line it prints). */
  static async start(script: string, args: string[]): Promise<{ peer: PyTorchPeer; hello: unknown }> {
    const peer = new PyTorchPeer(script, args);
    return { peer, hello: await peer.#read() };
  }

  async #read(): Promise<unknown> {
    const next = await this.#lines.next();
    if (next.done) {
      throw new Error(
        `PyTorch side failed: ${this.#what}: ${await this.#ended}. ` +
          "It needs a Python with PyTorch; set STITCHLAB_PYTHON to choose another interpreter.",
      );
    }
    return JSON.parse(next.value);
  }

  /** Sends one command and returns its answer. */
  async request(command: Record<string, unknown>): Promise<unknown> {
    this.#child.stdin!.write(`${JSON.stringify(command)}\n`);
    return this.#read();
  }

  /** Closes its stdin, which ends its command loop, and waits for it to exit. */
  async close(): Promise<void> {
    this.#child.stdin!.end();
    await this.#ended;
  }
}
