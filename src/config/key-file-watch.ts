// Key files change under a running server without anyone signalling it: a Kubernetes secret's volume is updated in
// place (its `..data` link swapped), Vault Agent or a rotation job rewrites the file. So the server looks at its key
// files' metadata every few seconds and, when one changed, reads the keys again as a reload does (src/cli/serve.ts),
// without reading the configuration file again: an edit to it still waits for its SIGHUP.
import { statSync } from "node:fs";
import type { Config } from "./schema";

/** The files a configuration reads upstream keys from. */
export function keyFilesOf(config: Config): string[] {
  const files = config.models.map((model) => model.apiKeyFile).filter((file) => file !== undefined);
  const moderation = config.safety.moderation?.apiKeyFile;
  return moderation === undefined ? files : [...files, moderation];
}

/** What tells a file's versions apart without reading it: the inode a rename or a link swap changes, size and time. */
function signatureOf(path: string): string {
  try {
    const stats = statSync(path);
    return `${stats.ino}:${stats.size}:${stats.mtimeMs}`;
  } catch (error) {
    return `unreadable:${(error as NodeJS.ErrnoException).code ?? "?"}`;
  }
}

/** Calls `changed` when a key file of the configuration in force (`files`) changed since it was last seen. */
export class KeyFileWatch {
  private seen = new Map<string, string>();
  private readonly timer: ReturnType<typeof setInterval>;

  constructor(
    private readonly files: () => string[],
    private readonly changed: () => void,
    intervalMs: number,
  ) {
    this.remember();
    this.timer = setInterval(() => this.check(), intervalMs);
    this.timer.unref();
  }

  /** Takes the files as they are now as seen: after a reload, which read them. */
  remember(): void {
    this.seen = new Map(this.files().map((file) => [file, signatureOf(file)]));
  }

  stop(): void {
    clearInterval(this.timer);
  }

  private check(): void {
    const before = this.seen;
    this.remember();
    for (const [file, signature] of this.seen) {
      if (before.get(file) !== signature) {
        this.changed();
        return;
      }
    }
  }
}
