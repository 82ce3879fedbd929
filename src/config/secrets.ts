// Where an upstream's key comes from: an environment variable (`api_key_env`), or a file (`api_key_file`: a Docker or
// Kubernetes secret, systemd's LoadCredential=). A file is read again on every reload and when it changes
// (key-file-watch.ts), so a key rotated in it applies without a restart; an environment cannot change under a running
// process. The key itself never enters the configuration object, whose changes are logged and audited.
import { readFileSync, statSync } from "node:fs";
import { ConfigError } from "./load";
import type { Config } from "./schema";

const maxKeyFileBytes = 16 * 1024;

/** Where a key is read from; neither: no key. */
export interface SecretSource {
  env: string | undefined;
  file: string | undefined;
}

/**
 * The key: the variable's value, or the file's content without its surrounding whitespace (the newline an editor or
 * `echo` leaves). Throws ConfigError naming `where` when the file cannot be read or holds nothing.
 */
export function readSecret(source: SecretSource, where: string, environment: Record<string, string | undefined> = process.env): string | undefined {
  if (source.env !== undefined) return environment[source.env];
  if (source.file === undefined) return undefined;
  let text: string;
  try {
    // A key is a few hundred bytes at most: a larger file is the wrong one, and is not read whole into memory.
    if (statSync(source.file).size > maxKeyFileBytes)
      throw new ConfigError(`${where}: ${source.file} is larger than ${maxKeyFileBytes} bytes; it must hold the key alone`);
    text = readFileSync(source.file, "utf8");
  } catch (error) {
    if (error instanceof ConfigError) throw error;
    throw new ConfigError(`${where}: cannot read ${source.file} (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  const key = text.trim();
  if (key === "") throw new ConfigError(`${where}: ${source.file} is empty`);
  if (/[\r\n\0]/.test(key)) throw new ConfigError(`${where}: ${source.file} holds more than one line; it must hold the key alone`);
  return key;
}

/**
 * Reads every key file of a configuration, as the server is about to: a file that cannot be read or holds nothing
 * stops the start, or refuses the reload, with its key named. Only the server reads them: the other commands, which
 * may run as a user the secret is not readable by, never need an upstream's key.
 */
export function checkKeyFiles(config: Config): void {
  for (const [index, model] of config.models.entries()) {
    if (model.apiKeyFile !== undefined) readSecret({ env: undefined, file: model.apiKeyFile }, `invalid configuration key models[${index}].api_key_file`);
  }
  const moderation = config.safety.moderation;
  if (moderation?.apiKeyFile !== undefined)
    readSecret({ env: undefined, file: moderation.apiKeyFile }, "invalid configuration key safety.moderation_api_key_file");
}
