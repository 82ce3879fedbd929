import { expect, test } from "bun:test";
import { sseResponse } from "../../src/http/sse-response";

/** A producer like ChatService's relay: its `finally` is where a request is settled. */
function producer(log: string[]) {
  return (async function* () {
    try {
      yield ['data: {"n":1}\n\n'];
      yield ['data: {"n":2}\n\n', "data: [DONE]\n\n"];
    } finally {
      log.push("settled");
    }
  })();
}

test("a client that leaves before the first byte (cancel without any pull) still gets its request settled", async () => {
  const log: string[] = [];
  const ends: string[] = [];
  const response = sseResponse(producer(log), { upstream: { abort: () => log.push("upstream aborted") }, headers: {}, onEnd: () => ends.push("end") });
  // What Bun does when the client is gone before the response starts: cancel() on a stream never pulled.
  await (response.body as ReadableStream<Uint8Array>).cancel();
  await Bun.sleep(0);
  expect(log).toEqual(["upstream aborted", "settled"]);
  expect(ends).toEqual(["end"]);
});

test("a stream read to its end: every batch in order; settled once, ended once", async () => {
  const log: string[] = [];
  const ends: string[] = [];
  const response = sseResponse(producer(log), {
    upstream: { abort: () => log.push("upstream aborted") },
    headers: { "x-request-id": "req_1" },
    onEnd: () => ends.push("end"),
  });
  expect(response.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
  expect(response.headers.get("x-request-id")).toBe("req_1");
  expect(await response.text()).toBe('data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n');
  expect(log).toEqual(["settled"]);
  expect(ends).toEqual(["end"]);
});

test("a heartbeat frame goes out whenever the producer stays silent for its interval, and stops with the stream", async () => {
  async function* silentThenDone() {
    yield ["data: first\n\n"];
    await Bun.sleep(130);
    yield ["data: last\n\n"];
  }
  const response = sseResponse(silentThenDone(), {
    upstream: { abort: () => {} },
    headers: {},
    onEnd: () => {},
    heartbeat: { frame: ": ping\n\n", intervalMs: 40 },
  });
  const text = await response.text();
  expect(text.startsWith("data: first\n\n")).toBe(true);
  expect(text.endsWith("data: last\n\n")).toBe(true);
  expect((text.match(/: ping/g) ?? []).length).toBeGreaterThanOrEqual(1);
});

test("each batch is emptied once written, so that a settled promise in the old generation keeps no frames alive", async () => {
  const batches = [['data: {"n":1}\n\n'], ['data: {"n":2}\n\n', "data: [DONE]\n\n"]];
  async function* relay() {
    for (const batch of batches) yield batch;
  }
  const response = sseResponse(relay(), { upstream: { abort: () => {} }, headers: {}, onEnd: () => {} });
  expect(await response.text()).toBe('data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n');
  expect(batches).toEqual([[], []]);
});
