/**
 * NATS subject patterns as sets of subjects, as pure functions: whether a pattern matches a
 * subject, and whether everything a pattern can match is matched by some pattern of a list
 * (a permission "within" a ceiling). Wildcards as NATS has them: `*` is exactly one token, `>`
 * (last token only) one or more trailing tokens. Patterns are taken as already valid
 * ({@link checkSubjectPattern} in nats-permissions.ts).
 */

/** Whether `pattern` matches the subject `subject` (a subject without wildcards). */
export function matches(pattern: string, subject: string): boolean {
  const p = pattern.split(".");
  const s = subject.split(".");
  for (let i = 0; i < p.length; i++) {
    if (p[i] === ">") return s.length > i;
    if (i >= s.length || (p[i] !== "*" && p[i] !== s[i])) return false;
  }
  return p.length === s.length;
}

/**
 * A subject that both `a` and `b` match, or undefined when they share none: `_INBOX.x` for
 * `*.>` and `_INBOX.>`. A subscription to `a` would hear something published under `b`.
 */
export function overlap(a: string, b: string): string | undefined {
  const x = a.split(".");
  const y = b.split(".");
  const out: string[] = [];
  for (let i = 0; ; i++) {
    const s = x[i];
    const t = y[i];
    if (s === undefined || t === undefined) return s === t ? out.join(".") : undefined;
    // `>` takes one or more tokens: the rest of the other pattern, each wildcard made a token.
    if (s === ">" || t === ">") return [...out, ...(s === ">" ? y : x).slice(i).map((v) => (v === "*" || v === ">" ? "x" : v))].join(".");
    if (s !== "*" && t !== "*" && s !== t) return undefined;
    out.push(s === "*" ? (t === "*" ? "x" : t) : s);
  }
}

/**
 * A subject that `pattern` matches and no pattern of `ceiling` does, or undefined when there is
 * none: `pattern` is within the ceiling exactly when this is undefined. The witness is what a
 * refusal can show ("`a.>` reaches `a.x.x`"). Exact, not an approximation: patterns are
 * compared as the sets of subjects they match, so a pattern covered only by several ceiling
 * patterns together (`a.>` by `a.*` and `a.*.>`) is within.
 */
export function uncovered(pattern: string, ceiling: readonly string[]): string | undefined {
  const w = witness(
    pattern.split("."),
    ceiling.map((c) => c.split(".")),
  );
  return w?.join(".");
}

/** Whether every subject `pattern` matches is matched by some pattern of `ceiling`. */
export function within(pattern: string, ceiling: readonly string[]): boolean {
  return uncovered(pattern, ceiling) === undefined;
}

/**
 * The tokens of a subject matched by `p` and by none of `cs`, or undefined. One token at a
 * time: a literal of `p` keeps the ceiling patterns whose token there is that literal or `*`. For
 * a wildcard of `p` the hardest value is a token no ceiling pattern names at that position (a
 * fresh one): only their `*` match it, and a smaller set of ceiling patterns covers less, so
 * whatever that value leaves uncovered is a witness, and if it leaves nothing uncovered no
 * value does. `>` is `*` followed by nothing or by `>` again; each step drops a token from
 * every ceiling pattern, so it ends once none is left.
 */
function witness(p: readonly string[], cs: readonly (readonly string[])[]): string[] | undefined {
  if (p.length === 0) return cs.some((c) => c.length === 0) ? undefined : [];
  // A ceiling pattern at its `>` matches every one-or-more tokens, and `p` has at least one left.
  if (cs.some((c) => c[0] === ">")) return undefined;
  const [head, ...rest] = p as [string, ...string[]];
  const next = (keep: (token: string) => boolean) => cs.filter((c) => c.length > 0 && keep(c[0]!)).map((c) => c.slice(1));
  if (head !== "*" && head !== ">") {
    const w = witness(
      rest,
      next((t) => t === head || t === "*"),
    );
    return w && [head, ...w];
  }
  const token = fresh(cs);
  const star = next((t) => t === "*");
  if (head === "*") {
    const w = witness(rest, star);
    return w && [token, ...w];
  }
  const w = witness([], star) ?? witness([">"], star);
  return w && [token, ...w];
}

/** A token that no pattern of `cs` has as its first token. */
function fresh(cs: readonly (readonly string[])[]): string {
  const taken = new Set(cs.map((c) => c[0]));
  let t = "x";
  while (taken.has(t)) t += "x";
  return t;
}
