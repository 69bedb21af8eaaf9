/**
 * Recognising the failures of a NATS request by the error's name along its cause chain
 * (the CLI does not depend on the client's error classes directly).
 */

function causes(e: unknown): unknown[] {
  const out: unknown[] = [];
  for (let cur = e, i = 0; cur && i < 8; cur = (cur as { cause?: unknown }).cause, i++) out.push(cur);
  return out;
}

/** True when a request failed because nothing subscribes to its subject. */
export function isNoResponders(e: unknown): boolean {
  return causes(e).some((c) => c instanceof Error && (c.name === "NoResponders" || c.name === "NoRespondersError" || /no responders/i.test(c.message)));
}

/** True when a request got no reply in time. */
export function isRequestTimeout(e: unknown): boolean {
  return causes(e).some((c) => c instanceof Error && (c.name === "TimeoutError" || /^timeout$/i.test(c.message)));
}

/** The innermost message of an error chain, which usually names the actual problem. */
export function rootMessage(e: unknown): string {
  const list = causes(e).filter((c): c is Error => c instanceof Error);
  const last = list[list.length - 1];
  return last ? last.message : String(e);
}

/** The server's refusal of a subject to this identity (`-ERR 'Permissions Violation for Publish to "…"'`): what and where, or undefined for another failure. */
export function permissionRefusal(e: unknown): { operation: string; subject: string } | undefined {
  for (const c of causes(e)) {
    if (!(c instanceof Error) || c.name !== "PermissionViolationError") continue;
    const { operation, subject } = c as Error & { operation?: string; subject?: string };
    if (operation && subject) return { operation, subject };
  }
  return undefined;
}

/** What meshctl says when the server refused `command` a subject: which, and as whom to run it instead. */
export function permissionRefusalMessage(command: string, refusal: { operation: string; subject: string }): string {
  return (
    `the server refused this process's identity ${refusal.operation === "publish" ? "publishing to" : "subscribing to"} ${JSON.stringify(refusal.subject)}, which ${command} needs: ` +
    "run it as an identity allowed to (the operator's admin: in the mesh's directory meshctl finds it in .mesh/nats-operator/admin.creds, or name it with --creds)"
  );
}
