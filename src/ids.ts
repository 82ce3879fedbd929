/** Random identifiers: a readable prefix and 128 bits of randomness in base64url. */
export function randomId(prefix: string, bytes = 16): string {
  return `${prefix}${Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString("base64url")}`;
}

/** A request id as sent in `x-request-id`. */
export function newRequestId(): string {
  return `req_${crypto.randomUUID().replaceAll("-", "")}`;
}
