import { encodeDone, encodeServerSentData } from "../upstream/sse";

/**
 * Streams a generator's serialized JSON payloads as server-sent events and ends with `data: [DONE]`. When the client goes away,
 * `onCancel` runs first (it aborts the upstream call), then the generator is returned so its `finally` settles.
 */
export function sseResponse(payloads: AsyncGenerator<string>, onCancel: () => void, headers: Record<string, string>): Response {
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { value, done } = await payloads.next();
        if (done) {
          controller.enqueue(encodeDone());
          controller.close();
        } else {
          controller.enqueue(encodeServerSentData(value));
        }
      } catch (error) {
        controller.error(error);
      }
    },
    async cancel() {
      onCancel();
      await payloads.return(undefined);
    },
  });
  return new Response(body, {
    headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", ...headers },
  });
}
