// A key's own caps inside the organization's plan: the fields of the key form, a summary, and the form that changes them.
import { useState } from "preact/hooks";
import { api } from "./api";
import { ErrorText } from "./error-text";

export interface Caps {
  maxConcurrency: number | null;
  tokensPer5h: number | null;
  tokensPerMonth: number | null;
}

const fields = [
  ["max_concurrency", "Max concurrent requests", "maxConcurrency"],
  ["tokens_per_5h", "Tokens per 5 hours", "tokensPer5h"],
  ["tokens_per_month", "Tokens per month", "tokensPerMonth"],
] as const;

/** The caps a form holds, as the console API takes them: empty fields are no cap. */
export function capsBody(form: FormData): Record<string, number | null> {
  const body: Record<string, number | null> = {};
  for (const [name] of fields) {
    const value = String(form.get(name) ?? "").trim();
    body[name] = value === "" ? null : Number(value);
  }
  return body;
}

/**
 * The three optional inputs, filled with the key's caps when it has some. Their first value is a default, not a bound
 * value: the page renders again when the key list arrives, and a bound value would wipe what was typed before it did.
 */
export function CapsFields({ caps, label }: { caps?: Caps; label?: string }) {
  return (
    <>
      {fields.map(([name, title, field]) => (
        <label key={name}>
          {title} (optional{label ? `, ${label}` : ""})
          <input name={name} type="number" min={1} step={1} inputMode="numeric" placeholder="no cap" defaultValue={String(caps?.[field] ?? "")} />
        </label>
      ))}
    </>
  );
}

export function capsSummary(caps: Caps): string {
  const parts: string[] = [];
  if (caps.maxConcurrency !== null) parts.push(`${caps.maxConcurrency} at once`);
  if (caps.tokensPer5h !== null) parts.push(`${caps.tokensPer5h.toLocaleString()} / 5 h`);
  if (caps.tokensPerMonth !== null) parts.push(`${caps.tokensPerMonth.toLocaleString()} / month`);
  return parts.length > 0 ? parts.join(" · ") : "plan only";
}

/** The inline form that changes one key's caps. */
export function EditCaps({ keyId, name, caps, onDone }: { keyId: string; name: string; caps: Caps; onDone: () => void }) {
  const [error, setError] = useState("");
  const submit = async (event: Event) => {
    event.preventDefault();
    setError("");
    try {
      await api(`/keys/${keyId}/limits`, capsBody(new FormData(event.target as HTMLFormElement)));
      onDone();
    } catch (caught) {
      setError((caught as Error).message);
    }
  };
  return (
    <form onSubmit={submit} aria-label={`Caps of ${name}`} class="filters">
      <CapsFields caps={caps} />
      <div class="actions">
        <button type="submit" class="primary">
          Save caps
        </button>
        <button type="button" onClick={onDone}>
          Cancel
        </button>
      </div>
      <ErrorText error={error} />
    </form>
  );
}
