/**
 * The longest stream event (or line) an upstream may send: 16 Mi code units, far above any chunk of a token or a
 * tool call's arguments, and above a whole answer sent as one event.
 */
export const maxEventLength = 16 * 1024 * 1024;

const lineFeed = 10;
const carriageReturn = 13;
const space = 32;
const colon = 58;

/**
 * The one SSE decoder of Sluice: fed the bytes of each network read, it returns the data of the events that read
 * completed, parsed as the HTML standard's event-stream grammar says (lines ended by LF, CR or CRLF, even across
 * reads; comments and fields other than `data` skipped; an event's data lines joined by LF; an event the stream
 * ends inside dropped). Sluice's upstreams put everything in `data`, so the other fields are not kept.
 *
 * It is one object with its state in fields, not an async generator nor a parser built of closures: every open
 * stream has one, and each closure or generator frame is a cell that every collection marks while thousands of
 * streams are open (bench/HISTORY.md, "The collections a burst of stream starts triggers").
 */
export class ServerSentEventDecoder {
  /** The data of the events completed by the latest read: the decoder's own array, emptied by the next. */
  private readonly events: string[] = [];
  private readonly decoder = new TextDecoder();
  /** The start of a line that no read has ended yet; kept as a rope, searched only once the line has ended. */
  private partialLine = "";
  /** The event being read: its data lines so far, joined; undefined before its first. */
  private data: string | undefined = undefined;
  /** The latest read ended with a CR: a LF starting the next one is the second half of the same CRLF. */
  private afterCarriageReturn = false;
  /**
   * Set once a line or an event (its data lines joined) grew past `maxEventLength`: the decoder then drops it and
   * reads no further, and its caller ends the stream. Unbounded, an upstream that never ends a line fills the memory.
   */
  overflowed = false;

  /**
   * The data of the events completed by these bytes; with no bytes, the end of the stream, which completes none.
   * The array is the decoder's own, emptied and refilled by the next call: a new one a read would be one more
   * object that a stream's settled promises carry (bench/promotion.ts).
   */
  feed(bytes?: Uint8Array): string[] {
    this.events.length = 0;
    if (this.overflowed) return this.events;
    if (bytes === undefined) {
      // Whatever the stream ended inside (a line, an event) is dropped, as the standard says.
      this.decoder.decode();
      this.partialLine = "";
      this.data = undefined;
      return this.events;
    }
    this.read(this.decoder.decode(bytes, { stream: true }));
    return this.events;
  }

  private read(text: string): void {
    let start = 0;
    if (this.afterCarriageReturn && text.length > 0) {
      this.afterCarriageReturn = false;
      if (text.charCodeAt(0) === lineFeed) start = 1;
    }
    // Each terminator is searched for once per read, not once per line: most reads have no CR at all.
    let nextCarriageReturn = text.indexOf("\r", start);
    let nextLineFeed = text.indexOf("\n", start);
    while (start < text.length) {
      if (nextCarriageReturn !== -1 && nextCarriageReturn < start) nextCarriageReturn = text.indexOf("\r", start);
      if (nextLineFeed !== -1 && nextLineFeed < start) nextLineFeed = text.indexOf("\n", start);
      const end = nextCarriageReturn === -1 ? nextLineFeed : nextLineFeed === -1 ? nextCarriageReturn : Math.min(nextCarriageReturn, nextLineFeed);
      if (end === -1) {
        this.partialLine += start === 0 ? text : text.slice(start);
        if (this.partialLine.length > maxEventLength) this.overflow();
        return;
      }
      if (this.partialLine === "") this.line(text, start, end);
      else {
        const line = this.partialLine + text.slice(start, end);
        this.partialLine = "";
        this.line(line, 0, line.length);
      }
      if (this.overflowed) return;
      if (text.charCodeAt(end) === carriageReturn) {
        if (end + 1 === text.length) {
          this.afterCarriageReturn = true;
          return;
        }
        start = text.charCodeAt(end + 1) === lineFeed ? end + 2 : end + 1;
      } else {
        start = end + 1;
      }
    }
  }

  /** One line, `text` from `start` to `end` (its terminator excluded). */
  private line(text: string, start: number, end: number): void {
    if (start === end) {
      // A blank line ends the event: dispatched if it had data.
      if (this.data !== undefined) this.events.push(this.data);
      this.data = undefined;
      return;
    }
    // A comment, or a field other than `data` (`data` alone, without a colon, is a data line with no value).
    if (text.charCodeAt(start) === colon || !text.startsWith("data", start)) return;
    const afterName = start + 4;
    let value: string;
    if (afterName === end) value = "";
    else if (text.charCodeAt(afterName) !== colon) return;
    else value = text.slice(text.charCodeAt(afterName + 1) === space ? afterName + 2 : afterName + 1, end);
    this.data = this.data === undefined ? value : `${this.data}\n${value}`;
    if (this.data.length > maxEventLength) this.overflow();
  }

  private overflow(): void {
    this.overflowed = true;
    this.partialLine = "";
    this.data = undefined;
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
