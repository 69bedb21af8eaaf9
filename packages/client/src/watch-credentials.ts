/**
 * A part's credentials as an async iterator: the current generation of each grant first,
 * then every new one. The SDK is a holder of its own: it reads the same deliveries a node
 * agent reads (an ordered consumer, so nothing is kept on the server) and fetches each
 * generation sealed to a key made for this watch.
 */
import { partOfConnection } from "./connect-with-identity.js";
import {
  CredentialListReply,
  Delivery,
  ErrorCodes,
  MeshError,
  NAME_RULE,
  Streams,
  createSealingKey,
  errorMessage,
  isMeshError,
  isValidName,
  subjects,
  backoffMs,
  type CredentialValues,
  mappedEnv,
} from "@mesh/shared";
import { fetchCredential, errorFromReply, orderedMessages, requestJson, type MessageStream, type NatsConnection } from "@mesh/shared/runtime";

/** Which credentials to watch: every requirement of a part, or one. */
export interface WatchCredentialsOptions {
  module: string;
  part: string;
  /** Only this requirement's credential; all of the part's when left out. */
  requirement?: string;
  /**
   * The node the part runs on. Given, or learned from a connection made with the part's identity
   * (`connectWithIdentity`), the watch needs only what that identity allows: it asks the
   * provisioner for the part's current deliveries on that node and listens for new ones, instead
   * of reading the delivery stream (every node) through a consumer of its own.
   */
  node?: string;
  /** How long to wait for the provisioner per fetch; default 5 s. */
  fetchTimeoutMs?: number;
  /**
   * Called for a delivery whose values cannot be fetched and that a retry cannot help (say,
   * the part is no longer a target of the grant). When given, the watch goes on. When not
   * given, such a failure of the newest delivery the watch knows of ends the watch with the
   * error; for an older one (a newer delivery is waiting) it is passed over.
   */
  onError?: (error: MeshError, delivery: Delivery) => void;
  /**
   * Called when the part no longer holds a grant: no installed part of it needs the grant any
   * more (its requirement removed, the module deleted, the part uninstalled), and the mesh has
   * taken it back — its values no longer work at the provider. The application drops what it
   * kept of them. A grant declared again later is yielded anew, from its next generation.
   */
  onWithdrawn?: (grant: { grant: string; requirement: string }) => void;
}

/** One generation of one grant's credential. `values` is secret: never log it. */
export interface CredentialUpdate {
  /** Grant id, `<module>/<requirement>`. */
  grant: string;
  requirement: string;
  generation: number;
  values: CredentialValues;
  /**
   * The values under the variable names the requirement's `env` maps them to (`{ DATABASE_URL:
   * "postgresql://…" }`); empty when it maps none. Secret, as `values`.
   */
  env: Record<string, string>;
}

/**
 * A running watch: iterate it with `for await`. `stop()` ends it (the iteration finishes);
 * `closed` resolves when it has ended, with the error that ended it if any (it never rejects).
 */
export interface CredentialWatch extends AsyncIterable<CredentialUpdate> {
  stop(): Promise<void>;
  readonly closed: Promise<void | Error>;
}

const RETRY_MAX_MS = 10_000;

/**
 * Watches the credentials of `part` of `module` (one `requirement`, or all). Yields the
 * current generation of each grant first, then every newer one, never an older one after a
 * newer. Fetch failures a retry can help (no provisioner running yet) are retried with
 * back-off until they succeed or the watch is stopped.
 *
 * Throws `InvalidName` at once for a bad module, part or requirement name.
 */
export async function watchCredentials(nc: NatsConnection, opts: WatchCredentialsOptions): Promise<CredentialWatch> {
  for (const [what, name] of [
    ["module", opts.module],
    ["part", opts.part],
    ["requirement", opts.requirement],
  ] as const) {
    if (name !== undefined && !isValidName(name)) throw new MeshError(ErrorCodes.InvalidName, `${what} ${JSON.stringify(name)} ${NAME_RULE}`);
  }
  const node = opts.node ?? identityNode(nc, opts.module, opts.part);
  if (node !== undefined) {
    if (!isValidName(node)) throw new MeshError(ErrorCodes.InvalidName, `node ${JSON.stringify(node)} ${NAME_RULE}`);
    return new Watch(nc, await listedDeliveries(nc, { ...opts, node }), opts);
  }
  const filter =
    opts.requirement === undefined
      ? subjects.deliveriesForPart(opts.module, opts.part)
      : subjects.deliveriesForPartRequirement(opts.module, opts.part, opts.requirement);
  return new Watch(nc, streamedDeliveries(await orderedMessages(nc, { stream: Streams.deliveries, filter })), opts);
}

