/**
 * Which operator meshctl asks as. A named operator's identity (`meshctl admin add`) takes its
 * replies under `_GRANT_INBOX.mesh.operator-<name>`, and may send the operator's requests only
 * on `<subject>.op.<name>`: the services read who asked from that subject (audit.ts in
 * @mesh/shared). The bootstrap admin sends on the bare subject.
 */
import { operatorOfInboxPrefix, operatorSubject } from "@mesh/shared";
import type { NatsConnection } from "@mesh/shared/runtime";

const named = new WeakMap<NatsConnection, string>();

/** Remembers that `nc` was opened with inbox prefix `inboxPrefix`: a named operator's, or not. */
export function rememberIdentity(nc: NatsConnection, inboxPrefix: string | undefined): void {
  const name = operatorOfInboxPrefix(inboxPrefix);
  if (name) named.set(nc, name);
}

/** The named operator `nc` is connected as, if any. */
export function operatorOf(nc: NatsConnection): string | undefined {
  return named.get(nc);
}

/** The subject to send operator request `subject` on over `nc`: its operator's own, or the bare one. */
export function requestSubject(nc: NatsConnection, subject: string): string {
  const name = named.get(nc);
  return name ? operatorSubject(subject, name) : subject;
}
