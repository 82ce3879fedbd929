// Shared by the benchmark and soak runners: loopback ports for the processes they start.

/** A port that was free a moment ago (the kernel picks it). */
export function freePort(): number {
  const probe = Bun.serve({ port: 0, fetch: () => new Response() });
  const port = probe.port as number;
  probe.stop(true);
  return port;
}

/** Waits until something accepts HTTP on the port. */
export async function waitForPort(port: number, timeoutMs = 15_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    try {
      await fetch(`http://127.0.0.1:${port}/`, { signal: AbortSignal.timeout(500) });
      return;
    } catch {
      await Bun.sleep(25);
    }
  }
  throw new Error(`nothing listening on ${port}`);
}