/** Deliveries as the watch reads them: each message's body, and whether a newer one is known to follow. */
interface DeliverySource extends AsyncIterable<{ body: unknown; newerFollows: boolean }> {
  close(): Promise<void>;
  closed(): Promise<void | Error>;
}

/** The delivery stream, read through an ordered consumer. */
function streamedDeliveries(messages: MessageStream): DeliverySource {
  return {
    async *[Symbol.asyncIterator]() {
      for await (const m of messages) yield { body: safeJson(m), newerFollows: m.info.pending > 0 };
    },
    close: async () => void (await messages.close()),
    closed: () => messages.closed(),
  };
}

/** The node of `module`'s part `part` when `nc` was made with that part's identity. */
function identityNode(nc: NatsConnection, module: string, part: string): string | undefined {
  const who = partOfConnection(nc);
  return who?.module === module && who.part === part ? who.node : undefined;
}

/** How often a watch on a part's identity asks for the part's deliveries again, for one a disconnect hid. */
const RELIST_MS = 30_000;

/**
 * The part's deliveries on one node as its identity may read them: the provisioner's list of the
 * current ones (at start, after every reconnect and every {@link RELIST_MS}), and each new one
 * as it is published (a plain subscription: nothing is kept on the server for the watch).
 */
async function listedDeliveries(nc: NatsConnection, opts: WatchCredentialsOptions & { node: string }): Promise<DeliverySource> {
  const items: Array<{ body: unknown; newerFollows: boolean }> = [];
  let wake: (() => void) | undefined;
  let ended: { error?: Error } | undefined;
  let resolveClosed!: (e: void | Error) => void;
  const closed = new Promise<void | Error>((r) => (resolveClosed = r));
  const push = (xs: Array<{ body: unknown; newerFollows: boolean }>) => {
    items.push(...xs);
    wake?.();
  };
  const end = (error?: Error) => {
    if (ended) return;
    ended = error ? { error } : {};
    clearInterval(timer);
    sub.unsubscribe();
    resolveClosed(error);
    wake?.();
  };
  const sub = nc.subscribe(subjects.deliveriesForPartOnNode(opts.node, opts.module, opts.part), {
    callback: (err, m) => {
      if (err) return end(err);
      push([{ body: safeJson(m), newerFollows: false }]);
    },
  });
  const list = async () => {
    const body = await requestJson(
      nc,
      subjects.credentialList(opts.module, opts.node, opts.part),
      {},
      { service: "provisioner", timeoutMs: opts.fetchTimeoutMs ?? 5_000 },
    );
    const refused = errorFromReply(body, `the provisioner refused the list of ${opts.module}/${opts.part}'s credentials on ${opts.node}: `);
    if (refused) throw refused;
    const reply = CredentialListReply.safeParse(body);
    if (!reply.success || !reply.data.ok)
      throw new MeshError(ErrorCodes.Internal, `the reply on ${subjects.credentialList(opts.module, opts.node, opts.part)} does not match its schema`, {
        retryable: true,
      });
    push(reply.data.deliveries.map((d) => ({ body: d, newerFollows: false })));
  };
  const listSoon = () => void list().catch(() => undefined);
  try {
    await list();
  } catch (e) {
    end();
    throw e;
  }
  const timer = setInterval(listSoon, RELIST_MS);
  timer.unref();
  void (async () => {
    for await (const s of nc.status()) {
      if (ended) break;
      if (s.type === "reconnect") listSoon();
    }
  })().catch(() => undefined);
  void nc.closed().then(() => end());
  return {
    async *[Symbol.asyncIterator]() {
      for (;;) {
        const next = items.shift();
        if (next) {
          yield next;
          continue;
        }
        if (ended) return;
        await new Promise<void>((r) => (wake = r));
        wake = undefined;
      }
    },
    close: async () => end(),
    closed: () => closed,
  };
}

