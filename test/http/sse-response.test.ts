import { expect, test } from "bun:test";
import { type FrameSink, type StreamedAnswer, sseResponse } from "../../src/http/sse-response";

/** An answer that writes the given batches (waiting `pauseMs` before each), and logs what happens to it. */
class ScriptedAnswer implements StreamedAnswer {
  readonly log: string[] = [];

  constructor(
    private readonly batches: string[][],
    private readonly pauseMs = 0,
  ) {}

  async pump(sink: FrameSink): Promise<void> {
    this.log.push("pumped");
    for (const batch of this.batches) {
      if (this.pauseMs) await Bun.sleep(this.pauseMs);
      const flushed = sink.write(batch);
      if (flushed) await flushed;
    }
  }

  stop(): void {
    this.log.push("stopped");
  }
}

test("a client that leaves before the first byte (cancel without any pull): the upstream is aborted, then the answer stopped", async () => {
  const answer = new ScriptedAnswer([['data: {"n":1}\n\n']]);
  const log = answer.log;
  const ends: string[] = [];
  const response = sseResponse(answer, { upstream: { abort: () => log.push("upstream aborted") }, headers: {}, onEnd: () => ends.push("end") });
  // What Bun does when the client is gone before the response starts: cancel() on a stream never pulled.
  await (response.body as ReadableStream<Uint8Array>).cancel();
  expect(log).toEqual(["upstream aborted", "stopped"]);
  expect(ends).toEqual(["end"]);
});

test("a stream read to its end: every batch in order; pumped once, never stopped, ended once", async () => {
  const answer = new ScriptedAnswer([['data: {"n":1}\n\n'], ['data: {"n":2}\n\n', "data: [DONE]\n\n"]]);
  const ends: string[] = [];
  const response = sseResponse(answer, {
    upstream: { abort: () => answer.log.push("upstream aborted") },
    headers: { "x-request-id": "req_1" },
    onEnd: () => ends.push("end"),
  });
  expect(response.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
  expect(response.headers.get("x-request-id")).toBe("req_1");
  expect(await response.text()).toBe('data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n');
  expect(answer.log).toEqual(["pumped"]);
  expect(ends).toEqual(["end"]);
});

test("a client that leaves mid-stream: the upstream aborted and the answer stopped, once, and nothing written after", async () => {
  const server = Bun.serve({
    port: 0,
    fetch: () => sseResponse(answer, { upstream: { abort: () => answer.log.push("upstream aborted") }, headers: {}, onEnd: () => ends.push("end") }),
  });
  const answer = new ScriptedAnswer(
    Array.from({ length: 50 }, (_, index) => [`data: ${index}\n\n`]),
    20,
  );
  const ends: string[] = [];
  const response = await fetch(server.url);
  const reader = (response.body as ReadableStream<Uint8Array>).getReader();
  expect(new TextDecoder().decode((await reader.read()).value)).toBe("data: 0\n\n");
  await reader.cancel();
  for (let waited = 0; waited < 2000 && !answer.log.includes("stopped"); waited += 10) await Bun.sleep(10);
  await Bun.sleep(100);
  expect(answer.log).toEqual(["pumped", "upstream aborted", "stopped"]);
  expect(ends).toEqual(["end"]);
  server.stop(true);
});

test("a pump that fails ends the stream with the error, and ends it once", async () => {
  const answer: StreamedAnswer = {
    async pump(sink) {
      sink.write(["data: first\n\n"]);
      throw new Error("the relay broke");
    },
    stop() {},
  };
  const ends: string[] = [];
  const response = sseResponse(answer, { upstream: { abort: () => {} }, headers: {}, onEnd: () => ends.push("end") });
  await expect(response.text()).rejects.toThrow("the relay broke");
  expect(ends).toEqual(["end"]);
});

test("a heartbeat frame goes out whenever the answer stays silent for its interval, and stops with the stream", async () => {
  const answer: StreamedAnswer = {
    async pump(sink) {
      sink.write(["data: first\n\n"]);
      await Bun.sleep(130);
      sink.write(["data: last\n\n"]);
    },
    stop() {},
  };
  const response = sseResponse(answer, { upstream: { abort: () => {} }, headers: {}, onEnd: () => {}, heartbeat: { frame: ": ping\n\n", intervalMs: 40 } });
  const text = await response.text();
  expect(text.startsWith("data: first\n\n")).toBe(true);
  expect(text.endsWith("data: last\n\n")).toBe(true);
  expect((text.match(/: ping/g) ?? []).length).toBeGreaterThanOrEqual(1);
});

test("each batch is emptied once written, so that its producer may fill the same array again", async () => {
  const batches = [['data: {"n":1}\n\n'], ['data: {"n":2}\n\n', "data: [DONE]\n\n"]];
  const response = sseResponse(new ScriptedAnswer(batches), { upstream: { abort: () => {} }, headers: {}, onEnd: () => {} });
  expect(await response.text()).toBe('data: {"n":1}\n\ndata: {"n":2}\n\ndata: [DONE]\n\n');
  expect(batches).toEqual([[], []]);
});
