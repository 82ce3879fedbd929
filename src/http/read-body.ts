import { SluiceError } from "../errors";

/** 413 request_too_large, in the caller's error format like every other error. */
function bodyTooLarge(limit: number): SluiceError {
  return new SluiceError("request_too_large", `The request body is larger than the limit of ${limit} bytes.`);
}

/**
 * Reads a request body as text, refusing more than `limit` bytes with a 413. A declared Content-Length is checked
 * before anything is read; a chunked body is counted as it arrives and abandoned at the limit, so that no body larger
 * than the limit is ever held in memory (Bun's own limit is set far above, see server.ts).
 */
export function readBodyText(request: Request, limit: number): Promise<string> {
  const declared = request.headers.get("content-length");
  if (declared === null) return readCounting(request, limit);
  if (Number(declared) > limit) return Promise.reject(bodyTooLarge(limit));
  return request.text();
}

/** A body without Content-Length, counted as it arrives. */
async function readCounting(request: Request, limit: number): Promise<string> {
  const text = await readTextWithin(request.body, limit);
  if (text === undefined) throw bodyTooLarge(limit);
  return text;
}

/**
 * Reads a body of unknown length as text, counting its bytes as they arrive; undefined once it passes `limit`, when
 * the rest is cancelled unread, so that no more than the limit is ever held.
 */
export async function readTextWithin(body: ReadableStream<Uint8Array> | null, limit: number): Promise<string | undefined> {
  if (!body) return "";
  const decoder = new TextDecoder();
  const reader = body.getReader();
  let size = 0;
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => undefined);
      return undefined;
    }
    text += decoder.decode(value, { stream: true });
  }
  return text + decoder.decode();
}
