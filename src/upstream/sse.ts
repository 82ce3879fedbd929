import { createParser, type EventSourceMessage } from "eventsource-parser";

/**
 * Reads a server-sent event stream and yields the data of the events each network read completed, as one batch;
 * the one SSE decoder of Sluice.
 */
export async function* readServerSentEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<string[]> {
  let pending: string[] = [];
  const parser = createParser({ onEvent: (event: EventSourceMessage) => pending.push(event.data) });
  const decoder = new TextDecoder();
  for await (const bytes of body) {
    parser.feed(decoder.decode(bytes, { stream: true }));
    if (pending.length === 0) continue;
    const batch = pending;
    pending = [];
    yield batch;
  }
  parser.feed(decoder.decode());
  if (pending.length > 0) yield pending;
}

/** One serialized JSON payload as an SSE `data:` event; the one SSE encoder of Sluice. */
export function serverSentData(json: string): string {
  return `data: ${json}\n\n`;
}

/** The stream's terminator, as OpenAI sends it. */
export const doneEvent = "data: [DONE]\n\n";
