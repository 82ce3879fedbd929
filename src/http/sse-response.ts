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

const ignore = (): undefined => undefined;

/**
 * The source of one streamed answer: its state in fields and its steps as methods, not closures over a scope, since
 * with thousands of open streams each closure and scope is a cell every full collection marks (bench/README.md,
 * "Fewer cells an open stream").
 */
class FrameSource implements Bun.DirectUnderlyingSource<string> {
  readonly type = "direct" as const;
  private cancelled = false;
  private ended = false;
  /** Whether a batch went out since the heartbeat last looked. */
  private wrote = false;
  private heartbeat: Timer | undefined;
  private readonly first: Promise<IteratorResult<string[]>>;

  constructor(
    private readonly frames: AsyncGenerator<string[]>,
    private readonly upstream: { abort(): void },
    private readonly onEnd: () => void,
    private readonly heartbeatFrame: { frame: string; intervalMs: number } | undefined,
  ) {
    this.first = frames.next();
    // Awaited by pull; if the stream is cancelled instead, a failure here must not surface as unhandled.
    this.first.catch(ignore);
  }

  async pull(controller: ReadableStreamDirectController): Promise<void> {
    if (this.heartbeatFrame) this.beat(controller, this.heartbeatFrame);
    const frames = this.frames;
    try {
      for (let result = await this.first; !result.done && !this.cancelled; result = await frames.next()) {
        // A batch (the events of one upstream read) goes out in one flush; its pieces are written as they are,
        // not joined first: a joined copy of every frame would be the stream's largest garbage.
        const pieces = result.value;
        for (let index = 0; index < pieces.length; index++) controller.write(pieces[index] as string);
        // Emptied once written: the generator's settled promise still holds this batch, and with thousands of
        // streams that promise often sits in the old generation, where it would keep the frames alive too.
        pieces.length = 0;
        this.wrote = true;
        // A flush that went out at once returns the bytes written, not a promise: awaiting it would still cost
        // a turn of the microtask queue on every upstream read.
        const flushed = controller.flush();
        if (flushed instanceof Promise) await flushed;
      }
      controller.close();
    } catch (error) {
      controller.close(error as Error);
    } finally {
      this.end();
    }
  }

  cancel(): void {
    this.cancelled = true;
    this.end();
    this.upstream.abort();
    void this.frames.return(undefined);
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
 * Streams a generator's batches of server-sent event text (already encoded, each batch whole frames in one or more
 * pieces, the last batch ending the protocol's way, `[DONE]` or otherwise). It is a Bun "direct" stream: text goes
 * straight into the response, without a chunk queue (the queue cost more CPU than anything else with thousands of
 * streams). When the client goes away, `upstream` is aborted first, then the generator is returned so its `finally`
 * settles the request.
 *
 * The generator is started at once, not at the first pull: a client that leaves before the response starts gets
 * cancel() without any pull(), and returning a generator that never started skips its `finally`, which would leave
 * the request's slot and reservation held for ever.
 */
export function sseResponse(frames: AsyncGenerator<string[]>, options: SseOptions): Response {
  const source = new FrameSource(frames, options.upstream, options.onEnd, options.heartbeat);
  return new Response(new ReadableStream(source), {
    headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", ...options.headers },
  });
}
