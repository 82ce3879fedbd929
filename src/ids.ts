/** Random identifiers: a readable prefix and 128 bits of randomness in base64url. */
export function randomId(prefix: string, bytes = 16): string {
  return `${prefix}${Buffer.from(crypto.getRandomValues(new Uint8Array(bytes))).toString("base64url")}`;
}

/**
 * A request id as sent in `x-request-id`: a UUIDv7 (time-ordered), so that the ledger's primary key grows at its
 * end instead of touching a random B-tree page per row.
 */
export function newRequestId(): string {
  return `req_${Bun.randomUUIDv7().replaceAll("-", "")}`;
}
