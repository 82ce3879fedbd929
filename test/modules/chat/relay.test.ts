import { describe, expect, test } from "bun:test";
import { ClientGoneError } from "../../../src/errors";
import type { FrameSink } from "../../../src/http/sse-response";
import { UsageMeter } from "../../../src/modules/chat/meter";
import { StreamRelay } from "../../../src/modules/chat/relay";
import { chatFormat } from "../../../src/modules/chat/response";
import type { Ending, Run, RunSettler } from "../../../src/modules/chat/run";
import type { RequestRecord } from "../../../src/modules/observability/request-record";
import type { OutputMonitor } from "../../../src/modules/safety/rules";
import { UpstreamError } from "../../../src/errors";
import type { CompletionEvent, EventStream } from "../../../src/upstream/types";

/** The upstream's reads, answered one by one by the test; `released` once the relay lets it go. */
class ScriptedEvents implements EventStream {
  released = 0;
  private pending: { resolve: (result: IteratorResult<CompletionEvent[], void>) => void; reject: (error: unknown) => void } | undefined;

  next(): Promise<IteratorResult<CompletionEvent[], void>> {
    return new Promise((resolve, reject) => {
      this.pending = { resolve, reject };
    });
  }

  async return(): Promise<IteratorResult<CompletionEvent[], void>> {
    this.released++;
    return { done: true, value: undefined };
  }

  /** Answers the read waiting now (the relay asks for the next one as soon as the previous batch is written). */
  async answer(result: IteratorResult<CompletionEvent[], void> | Error): Promise<void> {
    for (let tries = 0; !this.pending && tries < 100; tries++) await Bun.sleep(1);
    const pending = this.pending;
    this.pending = undefined;
    if (!pending) throw new Error("the relay is not reading");
    if (result instanceof Error) pending.reject(result);
    else pending.resolve(result);
    await Bun.sleep(1);
  }
}

/** A settler that counts settles, as the chat service's would release the permit and write one ledger row. */
class CountingSettler implements RunSettler {
  readonly endings: Ending["outcome"][] = [];
  settleDelayMs = 0;

  async settle(run: Run, ending: Ending): Promise<void> {
    this.endings.push(ending.outcome);
    run.billed = { promptTokens: 5, completionTokens: 2, reasoningTokens: 0, cachedTokens: 0 };
    if (this.settleDelayMs) await Bun.sleep(this.settleDelayMs);
  }

  async fail(run: Run, error: unknown): Promise<void> {
    await this.settle(run, { outcome: error instanceof ClientGoneError ? "client_disconnected" : "upstream_error" });
  }

  clock(): number {
    return Date.now();
  }
}

/** A sink that keeps what it is given; `holdFlushes` makes each flush wait for the client, as back-pressure does. */
class CollectingSink implements FrameSink {
  readonly text: string[] = [];
  holdFlushes = false;

  write(batch: string[]): Promise<unknown> | undefined {
    this.text.push(batch.join(""));
    batch.length = 0;
    return this.holdFlushes ? new Promise(() => {}) : undefined;
  }
}

/** A relay over scripted upstream reads, with the settler that counts its settles and the sink that keeps its text. */
function relayOf(first: CompletionEvent[], monitor?: OutputMonitor) {
  const settler = new CountingSettler();
  const events = new ScriptedEvents();
  const sink = new CollectingSink();
  const finished: RequestRecord[] = [];
  const record = { requestId: "req_1", method: "POST", route: "/v1/chat/completions", startedAt: 0 } as RequestRecord;
  const run = {
    context: { record, finish: (done: RequestRecord) => finished.push(done) },
    meter: new UsageMeter(),
    startedAt: Date.now(),
  } as unknown as Run;
  const encoder = chatFormat.stream({ requestId: "req_1", created: 1, model: "m" }, { includeUsage: false, promptTokens: 5 });
  const relay = new StreamRelay(settler, run, encoder, events, { done: false, value: first }, monitor);
  return { relay, finished, settler, events, sink };
}

const delta = (content: string): CompletionEvent => ({ type: "delta", content });

/** The request was settled once, with `outcome`; the upstream was let go once; the request was logged once. */
function expectEndedOnce(settler: CountingSettler, events: ScriptedEvents, finished: RequestRecord[], outcome: Ending["outcome"]): void {
  expect(settler.endings).toEqual([outcome]);
  expect(events.released).toBe(1);
  expect(finished.length).toBe(1);
}

