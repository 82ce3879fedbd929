import { expect, test } from "bun:test";
import { generateKeySecret, hashesEqual, hashKeySecret, secretsEqual } from "../../../src/modules/keys/secret";

test("a key's hash is its SHA-256 in hex, and the comparison accepts only the same hash", () => {
  const secret = generateKeySecret();
  const hash = hashKeySecret(secret);
  expect(hash).toBe(new Bun.CryptoHasher("sha256").update(secret).digest("hex"));
  const stored = Buffer.from(hash);
  expect(hashesEqual(stored, hash)).toBe(true);
  expect(hashesEqual(stored, hashKeySecret(generateKeySecret()))).toBe(false);
  expect(hashesEqual(stored, `${hash.slice(0, -1)}${hash.endsWith("0") ? "1" : "0"}`)).toBe(false);
  // Another length is refused, not thrown on (timingSafeEqual throws on buffers of different lengths).
  expect(hashesEqual(stored, hash.slice(1))).toBe(false);
  expect(hashesEqual(stored, `${hash}0`)).toBe(false);
  expect(hashesEqual(stored, "é".repeat(32))).toBe(false);
});

test("the comparison's reused bytes carry nothing from one comparison into the next", () => {
  const hash = hashKeySecret(generateKeySecret());
  const stored = Buffer.from(hash);
  const other = hashKeySecret(generateKeySecret());
  // 64 characters of 2 bytes each fill the 64 bytes with 32 of them: the rest must not be taken from before.
  expect(hashesEqual(stored, "é".repeat(64))).toBe(false);
  expect(hashesEqual(stored, hash)).toBe(true);
  // 63 of the hash's characters and one of 2 bytes: only 63 bytes fit, and the 64th, left from the comparison just
  // made, is the hash's own. Compared without the count of bytes written, this would pass as the hash.
  expect(hashesEqual(stored, `${hash.slice(0, 63)}é`)).toBe(false);
  expect(hashesEqual(stored, hash)).toBe(true);
  expect(hashesEqual(stored, other)).toBe(false);
  expect(hashesEqual(stored, hash)).toBe(true);
  expect(hashesEqual(Buffer.from(other), other)).toBe(true);
  expect(hashesEqual(Buffer.from(other), hash)).toBe(false);
});

test("secretsEqual: the same text only, whatever the lengths and characters", () => {
  const token = "b64url_token-of-the-metrics_or_a-session";
  expect(secretsEqual(token, token)).toBe(true);
  expect(secretsEqual(`${token}`, token.slice(0))).toBe(true);
  for (const other of ["", token.slice(0, -1), `${token}x`, token.toUpperCase(), `${token.slice(0, -1)}é`, "\u0000".repeat(token.length)]) {
    expect(secretsEqual(other, token)).toBe(false);
    expect(secretsEqual(token, other)).toBe(false);
  }
  expect(secretsEqual("", "")).toBe(true);
});
