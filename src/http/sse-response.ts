import { doneEvent, serverSentData } from "../upstream/sse";

/**
 * Streams a generator's batches of serialized JSON payloads as server-sent events and ends with `data: [DONE]`. It is a Bun
 * "direct" stream: text goes straight into the response, without a chunk queue (the queue cost more CPU than
 * anything else with thousands of streams). When the client goes away, `onCancel` runs first (it aborts the
 * upstream call), then the generator is returned so its `finally` settles the request. `onEnd` runs once, when the
 * stream has been written to its end or cancelled.
 *
 * The generator is started at once, not at the first pull: a client that leaves before the response starts gets
 * cancel() without any pull(), and returning a generator that never started skips its `finally`, which would leave
 * the request's slot and reservation held for ever.
 */
export function sseResponse(payloads: AsyncGenerator<string[]>, onCancel: () => void, headers: Record<string, string>, onEnd: () => void): Response {
  let cancelled = false;
  let ended = false;
  const end = () => {
    if (ended) return;
    ended = true;
    onEnd();
  };
  const first = payloads.next();
  // Awaited by pull; if the stream is cancelled instead, a failure here must not surface as unhandled.
  first.catch(() => undefined);
  const body = new ReadableStream({
    type: "direct",
    async pull(controller: ReadableStreamDirectController) {
      try {
        for (let result = await first; !result.done && !cancelled; result = await payloads.next()) {
          // A batch (the events of one upstream read) goes out in one write.
          controller.write(result.value.length === 1 ? serverSentData(result.value[0] as string) : result.value.map(serverSentData).join(""));
          await controller.flush();
        }
        if (!cancelled) {
          controller.write(doneEvent);
          await controller.flush();
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
      onCancel();
      void payloads.return(undefined);
    },
  } as unknown as ConstructorParameters<typeof ReadableStream<Uint8Array>>[0]);
  return new Response(body, {
    headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", ...headers },
  });
}
