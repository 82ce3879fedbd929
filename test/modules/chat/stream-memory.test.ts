import { afterAll, expect, test } from "bun:test";
import { heapStats } from "bun:jsc";
import { join } from "node:path";
import { freePort, waitForPort } from "../../../bench/ports";
import { fakeModel, repositoryRoot, withSluice } from "../../helpers";

// The benchmarks' fake upstream, in a process of its own: the requests it holds while it streams are not counted with
// the server's. 200 tokens 20 ms apart: each stream stays open for about 4 s.
const upstreamPort = freePort();
const upstream = Bun.spawn([process.execPath, join(repositoryRoot, "bench/fake-upstream.ts"), String(upstreamPort), "200", "20"], {
  stdout: "ignore",
  stderr: "ignore",
});
afterAll(() => upstream.kill());

/** Request objects alive after a full collection (a server's routes get BunRequest, its fetch handler Request). */
function liveRequests(): number {
  Bun.gc(true);
  const counts = heapStats().objectTypeCounts;
  return (counts.BunRequest ?? 0) + (counts.Request ?? 0);
}

test("the count sees server-side requests that are kept alive", async () => {
  // Guards the test below: if the runtime named its request objects otherwise, that test could not fail.
  const kept: Request[] = [];
  const keep = (request: Request) => {
    kept.push(request);
    return new Response("ok");
  };
  const server = Bun.serve({ port: 0, routes: { "/": keep }, fetch: keep });
  try {
    for (let index = 0; index < 5; index++) await (await fetch(server.url)).text();
    // An absolute count, not a difference: bun test runs every file in one process, and requests other files left for
    // the collector may be freed between two counts (CI saw a difference under 5 that way).
    expect(liveRequests()).toBeGreaterThanOrEqual(5);
  } finally {
    server.stop(true);
  }
  expect(kept.length).toBe(5);
});

test("an open stream does not keep its HTTP request alive (its headers, URL and body) while it streams", async () => {
  await waitForPort(upstreamPort);
  const models = [fakeModel(`http://127.0.0.1:${upstreamPort}/v1`, "paced", "bench-upstream")];
  await withSluice({ models: models as never, plans: [{ id: "default", models: ["*"], tokens_per_5h: 100_000_000 }] }, async (sluice) => {
    const streams = 40;
    const before = liveRequests();
    const readers: { cancel(): Promise<void> }[] = [];
    for (let index = 0; index < streams; index++) {
      const response = await sluice.post("/v1/chat/completions", { model: "paced", stream: true, messages: [{ role: "user", content: "hi" }] });
      expect(response.status).toBe(200);
      const reader = (response.body as ReadableStream<Uint8Array>).getReader();
      expect((await reader.read()).done).toBe(false);
      readers.push(reader);
    }
    // Every stream is still open (about 4 s each): each holds its permit, none its request.
    expect(sluice.server.admission.inFlight()).toBe(streams);
    expect(liveRequests() - before).toBeLessThan(streams / 4);
    for (const reader of readers) await reader.cancel();
  });
});