describe("StreamRelay", () => {
  test("an answer relayed to its end: every batch written, settled once as completed, released, logged once", async () => {
    const { relay, finished, settler, events, sink } = relayOf([delta("Hel")]);
    const pumping = relay.pump(sink);
    await events.answer({ done: false, value: [delta("lo"), { type: "finish", reason: "stop" }] });
    await events.answer({ done: true, value: undefined });
    await pumping;
    const text = sink.text.join("");
    expect(text).toContain('"content":"Hel"');
    expect(text).toContain('"content":"lo"');
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
    expectEndedOnce(settler, events, finished, "completed");
    // Stopped after the end (a late cancel): nothing more is settled or logged.
    relay.stop();
    await Bun.sleep(5);
    expect(settler.endings).toEqual(["completed"]);
    expect(finished.length).toBe(1);
  });

  test("a client that leaves before the response started (stop without pump) is settled, released and logged once", async () => {
    const { relay, finished, settler, events, sink } = relayOf([delta("Hel")]);
    relay.stop();
    relay.stop();
    await Bun.sleep(5);
    expectEndedOnce(settler, events, finished, "client_disconnected");
    // A pull that comes after all the same writes nothing.
    await relay.pump(sink);
    expect(sink.text).toEqual([]);
  });

  test("a client that leaves while the relay waits for the upstream: settled once, nothing written after", async () => {
    const { relay, finished, settler, events, sink } = relayOf([delta("Hel")]);
    const pumping = relay.pump(sink);
    await Bun.sleep(1);
    const written = sink.text.length;
    relay.stop();
    // The upstream's abort shows here as the read failing with ClientGoneError; a read that still brings data is not used.
    await events.answer(new ClientGoneError("client disconnected", true));
    await pumping;
    await Bun.sleep(5);
    expect(sink.text.length).toBe(written);
    expectEndedOnce(settler, events, finished, "client_disconnected");
  });

  test("a client that leaves while a flush waits for it (back-pressure that never ends) is settled all the same", async () => {
    const { relay, finished, settler, events, sink } = relayOf([delta("Hel")]);
    sink.holdFlushes = true;
    void relay.pump(sink);
    await Bun.sleep(5);
    relay.stop();
    await Bun.sleep(5);
    expectEndedOnce(settler, events, finished, "client_disconnected");
  });

  test("a client that leaves while the completed answer is being settled: one settle, the completed one", async () => {
    const { relay, finished, settler, events, sink } = relayOf([delta("Hel"), { type: "finish", reason: "stop" }]);
    settler.settleDelayMs = 20;
    const pumping = relay.pump(sink);
    await events.answer({ done: true, value: undefined });
    relay.stop();
    await pumping;
    await Bun.sleep(30);
    expectEndedOnce(settler, events, finished, "completed");
    expect(sink.text.join("")).not.toContain("[DONE]");
  });

  test("an upstream that fails mid-stream: settled once as failed, the error written in the answer's format", async () => {
    const { relay, finished, settler, events, sink } = relayOf([delta("Hel")]);
    const pumping = relay.pump(sink);
    await events.answer(new UpstreamError("The upstream for model m failed mid-stream: boom", { isRetryable: true }));
    await pumping;
    expectEndedOnce(settler, events, finished, "upstream_error");
    expect(sink.text.join("")).toContain("failed mid-stream: boom");
  });

  test("a red line crossed mid-batch: the batch's events before it are sent, then the refusal; the upstream let go; settled once", async () => {
    const rule = { id: "no-secrets", name: "No secrets" };
    // Breaks the rule at the second event of the first batch (the chat service's monitor finds where; here it is told).
    const monitor = { observeBatch: (batch: CompletionEvent[]) => (batch.length === 3 ? { rule, index: 1 } : undefined) } as unknown as OutputMonitor;
    const { relay, finished, settler, events, sink } = relayOf([delta("safe "), delta("SECRET"), delta(" after")], monitor);
    await relay.pump(sink);
    const text = sink.text.join("");
    expect(text).toContain('"content":"safe "');
    expect(text).not.toContain("SECRET");
    expect(text).not.toContain(" after");
    expect(text).toContain("This answer was stopped under red-line rule no-secrets (No secrets).");
    expect(text).toContain('"finish_reason":"content_filter"');
    expect(text.endsWith("data: [DONE]\n\n")).toBe(true);
    expect(settler.endings).toEqual(["content_filter"]);
    expect(events.released).toBeGreaterThanOrEqual(1);
    expect(finished.length).toBe(1);
  });
});
