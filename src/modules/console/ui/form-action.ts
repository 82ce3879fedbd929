// What a page's form does when sent: one place for the error it shows and the fields it clears.
import { useState } from "preact/hooks";

/**
 * `run` sends what a form asks (`send`), clears the form once that worked, and keeps the error to show when it did
 * not.
 */
export function useFormAction() {
  const [error, setError] = useState("");
  const run = async (send: () => Promise<void>, form?: HTMLFormElement) => {
    setError("");
    try {
      await send();
      form?.reset();
    } catch (caught) {
      setError((caught as Error).message);
    }
  };
  return { error, setError, run };
}
