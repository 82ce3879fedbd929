// Loaded with `--preload` into a server by bench/promotion.ts. On SIGUSR2: a full collection, then `PROMOTION_WAIT_MS`
// later an eden collection; it appends to `PROMOTION_OUT` one JSON line with the objects of each type and the heap
// size after each. What the eden collection adds is what it promoted: objects allocated since the full collection
// that something still reached, including through old objects that have died since (a settled promise whose result
// is the read it carried, for example), which only the next full collection can tell apart from live ones.
import { appendFileSync } from "node:fs";
import { edenGC, fullGC, heapStats } from "bun:jsc";

const output = process.env.PROMOTION_OUT as string;
const waitMs = Number(process.env.PROMOTION_WAIT_MS ?? 150);

process.on("SIGUSR2", () => {
  fullGC();
  const before = heapStats();
  setTimeout(() => {
    edenGC();
    const after = heapStats();
    const line = {
      before: { heapSize: before.heapSize, extraMemorySize: before.extraMemorySize, objects: before.objectTypeCounts },
      after: { heapSize: after.heapSize, extraMemorySize: after.extraMemorySize, objects: after.objectTypeCounts },
    };
    appendFileSync(output, `${JSON.stringify(line)}\n`);
  }, waitMs);
});
