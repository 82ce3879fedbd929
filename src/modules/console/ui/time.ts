/** A time as the pages show it: the reader's locale, or a dash for none. */
export const shownTime = (value: number | null) => (value === null ? "—" : new Date(value).toLocaleString());
