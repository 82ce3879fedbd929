/** Inside a compiled executable, modules live in Bun's embedded file system (`/$bunfs/` on POSIX, `B:/~BUN/` on Windows). */
const compiled = /\/\$bunfs\/|~BUN/.test(import.meta.url);

/**
 * The module a worker thread runs, by its path under src/. Run from source, that is the file itself. In the
 * compiled executable each worker is an extra entry point of `bun build --compile` (see the Makefile), embedded
 * under the same path, while import.meta.url names the executable: a URL relative to the caller would not exist.
 */
export function workerModule(pathUnderSource: string): string {
  return compiled ? `./${pathUnderSource}` : new URL(`./${pathUnderSource}`, import.meta.url).href;
}
