// Preloaded (`bun --preload`) into the Sluice that bench/switch.ts starts: flips `globalThis.benchSwitch.on` about every
// SWITCH_PHASE_MS and writes each phase's CPU and requests to SWITCH_OUT. Sluice's source reads nothing of it: a step
// is priced by putting it behind `globalThis.benchSwitch?.on` in a copy of the source (see bench/switch.ts).
import { writeFileSync } from "node:fs";
import { isMainThread } from "node:worker_threads";

/** One phase of the switch: what the process spent and how many requests it took meanwhile. */
export interface SwitchPhase {
  on: boolean;
  processMicroseconds: number;
  eventLoopMicroseconds: number;
  requests: number;
  milliseconds: number;
}

declare global {
  var benchSwitch: { on: boolean } | undefined;
}

type Handler = (...args: unknown[]) => unknown;

const phaseMs = Number(process.env.SWITCH_PHASE_MS ?? 0);
// The ledger's writer thread loads this too: only the event loop's thread flips and counts.
if (isMainThread && phaseMs > 0) {
  const state = { on: false };
  globalThis.benchSwitch = state;
  let requests = 0;
  // Counted as each request is dispatched (in a closed loop, as many as are answered): a count at the answer would
  // cost every request a promise of its own.
  const counted =
    (handler: Handler): Handler =>
    (...args) => {
      requests++;
      return handler(...args);
    };
  type ServeOptions = { fetch?: Handler; routes?: Record<string, unknown> };
  const wrap = (options: ServeOptions): ServeOptions => {
    if (options.fetch) options.fetch = counted(options.fetch);
    for (const [path, route] of Object.entries(options.routes ?? {})) {
      if (typeof route === "function") (options.routes as Record<string, unknown>)[path] = counted(route as Handler);
      else if (route && typeof route === "object" && !(route instanceof Response)) {
        for (const [method, handler] of Object.entries(route)) {
          if (typeof handler === "function") (route as Record<string, unknown>)[method] = counted(handler as Handler);
        }
      }
    }
    return options;
  };
  const serve = Bun.serve;
  Bun.serve = ((options: ServeOptions) => {
    const server = serve(wrap(options) as Parameters<typeof Bun.serve>[0]);
    // Elysia reloads the server with its routes once they are compiled.
    const reload = server.reload.bind(server);
    server.reload = ((next: ServeOptions) => reload(wrap(next) as Parameters<typeof server.reload>[0])) as typeof server.reload;
    return server;
  }) as typeof Bun.serve;

  const phases: SwitchPhase[] = [];
  const now = () => {
    const process_ = process.cpuUsage();
    const thread = process.threadCpuUsage();
    return { process: process_.user + process_.system, thread: thread.user + thread.system, requests, milliseconds: performance.now() };
  };
  let last = now();
  // Each phase lasts a random 80-120% of SWITCH_PHASE_MS, so that no disturbance of the machine that recurs at a
  // multiple of the cycle can fall in the same state all run long.
  const flip = () => {
    const current = now();
    phases.push({
      on: state.on,
      processMicroseconds: current.process - last.process,
      eventLoopMicroseconds: current.thread - last.thread,
      requests: current.requests - last.requests,
      milliseconds: current.milliseconds - last.milliseconds,
    });
    last = current;
    state.on = !state.on;
    setTimeout(flip, phaseMs * (0.8 + 0.4 * Math.random())).unref();
  };
  setTimeout(flip, phaseMs).unref();
  // On a period of its own, which falls in either state alike (a write on every other flip would load one state).
  const out = process.env.SWITCH_OUT as string;
  setInterval(() => writeFileSync(out, JSON.stringify(phases)), 1013).unref();
}
