// The tokenizer's own entry point of the executable (see count.ts): its tables are most of Sluice's code by size,
// so the server's bundle does not carry them, and a server that never counts never loads them.
export { countTokens } from "gpt-tokenizer/encoding/cl100k_base";
