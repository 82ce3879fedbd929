import { basename } from "node:path";
import page from "./ui/index.html";

/** One file of the console's bundle, as served. */
export interface ConsoleAsset {
  body: Blob;
  contentType: string;
}

let assets: Promise<Map<string, ConsoleAsset>> | undefined;

/**
 * The console's bundle (HTML, script, stylesheet) by URL path. The compiled executable carries it built; from source
 * it is bundled on first use. Sluice serves these files itself rather than handing the HTML import to Bun.serve,
 * because Bun's own static routes cannot carry the console's security headers.
 */
export function consoleAssets(): Promise<Map<string, ConsoleAsset>> {
  assets ??= loadAssets().catch((error: unknown) => {
    assets = undefined;
    throw error;
  });
  return assets;
}

async function loadAssets(): Promise<Map<string, ConsoleAsset>> {
  const byPath = new Map<string, ConsoleAsset>();
  if (page.files) {
    for (const file of page.files) {
      byPath.set(file.loader === "html" ? "/" : `/${basename(file.path)}`, { body: Bun.file(file.path), contentType: file.headers["content-type"] });
    }
    return byPath;
  }
  const built = await Bun.build({ entrypoints: [page.index], minify: true });
  if (!built.success) throw new AggregateError(built.logs, "the console's bundle did not build");
  for (const output of built.outputs) {
    const name = output.path.replace(/^\.\//, "");
    byPath.set(name === "index.html" ? "/" : `/${name}`, { body: output, contentType: output.type });
  }
  return byPath;
}
