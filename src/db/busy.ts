/** SQLITE_BUSY and its extended codes: another connection holds the lock. */
export function isBusy(error: unknown): boolean {
  return typeof (error as { code?: unknown })?.code === "string" && (error as { code: string }).code.startsWith("SQLITE_BUSY");
}
