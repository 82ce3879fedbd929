#!/usr/bin/env bun
// Entry point of `bun src/main.ts` and of the compiled `dist/sluice`. Kept tiny: `serve` may replace the process
// (see liftFetchLimit) before the rest of Sluice is loaded.
import { liftFetchLimit } from "./upstream/fetch-limit";

const argv = process.argv.slice(2);
if ((argv[0] ?? "serve") === "serve") liftFetchLimit();
const { runCommand } = await import("./cli/run");
const code = await runCommand(argv);
if (code !== 0) process.exit(code);
