import { createParser, type EventSourceMessage } from "eventsource-parser";

/**
 * The one SSE decoder of Sluice: fed the bytes of each network read, it returns the data of the events that read
 * completed. It is a plain object rather than an async generator: with thousands of streams, every generator
 * layer between the socket and the client costs a promise and a turn of the microtask queue per read.
 */
export class ServerSentEventDecoder {
  private readonly pending: string[] = [];
  private readonly parser = createParser({ onEvent: (event: EventSourceMessage) => this.pending.push(event.data) });
  private readonly decoder = new TextDecoder();

  /**
   * The data of the events completed by these bytes; with no bytes, by the end of the stream. The array is the
   * decoder's own, emptied and refilled by the next call: a new one a read would be one more object that a
   * stream's settled promises carry into the old generation (bench/promotion.ts).
   */
  feed(bytes?: Uint8Array): string[] {
    this.pending.length = 0;
    this.parser.feed(bytes ? this.decoder.decode(bytes, { stream: true }) : this.decoder.decode());
    return this.pending;
  }
}

/** One serialized JSON payload as an SSE `data:` event; with the named form below, the one SSE encoder of Sluice. */
export function serverSentData(json: string): string {
  return `data: ${json}\n\n`;
}

/** A named SSE event (`event:` line, then its data), as the Responses and Anthropic streams send them. */
export function serverSentEvent(name: string, json: string): string {
  return `event: ${name}\ndata: ${json}\n\n`;
}

/** The stream's terminator, as OpenAI sends it. */
export const doneEvent = "data: [DONE]\n\n";
