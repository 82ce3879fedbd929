#!/usr/bin/env bun
// Entry point of `bun src/main.ts` and of the compiled `dist/sluice`. Kept tiny on purpose: `serve` may replace the
// process (see restartWithStartEnvironment) before anything else is loaded, so the rest of Sluice is a separate
// module, loaded by URL (a separate entry point of the executable) rather than bundled into this one and evaluated
// twice.
import { restartWithStartEnvironment } from "./start-environment";

const argv = process.argv.slice(2);
if ((argv[0] ?? "serve") === "serve") restartWithStartEnvironment();
const { runCommand } = (await import(new URL("./cli/run.ts", import.meta.url).href)) as typeof import("./cli/run");
const code = await runCommand(argv);
if (code !== 0) process.exit(code);
