import { dirname } from "node:path";

/** Inside a compiled executable, modules live in Bun's embedded file system (`/$bunfs/` on POSIX, `B:/~BUN/` on Windows). */
const compiled = /\/\$bunfs\/|~BUN/.test(import.meta.url);

/**
 * The URL of a module loaded apart from the server's bundle (a worker thread's, or one imported only when needed),
 * by its path under src/. Run from source, that is the file itself. In the compiled executable each is an extra
 * entry point of `bun build --compile` (see the Makefile), embedded under the same path beside the main entry,
 * while import.meta.url names the bundle that imports it: a URL relative to the caller would not exist.
 */
export function entryPointModule(pathUnderSource: string): string {
  return compiled ? `${dirname(Bun.main)}/${pathUnderSource}` : new URL(`./${pathUnderSource}`, import.meta.url).href;
}
