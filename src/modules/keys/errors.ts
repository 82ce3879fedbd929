/** A key change that cannot be made, said in words for the CLI and the console (which names the field). */
export class KeyError extends Error {
  override name = "KeyError";
}
