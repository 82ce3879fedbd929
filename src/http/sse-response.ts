/** What sseResponse does beyond relaying frames. */
export interface SseOptions {
  headers: Record<string, string>;
  /** Runs first when the client goes away (it aborts the upstream call). */
  onCancel: () => void;
  /** Runs once, when the stream has been written to its end or cancelled. */
  onEnd: () => void;
  /** A frame written whenever `intervalMs` passes with nothing else written (a client's sign of life). */
  heartbeat?: { frame: string; intervalMs: number };
}

/**
 * Streams a generator's batches of server-sent event text (already encoded, each batch whole frames in one or more
 * pieces, the last batch ending the protocol's way, `[DONE]` or otherwise). It is a Bun "direct" stream: text goes
 * straight into the response, without a chunk queue (the queue cost more CPU than anything else with thousands of
 * streams). When the client goes away, `onCancel` runs first, then the generator is returned so its `finally`
 * settles the request.
 *
 * The generator is started at once, not at the first pull: a client that leaves before the response starts gets
 * cancel() without any pull(), and returning a generator that never started skips its `finally`, which would leave
 * the request's slot and reservation held for ever.
 */
export function sseResponse(frames: AsyncGenerator<string[]>, options: SseOptions): Response {
  let cancelled = false;
  let ended = false;
  let heartbeat: Timer | undefined;
  const end = () => {
    clearInterval(heartbeat);
    if (ended) return;
    ended = true;
    options.onEnd();
  };
  const first = frames.next();
  // Awaited by pull; if the stream is cancelled instead, a failure here must not surface as unhandled.
  first.catch(() => undefined);
  const body = new ReadableStream({
    type: "direct",
    async pull(controller) {
      let wrote = false;
      if (options.heartbeat) {
        const frame = options.heartbeat.frame;
        heartbeat = setInterval(() => {
          if (!wrote && !cancelled && !ended) {
            controller.write(frame);
            void controller.flush();
          }
          wrote = false;
        }, options.heartbeat.intervalMs);
      }
      try {
        for (let result = await first; !result.done && !cancelled; result = await frames.next()) {
          // A batch (the events of one upstream read) goes out in one flush; its pieces are written as they are,
          // not joined first: a joined copy of every frame would be the stream's largest garbage.
          const pieces = result.value;
          for (let index = 0; index < pieces.length; index++) controller.write(pieces[index] as string);
          // Emptied once written: the generator's settled promise still holds this batch, and with thousands of
          // streams that promise often sits in the old generation, where it would keep the frames alive too.
          pieces.length = 0;
          wrote = true;
          // A flush that went out at once returns the bytes written, not a promise: awaiting it would still cost
          // a turn of the microtask queue on every upstream read.
          const flushed = controller.flush();
          if (flushed instanceof Promise) await flushed;
        }
        controller.close();
      } catch (error) {
        controller.close(error as Error);
      } finally {
        end();
      }
    },
    cancel() {
      cancelled = true;
      end();
      options.onCancel();
      void frames.return(undefined);
    },
  });
  return new Response(body, {
    headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", ...options.headers },
  });
}
