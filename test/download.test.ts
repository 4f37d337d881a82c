// io/download.ts's bounds outside the body (issue 36), against servers on 127.0.0.1 in this
// process (download is asynchronous): response headers sent a byte at a time end in one error
// within STITCHLAB_DOWNLOAD_HEADER_TIMEOUT, at the first hop or after a redirect (the idle timeout
// restarts with every byte, and the minimum rate starts with the body); a redirect's or an
// error's endless body is not drained but its connection closed, so it keeps neither the socket
// nor the process. A body of unknown size that never ends is shown as it goes (the display's
// hook sees the bytes grow) until its cap stops it, a model's file at MODEL_FILE_MAX_MB unless
// STITCHLAB_DOWNLOAD_MAX_MB says otherwise (issue 51). No assertion reads the clock: a loaded
// machine is slow, not wrong; the errors say which bound fired. test/hub.test.ts has the rest of
// the download path (the hubs' layouts, hashes, the body's cap and rate).
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import {
  type DownloadDisplay,
  DownloadError,
  type DownloadStart,
  download,
  downloadLimits,
  MODEL_FILE_MAX_MB,
  PROGRESS_LOG_EVERY_MS,
  progressLine,
} from "../io/download.js";

const tmp = mkdtempSync(join(tmpdir(), "stitchlab-download-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** The files in dir (temporary .part files included), or none. */
const filesIn = (dir: string) => (existsSync(dir) ? readdirSync(dir) : []);

/** Starts server on a free port of 127.0.0.1; returns its base URL and a close that ends every connection. */
async function listen(server: net.Server): Promise<{ base: string; close: () => Promise<void> }> {
  const sockets = new Set<net.Socket>();
  server.on("connection", (s: net.Socket) => {
    sockets.add(s);
    s.on("close", () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return {
    base: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

test("response headers trickled a byte at a time end in one error within STITCHLAB_DOWNLOAD_HEADER_TIMEOUT, at any hop, and nothing is kept", {
  timeout: 5_000,
}, async () => {
  // A raw server: /redirect answers at once with a redirect to /slow; anything else gets its
  // status line and then one byte of a header every 20 ms, forever (no idle timeout fires).
  const trickles = new Set<NodeJS.Timeout>();
  const server = net.createServer((socket) => {
    socket.once("data", (d: Buffer) => {
      if (d.toString().startsWith("GET /redirect ")) {
        socket.end("HTTP/1.1 302 Found\r\nLocation: /slow\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        return;
      }
      socket.write("HTTP/1.1 200 OK\r\nX-Slow: ");
      const t = setInterval(() => socket.write("a"), 20);
      trickles.add(t);
      socket.on("close", () => clearInterval(t));
      socket.on("error", () => {});
    });
  });
  const { base, close } = await listen(server);
  try {
    const dir = join(tmp, "headers");
    // The message names the bound that fired (the header timeout, not the idle timeout or the
    // test's own timeout), which is what a bound on the time taken meant to show.
    const refused = async (url: string, job: { headerTimeoutMs?: number }, why: RegExp) => {
      await assert.rejects(download({ url, dest: join(dir, "model.bin"), ...job }), (e: Error) => {
        assert.ok(e instanceof DownloadError, e.stack);
        assert.equal(e.kind, "failed");
        assert.match(e.message, why);
        return true;
      });
      assert.deepEqual(filesIn(dir), [], "no partial file");
    };
    const was = process.env.STITCHLAB_DOWNLOAD_HEADER_TIMEOUT;
    process.env.STITCHLAB_DOWNLOAD_HEADER_TIMEOUT = "0.4";
    try {
      await refused(
        `${base}/slow`,
        {},
        new RegExp(
          `^${base}/slow: no response headers within 0\\.4 s of the request \\(STITCHLAB_DOWNLOAD_HEADER_TIMEOUT\\): stopped; nothing was kept$`,
        ),
      );
      // After a redirect: the hop that trickles is named.
      await refused(
        `${base}/redirect`,
        {},
        new RegExp(`^${base}/redirect: no response headers from ${base}/slow within 0\\.4 s of the request`),
      );
      // A job's own bound wins over the environment's.
      await refused(`${base}/slow`, { headerTimeoutMs: 200 }, /within 0\.2 s of the request/);
      process.env.STITCHLAB_DOWNLOAD_HEADER_TIMEOUT = "soon";
      assert.throws(
        () => downloadLimits(),
        /STITCHLAB_DOWNLOAD_HEADER_TIMEOUT is 'soon': expected a number of seconds > 0/,
      );
    } finally {
      if (was === undefined) delete process.env.STITCHLAB_DOWNLOAD_HEADER_TIMEOUT;
      else process.env.STITCHLAB_DOWNLOAD_HEADER_TIMEOUT = was;
    }
    assert.equal(downloadLimits({}).headerTimeoutMs, 60_000, "60 s by default");
  } finally {
    for (const t of trickles) clearInterval(t);
    await close();
  }
});

test("a redirect's or an error's endless body is not drained: its connection is closed at once", {
  timeout: 5_000,
}, async () => {
  // Each endless answer records that its connection closed; the file itself is small and whole.
  const body = Buffer.from("the file's bytes\n");
  const closed = new Set<string>();
  const endless = (
    req: http.IncomingMessage,
    res: http.ServerResponse,
    status: number,
    headers: http.OutgoingHttpHeaders,
  ) => {
    res.writeHead(status, headers); // no Content-Length: chunked, never ending
    const chunk = Buffer.alloc(1 << 14, 7);
    let open = true;
    res.on("close", () => {
      open = false;
      closed.add(req.url ?? "");
    });
    const more = () => {
      if (open) res.write(chunk, () => setImmediate(more));
    };
    more();
  };
  const server = http.createServer((req, res) => {
    if (req.url === "/redirect") endless(req, res, 302, { Location: "/file" });
    else if (req.url === "/broken") endless(req, res, 500, {});
    else {
      res.writeHead(200, { "Content-Length": String(body.length) });
      res.end(body);
    }
  });
  const { base, close } = await listen(server);
  try {
    const dir = join(tmp, "bodies");
    // The connection closed is the behaviour (an endless body drained would never close it); how
    // soon after is the machine's load, not the code's, so only the closing is asserted.
    const closes = async (route: string) => {
      for (let i = 0; i < 200 && !closed.has(route); i++) await new Promise((r) => setTimeout(r, 10));
      assert.ok(closed.has(route), `${route}'s endless body still flows 2 s after the download ended`);
    };
    // A redirect with an endless body: followed, the file downloaded whole, and the redirect's connection closed.
    const r = await download({ url: `${base}/redirect`, dest: join(dir, "file.bin") });
    assert.equal(r.bytes, body.length);
    assert.equal(r.from, `${base}/file`);
    await closes("/redirect");
    // An error with an endless body: one error, and its connection closed.
    await assert.rejects(download({ url: `${base}/broken`, dest: join(dir, "broken.bin") }), (e: Error) => {
      assert.ok(e instanceof DownloadError, e.stack);
      assert.match(e.message, new RegExp(`^${base}/broken: HTTP 500`));
      return true;
    });
    await closes("/broken");
    assert.deepEqual(filesIn(dir), ["file.bin"], "no partial file");
  } finally {
    await close();
  }
});

/** A display that records what a download told it (the progress hook), and writes nothing. */
function recorder() {
  const seen: { start?: DownloadStart; ticks: number[]; stopped: boolean } = { ticks: [], stopped: false };
  const display = (start: DownloadStart): DownloadDisplay => {
    seen.start = start;
    return {
      tick: (got) => seen.ticks.push(got),
      received: () => {},
      stopped: () => {
        seen.stopped = true;
      },
      done: () => {},
    };
  };
  return { seen, display };
}

/** Whether each of xs is larger than the one before. */
const growing = (xs: number[]) => xs.every((x, i) => i === 0 || x > (xs[i - 1] as number));

test("a body of unknown size that never ends is shown as it goes, and its cap stops it: a model's file at MODEL_FILE_MAX_MB unless STITCHLAB_DOWNLOAD_MAX_MB says", {
  timeout: 20_000,
}, async () => {
  // No Content-Length, 64 kB chunks, never ending; /2mb drops its connection after 2 MB (a body
  // below the cap, without reading a gigabyte to reach the default one).
  const server = http.createServer((req, res) => {
    res.writeHead(200, {}); // no Content-Length: chunked
    const chunk = Buffer.alloc(1 << 16, 7);
    const until = req.url === "/2mb" ? 2e6 : Number.POSITIVE_INFINITY;
    let sent = 0;
    let open = true;
    res.on("close", () => {
      open = false;
    });
    const more = () => {
      if (!open) return;
      if (sent >= until) {
        res.socket?.destroy();
        return;
      }
      sent += chunk.length;
      res.write(chunk, () => setImmediate(more));
    };
    more();
  });
  const { base, close } = await listen(server);
  const dir = join(tmp, "unknown-size");
  const was = process.env.STITCHLAB_DOWNLOAD_MAX_MB;
  try {
    // The defaults: a model's file of unknown size stops at 1000 MB, any other at 4096 MB; the
    // setting, where given, is the cap of both (so it raises a model's too).
    assert.equal(MODEL_FILE_MAX_MB, 1000);
    assert.equal(downloadLimits({}).modelMaxBytes, 1000e6);
    assert.equal(downloadLimits({}).maxBytes, 4096e6);
    assert.equal(downloadLimits({ STITCHLAB_DOWNLOAD_MAX_MB: "5000" }).modelMaxBytes, 5000e6);

    // Below the cap, with the defaults: the hook sees the bytes grow, and the cap the display is
    // started with is the model's for a model's file and the general one for another.
    delete process.env.STITCHLAB_DOWNLOAD_MAX_MB;
    for (const [model, cap] of [
      [true, 1000e6],
      [false, 4096e6],
    ] as const) {
      const { seen, display } = recorder();
      await assert.rejects(
        download({ url: `${base}/2mb`, dest: join(dir, "model.bin"), model }, display),
        (e: Error) => {
          assert.ok(e instanceof DownloadError, e.stack);
          assert.match(e.message, /: the connection dropped after \d+ of \? bytes/);
          return true;
        },
      );
      assert.deepEqual(seen.start, { label: `${base}/2mb`, total: undefined, cap });
      assert.ok(seen.ticks.length > 10, `${seen.ticks.length} progress calls for 2 MB`);
      assert.ok(growing(seen.ticks), "the byte counts grow");
      assert.ok((seen.ticks.at(-1) as number) > 1e6, `${seen.ticks.at(-1)} bytes shown of 2 MB`);
      assert.ok(seen.stopped);
      assert.deepEqual(filesIn(dir), [], "no partial file");
    }

    // The endless body: shown as it grows, then stopped at the cap, by one error that names the
    // setting that raises it. The setting at 1 MB:
    process.env.STITCHLAB_DOWNLOAD_MAX_MB = "1";
    const { seen, display } = recorder();
    await assert.rejects(
      download({ url: `${base}/endless`, dest: join(dir, "model.bin"), model: true }, display),
      (e: Error) => {
        assert.ok(e instanceof DownloadError, e.stack);
        assert.equal(
          e.message,
          `${base}/endless: more bytes than the cap of 1.0 MB (STITCHLAB_DOWNLOAD_MAX_MB) for a model's file whose size the server does not give: stopped; nothing was kept; set STITCHLAB_DOWNLOAD_MAX_MB (megabytes) above 1 to take a larger file`,
        );
        return true;
      },
    );
    assert.equal(seen.start?.cap, 1e6);
    assert.ok(seen.ticks.length > 5 && growing(seen.ticks), `progress: ${seen.ticks.join(", ")}`);
    assert.ok((seen.ticks.at(-1) as number) <= 1e6, "no byte past the cap is shown");
    assert.deepEqual(filesIn(dir), [], "no partial file");

    // The model's own cap (the default's path, at a size a test can reach) stops a model's file,
    // while the general cap (4096 MB) would let it run.
    delete process.env.STITCHLAB_DOWNLOAD_MAX_MB;
    await assert.rejects(
      download(
        { url: `${base}/endless`, dest: join(dir, "model.bin"), model: true, modelMaxBytes: 1.5e6 },
        recorder().display,
      ),
      /: more bytes than the cap of 1\.5 MB \(STITCHLAB_DOWNLOAD_MAX_MB\) for a model's file whose size the server does not give: stopped; nothing was kept; set STITCHLAB_DOWNLOAD_MAX_MB \(megabytes\) above 2 to take a larger file$/,
    );
    assert.deepEqual(filesIn(dir), [], "no partial file");
  } finally {
    if (was === undefined) delete process.env.STITCHLAB_DOWNLOAD_MAX_MB;
    else process.env.STITCHLAB_DOWNLOAD_MAX_MB = was;
    await close();
  }
});

test("the progress line: redrawn in place on a terminal; in a log, a line at the start and at most one every PROGRESS_LOG_EVERY_MS with the bytes so far and the rate", () => {
  // A clock the test moves: the lines depend on the time the display reads, not on this machine's.
  let now = 0;
  const written: string[] = [];
  const run = (tty: boolean) => {
    written.length = 0;
    now = 0;
    const show = progressLine(
      { label: "hf-hub:org/m model.safetensors", total: undefined, cap: 1000e6 },
      { tty, write: (t) => written.push(t), now: () => now },
    );
    // 12 s of bytes, a chunk every 100 ms at 1 MB/s.
    for (let i = 1; i <= 120; i++) {
      now = i * 100;
      show.tick(i * 1e5);
    }
    show.stopped();
  };
  run(false);
  assert.equal(written[0], "downloading hf-hub:org/m model.safetensors (size not given; stops at 1000.0 MB)\n");
  const logged = written.slice(1);
  assert.equal(logged.length, Math.floor(12_000 / PROGRESS_LOG_EVERY_MS), logged.join(""));
  assert.equal(
    logged[0],
    "downloading hf-hub:org/m model.safetensors: 5.0 MB so far (size not given; stops at 1000.0 MB), 1.0 MB/s\n",
  );
  run(true);
  assert.ok(written.length > 50, `${written.length} redraws in 12 s`);
  assert.ok(
    written.slice(0, -1).every((w) => w.startsWith("\r") && w.endsWith("\x1b[K")),
    "redrawn in place",
  );
  assert.equal(written.at(-1), "\n", "the line is ended when the download stops");
});
