import { randomToken } from "../../ids";

export const keyPrefix = "sk-sluice-";
/** How many leading characters of a key are stored and shown to tell keys apart. */
const shownLength = keyPrefix.length + 4;

/** A new key: the prefix and 256 random bits in base64url. */
export function generateKeySecret(): string {
  return keyPrefix + randomToken(32);
}

/** SHA-256 of the key, hex: the only form in which a key is stored. */
export function hashKeySecret(secret: string): string {
  return Bun.SHA256.hash(secret, "hex");
}

export function shownPrefix(secret: string): string {
  return secret.slice(0, shownLength);
}

const utf8 = new TextEncoder();
/**
 * The computed hash's bytes, written here for each comparison: a Buffer made per request cost about 0.15 µs against
 * 0.04 (bench/HISTORY.md, forty-third session). A hash is 64 bytes of hex.
 */
const givenBytes = new Uint8Array(64);

/** Constant-time comparison of a stored hash (its hex text as bytes, kept from before) with a computed one. */
export function hashesEqual(stored: Uint8Array, hash: string): boolean {
  if (hash.length !== stored.length || stored.length > givenBytes.length) return false;
  const given = givenBytes.subarray(0, stored.length);
  if (utf8.encodeInto(hash, given).written !== stored.length) return false;
  // Bun's crypto.timingSafeEqual (as node:crypto's, without loading node:crypto at start-up).
  return crypto.timingSafeEqual(stored, given);
}

/**
 * Constant-time equality of two secrets given as text (the metrics token, a session's CSRF token): their SHA-256
 * digests are compared, so neither where they first differ nor their lengths show in the time taken.
 */
export function secretsEqual(given: string, expected: string): boolean {
  return crypto.timingSafeEqual(Bun.SHA256.hash(given) as Uint8Array, Bun.SHA256.hash(expected) as Uint8Array);
}
