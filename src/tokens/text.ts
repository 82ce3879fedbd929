/** The text of a message's content: a string, or the `text` of each text part of a content-part array. */
export function textOfContent(content: unknown): string {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  let text = "";
  for (const part of content) {
    if (typeof part === "object" && part !== null && typeof (part as { text?: unknown }).text === "string") {
      text += (text ? "\n" : "") + (part as { text: string }).text;
    }
  }
  return text;
}
