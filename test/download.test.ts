// io/download.ts's bounds outside the body (issue 36), against servers on 127.0.0.1 in this
// process (download is asynchronous): response headers sent a byte at a time end in one error
// within STITCHLAB_DOWNLOAD_HEADER_TIMEOUT, at the first hop or after a redirect (the idle timeout
// restarts with every byte, and the minimum rate starts with the body); a redirect's or an
// error's endless body is not drained but its connection closed, so it keeps neither the socket
// nor the process. test/hub.test.ts has the rest of the download path (the hubs' layouts, hashes,
// the body's cap and rate).
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import * as http from "node:http";
import type { AddressInfo } from "node:net";
import * as net from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { DownloadError, download, downloadLimits } from "../io/download.js";

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
    const refused = async (url: string, job: { headerTimeoutMs?: number }, why: RegExp) => {
      const t0 = Date.now();
      await assert.rejects(download({ url, dest: join(dir, "model.bin"), ...job }), (e: Error) => {
        assert.ok(e instanceof DownloadError, e.stack);
        assert.equal(e.kind, "failed");
        assert.match(e.message, why);
        return true;
      });
      assert.deepEqual(filesIn(dir), [], "no partial file");
      return Date.now() - t0;
    };
    const was = process.env.STITCHLAB_DOWNLOAD_HEADER_TIMEOUT;
    process.env.STITCHLAB_DOWNLOAD_HEADER_TIMEOUT = "0.4";
    try {
      const took = await refused(
        `${base}/slow`,
        {},
        new RegExp(
          `^${base}/slow: no response headers within 0\\.4 s of the request \\(STITCHLAB_DOWNLOAD_HEADER_TIMEOUT\\): stopped; nothing was kept$`,
        ),
      );
      assert.ok(took >= 350 && took < 2000, `stopped after ${took} ms`);
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
  // Each endless answer records when its connection closed; the file itself is small and whole.
  const body = Buffer.from("the file's bytes\n");
  const closed: Record<string, number> = {};
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
      closed[req.url ?? ""] = Date.now();
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
    const within = async (route: string, from: number) => {
      for (let i = 0; i < 200 && closed[route] === undefined; i++) await new Promise((r) => setTimeout(r, 10));
      assert.ok(closed[route] !== undefined, `${route}'s endless body still flows 2 s after the download ended`);
      return closed[route] - from;
    };
    // A redirect with an endless body: followed, the file downloaded whole, and the redirect's connection closed.
    const r = await download({ url: `${base}/redirect`, dest: join(dir, "file.bin") });
    const done = Date.now();
    assert.equal(r.bytes, body.length);
    assert.equal(r.from, `${base}/file`);
    assert.ok((await within("/redirect", done)) < 1000);
    // An error with an endless body: one error, and its connection closed.
    await assert.rejects(download({ url: `${base}/broken`, dest: join(dir, "broken.bin") }), (e: Error) => {
      assert.ok(e instanceof DownloadError, e.stack);
      assert.match(e.message, new RegExp(`^${base}/broken: HTTP 500`));
      return true;
    });
    assert.ok((await within("/broken", Date.now())) < 1000);
    assert.deepEqual(filesIn(dir), ["file.bin"], "no partial file");
  } finally {
    await close();
  }
});
