/**
 * Inboxes: the reply subjects of each identity the mesh issues. A JetStream delivery carries its
 * ack subject as its reply, and a reply subject may be answered once by whoever receives the
 * message (the server's response permission), so an identity that could subscribe to another's
 * inbox could acknowledge, refuse or answer in its name (nats-server 2.9.10, test/security/overhearing.test.ts). Every
 * identity therefore connects with an inbox prefix of its own, may subscribe under no root but
 * to that prefix, and may publish under none but as a response. Pure; nothing here talks to NATS.
 */

/**
 * The roots of every inbox:
 * - `client`: the client library's default, the operator's admin's alone (no identity the mesh issues may use it);
 * - `part`: a part's workload identity, `_MESH_INBOX.<module>.<node>.<part>` (`subjects.partInboxPrefix`);
 * - `grant`: a `nats.user` identity, the control plane's included, `_GRANT_INBOX.<module>.<requirement>` (`subjects.grantInboxPrefix`).
 */
export const InboxRoots = { client: "_INBOX", part: "_MESH_INBOX", grant: "_GRANT_INBOX" } as const;

/** Every subject under an inbox root, as subject patterns (`_INBOX.>`, …). */
export const INBOX_ROOT_PATTERNS: readonly string[] = Object.values(InboxRoots).map((r) => `${r}.>`);

/**
 * True when `subject` lies under one of the {@link InboxRoots}: the only reply subjects a service
 * answers. A request whose reply names anything else (another holder's `$JS.ACK.…`, say) would
 * make the service, which may answer once whatever the reply names, publish there for its sender.
 */
export function isInboxSubject(subject: string | undefined): boolean {
  if (!subject) return false;
  const dot = subject.indexOf(".");
  return dot > 0 && dot < subject.length - 1 && (Object.values(InboxRoots) as string[]).includes(subject.slice(0, dot));
}

/** What {@link confineToInbox} reads and writes of an identity's permissions. */
interface Confinable {
  subscribe: string[];
  denyPublish?: string[];
  denySubscribe?: string[];
}

/**
 * Permissions `p` of an identity whose inbox prefix is `inboxPrefix`, confined to it: it may
 * subscribe to its own prefix and under no other root (a deny wins over any allow, and for a
 * wildcard that reaches a root the server drops those messages), and publish under no root (its
 * answers to requests it received go out through the response permission, which a deny does not
 * stop).
 */
export function confineToInbox<P extends Confinable>(p: P, inboxPrefix: string): P {
  const own = inboxPrefix.slice(0, inboxPrefix.indexOf("."));
  const add = (list: string[] | undefined, more: readonly string[]) => [...new Set([...(list ?? []), ...more])];
  return {
    ...p,
    subscribe: add(p.subscribe, [`${inboxPrefix}.>`]),
    denySubscribe: add(
      p.denySubscribe,
      INBOX_ROOT_PATTERNS.filter((r) => !r.startsWith(`${own}.`)),
    ),
    denyPublish: add(p.denyPublish, INBOX_ROOT_PATTERNS),
  };
}
