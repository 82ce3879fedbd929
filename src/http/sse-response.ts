/** Where a streamed answer writes: each batch is whole frames, written in one flush. */
export interface FrameSink {
  /**
   * Writes a batch's pieces one after the other and empties the array, so that the producer may fill it again.
   * Returns a promise only when the flush waits for the client (back-pressure); the producer then waits for it.
   */
  write(batch: string[]): Promise<unknown> | undefined;
}

/**
 * A streamed answer: it writes its batches of server-sent event text (already encoded, the last ending the protocol's
 * way, `[DONE]` or otherwise) into a sink, and settles its request on every path.
 */
export interface StreamedAnswer {
  /** Writes every batch; resolves once the answer is complete and settled. Called once, at the stream's first pull. */
  pump(sink: FrameSink): Promise<void>;
  /**
   * The client left: nothing more is written, and the request is settled, also when `pump` never started (a client
   * that leaves before the response starts gets no pull at all) or is waiting for a flush that will not come.
   */
  stop(): void;
}

/** What sseResponse does beyond relaying frames. */
export interface SseOptions {
  headers: Record<string, string>;
  /** Aborted first when the client goes away (the upstream call's controller). */
  upstream: { abort(): void };
  /** Runs once, when the stream has been written to its end or cancelled. Shared by every stream of a route. */
  onEnd: () => void;
  /** A frame written whenever `intervalMs` passes with nothing else written (a client's sign of life). */
  heartbeat?: { frame: string; intervalMs: number };
}

/**
 * The source of one streamed answer, and the sink it writes into: its state in fields and its steps as methods, not
 * closures over a scope, and `pull` not an async function of its own: with thousands of open streams each closure,
 * scope and suspended function is cells every full collection marks (bench/HISTORY.md, "Fewer cells an open stream").
 */
class FrameSource implements Bun.DirectUnderlyingSource<string>, FrameSink {
  readonly type = "direct" as const;
  private controller: ReadableStreamDirectController | undefined;
  private cancelled = false;
  private ended = false;
  /** Whether a batch went out since the heartbeat last looked. */
  private wrote = false;
  private heartbeat: Timer | undefined;

  constructor(
    private readonly answer: StreamedAnswer,
    private readonly upstream: { abort(): void },
    private readonly onEnd: () => void,
    private readonly heartbeatFrame: { frame: string; intervalMs: number } | undefined,
  ) {}

  pull(controller: ReadableStreamDirectController): Promise<void> {
    this.controller = controller;
    if (this.heartbeatFrame) this.beat(controller, this.heartbeatFrame);
    return this.answer.pump(this).then(
      () => this.finish(undefined),
      (error: unknown) => this.finish(error as Error),
    );
  }

  write(batch: string[]): Promise<unknown> | undefined {
    const controller = this.controller as ReadableStreamDirectController;
    if (this.cancelled) {
      batch.length = 0;
      return undefined;
    }
    try {
      // A batch (the events of one upstream read) goes out in one flush; its pieces are written as they are, not
      // joined first: a joined copy of every frame would be the stream's largest garbage.
      for (let index = 0; index < batch.length; index++) controller.write(batch[index] as string);
      batch.length = 0;
      this.wrote = true;
      // A flush that went out at once returns the bytes written, not a promise: waiting for it would still cost a
      // turn of the microtask queue on every upstream read.
      const flushed = controller.flush();
      return flushed instanceof Promise ? flushed : undefined;
    } catch {
      // A response that can no longer be written has lost its client.
      batch.length = 0;
      this.cancel();
      return undefined;
    }
  }

  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    this.end();
    this.upstream.abort();
    this.answer.stop();
  }

  private finish(error: Error | undefined): void {
    if (!this.cancelled) (this.controller as ReadableStreamDirectController).close(error);
    this.end();
  }

  /** Only APIs with a heartbeat event pay for its timer and closure. */
  private beat(controller: ReadableStreamDirectController, heartbeat: { frame: string; intervalMs: number }): void {
    this.heartbeat = setInterval(() => {
      if (!this.wrote && !this.cancelled && !this.ended) {
        controller.write(heartbeat.frame);
        void controller.flush();
      }
      this.wrote = false;
    }, heartbeat.intervalMs);
  }

  private end(): void {
    clearInterval(this.heartbeat);
    if (this.ended) return;
    this.ended = true;
    this.onEnd();
  }
}

/**
 * Streams an answer as server-sent events. It is a Bun "direct" stream: text goes straight into the response, without
 * a chunk queue (the queue cost more CPU than anything else with thousands of streams). When the client goes away,
 * `upstream` is aborted first, then the answer is stopped, which settles its request.
 */
export function sseResponse(answer: StreamedAnswer, options: SseOptions): Response {
  const source = new FrameSource(answer, options.upstream, options.onEnd, options.heartbeat);
  return new Response(new ReadableStream(source), {
    headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", ...options.headers },
  });
}
