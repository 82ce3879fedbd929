import { existsSync } from "node:fs";
import { openCliContext } from "./context";
import { UsageError, parseCommand } from "./usage";

/** `sluice backup PATH`: a consistent copy of the live database (VACUUM INTO), safe while the server runs. */
export function runBackup(args: string[]): void {
  const { positionals } = parseCommand(args, {}, 1);
  const target = positionals[0] as string;
  if (existsSync(target)) throw new UsageError(`${target} already exists; choose a new file`);
  const context = openCliContext();
  const started = performance.now();
  context.database.sqlite.run("VACUUM INTO ?", [target]);
  console.log(`backup written to ${target} in ${Math.round(performance.now() - started)} ms`);
}
