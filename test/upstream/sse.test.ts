import { expect, test } from "bun:test";
import { ServerSentEventDecoder } from "../../src/upstream/sse";

const bytes = (text: string) => new TextEncoder().encode(text);

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
