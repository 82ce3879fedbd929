import { expect, test } from "bun:test";
import { createParser } from "eventsource-parser";
import fc from "fast-check";
import { maxEventLength, ServerSentEventDecoder } from "../../src/upstream/sse";

const bytes = (text: string) => new TextEncoder().encode(text);

/** Every event's data, the reads fed one by one, then the end of the stream. */
function decodeAll(reads: Uint8Array[]): string[] {
  const decoder = new ServerSentEventDecoder();
  const all: string[] = [];
  for (const read of reads) all.push(...decoder.feed(read));
  all.push(...decoder.feed());
  return all;
}

/** The same through eventsource-parser, the library vercel/ai uses, with a streaming TextDecoder before it. */
function decodeAllWithLibrary(reads: Uint8Array[]): string[] {
  const all: string[] = [];
  const parser = createParser({ onEvent: (event) => all.push(event.data) });
  const decoder = new TextDecoder();
  for (const read of reads) parser.feed(decoder.decode(read, { stream: true }));
  parser.feed(decoder.decode());
  return all;
}

test("the decoder gives the data of the events each read completes, in one array it empties and refills", () => {
  const decoder = new ServerSentEventDecoder();
  const first = decoder.feed(bytes('data: {"n":1}\n\ndata: {"n"'));
  expect(first).toEqual(['{"n":1}']);
  // An event split across reads, and a character split across its UTF-8 bytes, come whole with the read that ends them.
  const euro = bytes("€");
  expect(decoder.feed(bytes(':"2 ')).length).toBe(0);
  expect(decoder.feed(euro.subarray(0, 1))).toEqual([]);
  const second = decoder.feed(new Uint8Array([...euro.subarray(1), ...bytes('"}\n\ndata: [DONE]\n\n')]));
  expect(second).toBe(first);
  expect(second).toEqual(['{"n":"2 €"}', "[DONE]"]);
  expect(decoder.feed()).toEqual([]);
});

test("the event-stream grammar: line endings, data lines, comments, other fields, a BOM and an unfinished event", () => {
  // LF, CRLF and CR end lines alike; a CRLF split across two reads is one line ending, not an empty line.
  expect(decodeAll([bytes("data: a\r\n\r\ndata: b\r\rdata: c\r"), bytes("\n\r\n")])).toEqual(["a", "b", "c"]);
  // Data lines join with LF; one space after the colon is dropped, a second is kept; `data` alone is an empty line.
  expect(decodeAll([bytes("data:x\ndata:  y\ndata\n\n")])).toEqual(["x\n y\n"]);
  // Comments, `event`, `id`, `retry` and unknown fields carry no data; an event without data is not dispatched.
  expect(decodeAll([bytes(": keep-alive\nevent: ping\nid: 7\nretry: 10\n\nfoo: data\ndatum: x\ndata: z\n\n")])).toEqual(["z"]);
  // A leading byte-order mark is not part of the first field's name.
  expect(decodeAll([new Uint8Array([0xef, 0xbb]), new Uint8Array([0xbf, ...bytes("data: first\n\n")])])).toEqual(["first"]);
  // An event the stream ends inside is dropped, whether its last line ended or not.
  expect(decodeAll([bytes("data: whole\n\ndata: cut\n")])).toEqual(["whole"]);
  expect(decodeAll([bytes("data: whole\n\ndata: cut")])).toEqual(["whole"]);
  // A line that no read ends for many reads is kept whole.
  const long = "x".repeat(10_000);
  const pieces = Array.from({ length: 100 }, (_, index) => bytes(long.slice(index * 100, index * 100 + 100)));
  expect(decodeAll([bytes("data: "), ...pieces, bytes("\n\n")])).toEqual([long]);
});

/** One line of an event stream: mostly data lines, with the other line kinds the grammar knows. */
const line = fc.oneof(
  { weight: 6, arbitrary: fc.string({ maxLength: 12, unit: "grapheme" }).map((value) => `data: ${value.replace(/[\r\n]/g, "")}`) },
  { weight: 1, arbitrary: fc.constantFrom("data", "data:", "data:  two spaces", ": comment", "event: delta", "id: 1", "retry: 5", "dat", "datax: y") },
  { weight: 3, arbitrary: fc.constant("") },
);
const lineEnding = fc.constantFrom("\n", "\r\n", "\r");

test("the decoder finds the same events as eventsource-parser however a stream is cut into reads (property)", () => {
  fc.assert(
    fc.property(fc.array(fc.tuple(line, lineEnding), { maxLength: 30 }), fc.array(fc.nat(), { maxLength: 12 }), (lines, cuts) => {
      const stream = bytes(lines.map(([text, ending]) => text + ending).join(""));
      // The stream cut at arbitrary bytes: inside characters, inside CRLFs, anywhere.
      const offsets = [...new Set(cuts.map((cut) => cut % (stream.length + 1)))].sort((a, b) => a - b);
      const reads: Uint8Array[] = [];
      let previous = 0;
      for (const offset of [...offsets, stream.length]) {
        if (offset > previous) reads.push(stream.subarray(previous, offset));
        previous = offset;
      }
      expect(decodeAll(reads)).toEqual(decodeAllWithLibrary(reads));
    }),
    { numRuns: 2000 },
  );
});

test("a line or an event longer than the bound is dropped, the decoder marks itself overflowed and reads no more", () => {
  const megabyte = "x".repeat(1024 * 1024);
  const chunks = Math.ceil(maxEventLength / megabyte.length);
  // A line that never ends: events completed in the same read before it still come.
  const line = new ServerSentEventDecoder();
  expect(line.feed(bytes(`data: 1\n\ndata: ${megabyte}`))).toEqual(["1"]);
  for (let read = 2; read < chunks; read++) expect(line.feed(bytes(megabyte))).toEqual([]);
  expect(line.overflowed).toBe(false);
  line.feed(bytes(megabyte));
  expect(line.overflowed).toBe(true);
  expect(line.feed(bytes("\n\ndata: 2\n\n"))).toEqual([]);
  // An event of short data lines that never ends with a blank line.
  const event = new ServerSentEventDecoder();
  const lines = `data: ${"y".repeat(1023)}\n`.repeat(1024);
  for (let read = 1; read < chunks; read++) expect(event.feed(bytes(lines))).toEqual([]);
  expect(event.overflowed).toBe(false);
  event.feed(bytes(lines));
  event.feed(bytes(lines));
  expect(event.overflowed).toBe(true);
  // Just under the bound is an event like any other.
  const under = new ServerSentEventDecoder();
  expect(under.feed(bytes(`data: ${"z".repeat(maxEventLength - 1)}\n\n`))[0]?.length).toBe(maxEventLength - 1);
  expect(under.overflowed).toBe(false);
});
