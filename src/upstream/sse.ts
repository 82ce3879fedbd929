import { createParser, type EventSourceMessage } from "eventsource-parser";

/** Reads a server-sent event stream and yields each event's data; the one SSE decoder of Sluice. */
export async function* readServerSentEvents(body: ReadableStream<Uint8Array>): AsyncGenerator<string> {
  const pending: EventSourceMessage[] = [];
  const parser = createParser({ onEvent: (event) => pending.push(event) });
  const decoder = new TextDecoder();
  for await (const bytes of body) {
    parser.feed(decoder.decode(bytes, { stream: true }));
    while (pending.length > 0) yield (pending.shift() as EventSourceMessage).data;
  }
  parser.feed(decoder.decode());
  while (pending.length > 0) yield (pending.shift() as EventSourceMessage).data;
}

/** One serialized JSON payload as an SSE `data:` event; the one SSE encoder of Sluice. */
export function serverSentData(json: string): string {
  return `data: ${json}\n\n`;
}

/** The stream's terminator, as OpenAI sends it. */
export const doneEvent = "data: [DONE]\n\n";
