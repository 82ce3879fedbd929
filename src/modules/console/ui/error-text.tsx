// The one way a page shows what went wrong: announced to screen readers as it appears.

export function ErrorText({ error }: { error: string }) {
  return error ? (
    <p class="error" role="alert">
      {error}
    </p>
  ) : null;
}