class Watch implements CredentialWatch {
  readonly closed: Promise<void | Error>;
  private readonly key = createSealingKey();
  private readonly buffer: CredentialUpdate[] = [];
  private waiter: { resolve: (r: IteratorResult<CredentialUpdate>) => void; reject: (e: Error) => void } | undefined;
  private done = false;
  private error: Error | undefined;
  private wake: (() => void) | undefined;
  /** Newest generation yielded per grant. */
  private readonly yielded = new Map<string, number>();

  constructor(
    private readonly nc: NatsConnection,
    private readonly messages: DeliverySource,
    private readonly opts: WatchCredentialsOptions,
  ) {
    this.closed = this.pump().then(
      () => this.finish(),
      (e: unknown) => this.finish(e instanceof Error ? e : new Error(errorMessage(e))),
    );
  }

  private async pump(): Promise<void> {
    for await (const m of this.messages) {
      if (this.done) break;
      const update = await this.handle(m.body, m.newerFollows);
      if (update && !this.done) this.push(update);
    }
    const ended = await this.messages.closed();
    if (ended instanceof Error && !this.done) throw ended;
  }

  /** The update a message stands for; undefined when there is none to yield. */
  private async handle(body: unknown, newerFollows: boolean): Promise<CredentialUpdate | undefined> {
    const parsed = Delivery.safeParse(body);
    if (!parsed.success) return undefined;
    const d = parsed.data;
    // Only what the subject filter promised: this module's part (and requirement).
    if (d.module !== this.opts.module || d.part !== this.opts.part || (this.opts.requirement !== undefined && d.requirement !== this.opts.requirement)) {
      return undefined;
    }
    if (d.withdraw) {
      if (this.yielded.delete(d.grant)) this.opts.onWithdrawn?.({ grant: d.grant, requirement: d.requirement });
      return undefined;
    }
    if ((this.yielded.get(d.grant) ?? 0) >= d.generation) return undefined;
    for (let attempt = 1; !this.done; attempt++) {
      try {
        const fetched = await fetchCredential(this.nc, { grant: d.grant, part: d.part, node: d.node, generation: d.generation }, this.key, {
          timeoutMs: this.opts.fetchTimeoutMs ?? 5_000,
        });
        this.yielded.set(d.grant, fetched.generation);
        return {
          grant: d.grant,
          requirement: d.requirement,
          generation: fetched.generation,
          values: fetched.values,
          env: mappedEnv(d.env, fetched.values).env,
        };
      } catch (e) {
        if (isMeshError(e) && !e.retryable) {
          if (this.opts.onError) this.opts.onError(e, d);
          else if (!newerFollows) throw e;
          return undefined;
        }
        await this.sleep(backoffMs(attempt + 1, { firstMs: 250, maxMs: RETRY_MAX_MS }));
      }
    }
    return undefined;
  }

  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      function done() {
        clearTimeout(t);
        resolve();
      }
      this.wake = done;
    });
  }

  private push(u: CredentialUpdate): void {
    if (this.waiter) {
      const w = this.waiter;
      this.waiter = undefined;
      w.resolve({ value: u, done: false });
    } else {
      this.buffer.push(u);
    }
  }

  private finish(error?: Error): void | Error {
    const wasDone = this.done;
    this.done = true;
    this.wake?.();
    if (!wasDone) void this.messages.close();
    if (error) this.error = error;
    const w = this.waiter;
    this.waiter = undefined;
    if (w && error) {
      // The error reaches the iteration here, once.
      this.error = undefined;
      w.reject(error);
    } else if (w) {
      w.resolve({ value: undefined, done: true });
    }
    return error;
  }

  async stop(): Promise<void> {
    if (!this.done) {
      this.done = true;
      this.wake?.();
      await this.messages.close();
    }
    await this.closed;
  }

  [Symbol.asyncIterator](): AsyncIterator<CredentialUpdate> {
    return {
      next: () => {
        const u = this.buffer.shift();
        if (u) return Promise.resolve({ value: u, done: false });
        if (this.done) {
          if (this.error) {
            const e = this.error;
            // Thrown once; the iteration is over after it.
            this.error = undefined;
            return Promise.reject(e);
          }
          return Promise.resolve({ value: undefined, done: true });
        }
        return new Promise((resolve, reject) => (this.waiter = { resolve, reject }));
      },
      return: async () => {
        await this.stop();
        return { value: undefined, done: true };
      },
    };
  }
}

function safeJson(m: { json(): unknown }): unknown {
  try {
    return m.json();
  } catch {
    return undefined;
  }
}
